"""Issue costs of AMD CDNA3 (gfx942, MI300X) and CDNA4 (gfx950, MI355X) compute units, with their sources.

What a wave64 instruction costs its SIMD, for a CU issue model fed by an AMDGCN reader:

- `mfma_cycles`: the cycles one MFMA / SMFMAC keeps its SIMD's matrix core busy, i.e. the issue-to-issue
  spacing of back-to-back independent MFMAs of that kind on one SIMD.
- `valu_cycles`: the cycles one VALU instruction keeps its SIMD's vector ALU busy.
- `issue_interval_cycles`: the cycles between two instructions of one wave (the arbiter visits a SIMD once
  every 4 cycles).
- `LDS_BANKS`, `LDS_BANK_BYTES`, `LDS_BYTES_PER_CLK`, `LDS_BYTES_PER_CU`: the LDS of one CU.
- `S_NOP_CYCLES_PER_WAIT_STATE`, `s_nop_cycles`: what `s_nop N` costs.
- `WAITCNT_SEMANTICS`: what `s_waitcnt vmcnt/lgkmcnt` count on gfx9-family chips (gfx942, gfx950).

Sources (every number below names one of these, or says "assumption"):

[CALC]  AMD Matrix Instruction Calculator, github.com/ROCm/amd_matrix_instruction_calculator,
        matrix_calculator.py at commit 2ef91896bcdc4d26624f952e5c905c787cd9bc9e (v1.3.2, May 2025), dict
        `'cdna3'`, field `cycles` of each instruction (the tool's "Execution statistics ... Cycles"). It has
        no CDNA4 table.
[CDNA4-ISA] "AMD Instinct CDNA4 Instruction Set Architecture" reference guide,
        https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/instruction-set-architectures/
        amd-instinct-cdna4-instruction-set-architecture.pdf : Table 28 "MFMA VALU Opcodes" (sec. 7.1.2),
        Table 33 "SMFMA VALU Opcodes" (sec. 7.5), sec. 7.6 / Table 38 (PASS = 4 clock cycles), sec. 2.2.1 and
        sec. 11.1 (LDS), sec. 4.4 (S_WAITCNT counters), sec. 4.5 / Table 12 (trans ops), sec. 8.3 (SMEM
        ordering), sec. 12.5 (S_NOP). Read here through a text transcription of the PDF, not the PDF itself.
[CDNA3-ISA] "AMD Instinct MI300 / CDNA3 Instruction Set Architecture",
        https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/instruction-set-architectures/
        amd-instinct-mi300-cdna3-instruction-set-architecture.pdf (same GCN-lineage chapters 2, 4, 7, 11; not
        re-read in this session, the CDNA3 numbers here come from [CALC], [LLVM-SCHED], [CDNA3-WP], [HIP-HW]).
[CDNA3-WP] "AMD CDNA 3 Architecture" white paper,
        https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/amd-cdna-3-white-paper.pdf
        Table 1 "Generational theoretical peak ... (FLOPS/clock/CU)": Vector FP64 128, Vector FP32 256,
        Matrix FP64 256, Matrix FP32 256, Matrix TF32 1024, Matrix FP16/BF16 2048, Matrix FP8/INT8 4096;
        "The LDS in the AMD CDNA 3 compute units remain at 64KB".
[CDNA4-WP] "AMD CDNA 4 Architecture" white paper,
        https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/white-papers/amd-cdna-4-architecture-whitepaper.pdf
        LDS grown to 160 KB with its read bandwidth doubled. The white paper's exact sentence could not be
        retrieved here; the statement is as reported from chipsandcheese.com/p/amds-cdna-4-architecture-announcement
        (via the summary at hyper.ai/en/headlines/1bdb9e8f5abd51ae7f86de58c1f5311a: "increased from 64 KB to
        160 KB, and read bandwidth has doubled to 256 bytes per clock") and agrees with [CDNA4-ISA] sec. 2.2.1
        (64 banks x 4 B).
[LLVM-SCHED] llvm/lib/Target/AMDGPU/SISchedule.td, github.com/llvm/llvm-project at commit
        cec13294ab6cbb8062b8cc1436fe9328c8e8b7ca: SIDPGFX940FullSpeedModel (gfx942) and SIDPGFX950FullSpeedModel
        (gfx950). VALU classes are in units of one wave64 issue ("The latency values are 1 / (operations / cycle)
        / 4"): Write32Bit 1, WriteTrans32 4, WriteQuarterRate32 4, WriteFloatCvt 4, WriteIntMul 1,
        WriteDouble 1, WriteDoubleAdd 1, WriteTrans64 4, Write64Bit 1. MFMAs are Write{2,4,8,16}PassMAI and
        Write{4,8,16}PassDGEMM. Instruction-to-class mapping: llvm/lib/Target/AMDGPU/VOP3Instructions.td
        (V_MUL_LO/HI_U32/I32 and V_MAD_U64_U32/V_MAD_I64_I32 are WriteIntMul; V_FMA/ADD/MUL_F64 WriteDoubleAdd).
[HIP-HW] ROCm HIP docs, "Hardware implementation", projects/hip/docs/understand/hardware_implementation.rst in
        github.com/ROCm/rocm-systems (https://rocm.docs.amd.com/projects/HIP/en/latest/understand/
        hardware_implementation.html): "executing one instruction takes four cycles (one cycle per 16
        threads)"; the issue arbiter selects "wavefronts from one pool per cycle in round-robin fashion" (four
        pools, one per SIMD); PR github.com/ROCm/rocm-systems/pull/3114 (merged 2026-02): "The LDS contains 32
        (CDNA, CDNA2, and CDNA3) or 64 (CDNA4+ ...) banks, each 4-bytes wide, providing 128 ... or 256 ... bytes
        per cycle total bandwidth."
[GCN-WP] "AMD Graphics Cores Next (GCN) Architecture" white paper (2012),
        https://www.amd.com/Documents/GCN_Architecture_whitepaper.pdf : the CU scheduler considers one SIMD per
        cycle, round robin over its 4 SIMDs, so each SIMD (and each wave) issues at most once per 4 cycles
        (not re-read in this session; [HIP-HW] states the same).
[LLVM-WAITCNT] llvm/lib/Target/AMDGPU/SIInsertWaitcnts.cpp (llvm/llvm-project): "Scalar memory read always can
        go out of order"; "On targets without VScnt, LOAD_CNT includes all of STORE_CNT as well. All these
        events use one counter and do not go out of order with respect to each other."
[MI300X] 1307.4 TFLOP/s dense BF16 at 2100 MHz on 304 CUs = 2048 FLOP/clk/CU ([CDNA3-WP] Table 1).
[MI355X] 2.5 PFLOP/s dense BF16 at 2400 MHz on 256 CUs = 4069 FLOP/clk/CU (figures as given in the task brief;
        AMD MI355X product page https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html, not
        re-read here; 256 CUs also in the ROCm GPU specs table); the 4096 of
        v_mfma_f32_16x16x32_bf16 below is within 1 %.
"""

from __future__ import annotations

import re

ARCHS: tuple[str, ...] = ("gfx942", "gfx950")
"""The chips this module knows: gfx942 = CDNA3 (MI300X/MI325X), gfx950 = CDNA4 (MI350X/MI355X)."""

SIMDS_PER_CU = 4
"""SIMDs in one CU: [HIP-HW] "Four SIMD processors" each of 16 lanes; [CDNA3-WP] Figure 4."""

SIMD_LANES = 16
"""Lanes of one SIMD's vector ALU: [HIP-HW] "Each containing 16 single-precision ALUs"."""

WAVE_SIZE = 64
"""Work-items of a CDNA wavefront: [CDNA4-ISA] Table 1 "Wavefront: A collection of 64 work-items"."""

PASS_CYCLES = 4
"""Clock cycles of one MFMA pass: [CDNA4-ISA] sec. 7.6 "PASS 4 clock cycles"; LLVM's Write<N>PassMAI."""


# --------------------------------------------------------------------------------------------------------------
# MFMA / SMFMAC
# --------------------------------------------------------------------------------------------------------------

_F8F6F4 = "f8f6f4"  # marker: cycles depend on the A/B formats (cbsz / blgp), see `mfma_cycles`

# mnemonic (as the LLVM AMDGPU assembler prints it) -> (gfx942 cycles, gfx950 cycles); None = not on that chip.
# gfx942 column: [CALC] 'cdna3' `cycles`, and it equals 4 x the passes of LLVM's SIDPGFX940FullSpeedModel.
# gfx950 column: [CDNA4-ISA] Table 28 (dense) / Table 33 (sparse) "Cycles"; equal to 4 x the passes of LLVM's
# SIDPGFX950FullSpeedModel except where noted.
_MFMA_TABLE: dict[str, tuple[int | None, int | str | None]] = {
    # FP32 inputs (64 FLOP/clk/SIMD = [CDNA3-WP] Matrix FP32 256/CU): [CALC], [CDNA4-ISA] Table 28 V_MFMA_F32_{*}_F32
    "v_mfma_f32_32x32x1_2b_f32": (64, 64),
    "v_mfma_f32_16x16x1_4b_f32": (32, 32),
    "v_mfma_f32_4x4x1_16b_f32": (8, 8),
    "v_mfma_f32_32x32x2_f32": (64, 64),
    "v_mfma_f32_16x16x4_f32": (32, 32),
    # XF32 (TF32-like), gfx942 only (gfx950 dropped XF32: absent from [CDNA4-ISA] Table 28): [CALC]
    "v_mfma_f32_16x16x8_xf32": (16, None),
    "v_mfma_f32_32x32x4_xf32": (32, None),
    # FP16: [CALC], [CDNA4-ISA] Table 28 rows V_MFMA_F32_{*}_F16
    "v_mfma_f32_32x32x4_2b_f16": (64, 64),
    "v_mfma_f32_16x16x4_4b_f16": (32, 32),
    "v_mfma_f32_4x4x4_16b_f16": (8, 8),
    "v_mfma_f32_32x32x8_f16": (32, 32),
    "v_mfma_f32_16x16x16_f16": (16, 16),
    "v_mfma_f32_16x16x32_f16": (None, 16),  # gfx950: double-K FP16, full CDNA4 rate
    "v_mfma_f32_32x32x16_f16": (None, 32),
    # BF16: [CALC], [CDNA4-ISA] Table 28 rows V_MFMA_F32_{*}_BF16
    "v_mfma_f32_32x32x4_2b_bf16": (64, 64),
    "v_mfma_f32_16x16x4_4b_bf16": (32, 32),
    "v_mfma_f32_4x4x4_16b_bf16": (8, 8),
    "v_mfma_f32_32x32x8_bf16": (32, 32),
    "v_mfma_f32_16x16x16_bf16": (16, 16),  # on gfx950 this is half the CU's BF16 peak
    "v_mfma_f32_16x16x32_bf16": (None, 16),  # gfx950: 16384 FLOP / 16 clk x 4 SIMDs = 4096 FLOP/clk/CU
    "v_mfma_f32_32x32x16_bf16": (None, 32),
    # INT8: [CALC], [CDNA4-ISA] Table 28 rows V_MFMA_I32_{*}_I8
    "v_mfma_i32_32x32x4_2b_i8": (64, 64),
    "v_mfma_i32_16x16x4_4b_i8": (32, 32),
    "v_mfma_i32_4x4x4_16b_i8": (8, 8),
    "v_mfma_i32_32x32x16_i8": (32, 32),
    "v_mfma_i32_16x16x32_i8": (16, 16),
    "v_mfma_i32_16x16x64_i8": (None, 16),
    "v_mfma_i32_32x32x32_i8": (None, 32),
    # FP64: [CALC] (gfx942: 16x16x4 = 8 passes, 4x4x4_4b = 4 passes). gfx950 [CDNA4-ISA] Table 28: 64 and 32.
    # LLVM's SIDPGFX950FullSpeedModel agrees on 16x16x4 (Write16PassDGEMM = 64) but has 4x4x4 as
    # Write4PassDGEMM (16 cycles); the ISA table's 32 is used here.
    "v_mfma_f64_16x16x4_f64": (32, 64),
    "v_mfma_f64_4x4x4_4b_f64": (16, 32),
    # FP8 / BF8 (CDNA3 encodings, kept on gfx950): [CALC], [CDNA4-ISA] Table 28 rows V_MFMA_F32_{*}_BF8_BF8 ...
    "v_mfma_f32_16x16x32_bf8_bf8": (16, 16),
    "v_mfma_f32_16x16x32_bf8_fp8": (16, 16),
    "v_mfma_f32_16x16x32_fp8_bf8": (16, 16),
    "v_mfma_f32_16x16x32_fp8_fp8": (16, 16),
    "v_mfma_f32_32x32x16_bf8_bf8": (32, 32),
    "v_mfma_f32_32x32x16_bf8_fp8": (32, 32),
    "v_mfma_f32_32x32x16_fp8_bf8": (32, 32),
    "v_mfma_f32_32x32x16_fp8_fp8": (32, 32),
    # gfx950 FP8/FP6/FP4 ([CDNA4-ISA] Table 28: "16 or 32" / "32 or 64", "Larger cycle count if either matrix A
    # or B is F8"; LLVM WriteMFMAScale_16X16X128_F8F6F4 = 8 or 4 passes, _32X32X64_ = 16 or 8 passes)
    "v_mfma_f32_16x16x128_f8f6f4": (None, _F8F6F4),
    "v_mfma_f32_32x32x64_f8f6f4": (None, _F8F6F4),
    "v_mfma_scale_f32_16x16x128_f8f6f4": (None, _F8F6F4),
    "v_mfma_scale_f32_32x32x64_f8f6f4": (None, _F8F6F4),
    # SMFMAC (4:2 sparse A) on gfx942: [CALC]; on gfx950: [CDNA4-ISA] Table 33. LLVM: V_SMFMAC_*_16X16X* 4 passes,
    # V_SMFMAC_*_32X32X* 8 passes on both chips.
    "v_smfmac_f32_16x16x32_f16": (16, 16),
    "v_smfmac_f32_32x32x16_f16": (32, 32),
    "v_smfmac_f32_16x16x32_bf16": (16, 16),
    "v_smfmac_f32_32x32x16_bf16": (32, 32),
    "v_smfmac_i32_16x16x64_i8": (16, 16),
    "v_smfmac_i32_32x32x32_i8": (32, 32),
    "v_smfmac_f32_16x16x64_bf8_bf8": (16, 16),
    "v_smfmac_f32_16x16x64_bf8_fp8": (16, 16),
    "v_smfmac_f32_16x16x64_fp8_bf8": (16, 16),
    "v_smfmac_f32_16x16x64_fp8_fp8": (16, 16),
    "v_smfmac_f32_32x32x32_bf8_bf8": (32, 32),
    "v_smfmac_f32_32x32x32_bf8_fp8": (32, 32),
    "v_smfmac_f32_32x32x32_fp8_bf8": (32, 32),
    "v_smfmac_f32_32x32x32_fp8_fp8": (32, 32),
    # gfx950-only SMFMAC ([CDNA4-ISA] Table 33, second part)
    "v_smfmac_f32_16x16x64_f16": (None, 16),
    "v_smfmac_f32_16x16x64_bf16": (None, 16),
    "v_smfmac_f32_32x32x32_f16": (None, 32),
    "v_smfmac_f32_32x32x32_bf16": (None, 32),
    "v_smfmac_i32_16x16x128_i8": (None, 16),
    "v_smfmac_i32_32x32x64_i8": (None, 32),
    "v_smfmac_f32_16x16x128_bf8_bf8": (None, 16),
    "v_smfmac_f32_16x16x128_bf8_fp8": (None, 16),
    "v_smfmac_f32_16x16x128_fp8_bf8": (None, 16),
    "v_smfmac_f32_16x16x128_fp8_fp8": (None, 16),
    "v_smfmac_f32_32x32x64_bf8_bf8": (None, 32),
    "v_smfmac_f32_32x32x64_bf8_fp8": (None, 32),
    "v_smfmac_f32_32x32x64_fp8_bf8": (None, 32),
    "v_smfmac_f32_32x32x64_fp8_fp8": (None, 32),
}

# gfx90a-style spellings that the assembler still accepts on gfx940+ (LLVM VOP3P_Real_MFMA_gfx940_aliases,
# llvm/lib/Target/AMDGPU/VOP3PInstructions.td, reviews.llvm.org/D121741), incl. the legacy `_1k` BF16 names.
# The gfx90a names are [CALC]'s 'cdna2' table; each maps to the CDNA3 instruction with the same opcode.
MFMA_ALIASES: dict[str, str] = {
    "v_mfma_f32_32x32x1f32": "v_mfma_f32_32x32x1_2b_f32",
    "v_mfma_f32_16x16x1f32": "v_mfma_f32_16x16x1_4b_f32",
    "v_mfma_f32_4x4x1f32": "v_mfma_f32_4x4x1_16b_f32",
    "v_mfma_f32_32x32x2f32": "v_mfma_f32_32x32x2_f32",
    "v_mfma_f32_16x16x4f32": "v_mfma_f32_16x16x4_f32",
    "v_mfma_f32_32x32x4f16": "v_mfma_f32_32x32x4_2b_f16",
    "v_mfma_f32_16x16x4f16": "v_mfma_f32_16x16x4_4b_f16",
    "v_mfma_f32_4x4x4f16": "v_mfma_f32_4x4x4_16b_f16",
    "v_mfma_f32_32x32x8f16": "v_mfma_f32_32x32x8_f16",
    "v_mfma_f32_16x16x16f16": "v_mfma_f32_16x16x16_f16",
    "v_mfma_i32_32x32x4i8": "v_mfma_i32_32x32x4_2b_i8",
    "v_mfma_i32_16x16x4i8": "v_mfma_i32_16x16x4_4b_i8",
    "v_mfma_i32_4x4x4i8": "v_mfma_i32_4x4x4_16b_i8",
    "v_mfma_f32_32x32x4bf16_1k": "v_mfma_f32_32x32x4_2b_bf16",
    "v_mfma_f32_16x16x4bf16_1k": "v_mfma_f32_16x16x4_4b_bf16",
    "v_mfma_f32_4x4x4bf16_1k": "v_mfma_f32_4x4x4_16b_bf16",
    "v_mfma_f32_32x32x8bf16_1k": "v_mfma_f32_32x32x8_bf16",
    "v_mfma_f32_16x16x16bf16_1k": "v_mfma_f32_16x16x16_bf16",
    "v_mfma_f64_16x16x4f64": "v_mfma_f64_16x16x4_f64",
    "v_mfma_f64_4x4x4f64": "v_mfma_f64_4x4x4_4b_f64",
}

# Formats of the f8f6f4 MFMAs' `cbsz` (matrix A) and `blgp` (matrix B) fields: LLVM AMDGPU::MFMAScaleFormats
# (FP8_E4M3 = 0, FP8_E5M2 = 1, FP6_E2M3 = 2, FP6_E3M2 = 3, FP4_E2M1 = 4); SISchedule.td PredIsF8_MFMA_SCALE is
# "cbsz <= FP8_E5M2 || blgp <= FP8_E5M2". The assembler omits `cbsz:0 blgp:0`, i.e. FP8 x FP8.
F8F6F4_FORMATS: dict[int, str] = {0: "fp8_e4m3", 1: "fp8_e5m2", 2: "fp6_e2m3", 3: "fp6_e3m2", 4: "fp4_e2m1"}

# gfx950 f8f6f4 cycles: (with an FP8 operand, with FP6/FP4 only): [CDNA4-ISA] Table 28, LLVM SIDPGFX950 model.
_F8F6F4_CYCLES: dict[str, tuple[int, int]] = {"16x16x128": (32, 16), "32x32x64": (64, 32)}

_SHAPE = re.compile(r"_(\d+)x(\d+)x(\d+)(?:_(\d+)b)?_")


def _check_arch(arch: str) -> str:
    a = arch.strip().lower()
    if a not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}: this table knows {', '.join(ARCHS)}")
    return a


def canonical_mfma(mnemonic: str) -> str:
    """The CDNA3/CDNA4 spelling of an MFMA mnemonic: lower case, gfx90a aliases and `_1k` names resolved.

    Returns the name unchanged (lower-cased) if it is not an alias; whether it exists is `mfma_cycles`' call.
    A `_1k` suffix on a name already in CDNA3 spelling (`v_mfma_f32_16x16x16_bf16_1k`) is dropped as well.
    """
    m = mnemonic.strip().lower()
    if m in MFMA_ALIASES:
        return MFMA_ALIASES[m]
    if m.endswith("_1k") and m[:-3] in _MFMA_TABLE:
        return m[:-3]
    return m


def is_mfma(mnemonic: str) -> bool:
    """Whether the mnemonic is a matrix-core instruction (v_mfma*, v_smfmac*), known to this table or not."""
    m = mnemonic.strip().lower()
    return m.startswith(("v_mfma", "v_smfmac"))


def mfma_cycles(mnemonic: str, arch: str, *, cbsz: int = 0, blgp: int = 0) -> int:
    """Cycles one wave64 MFMA/SMFMAC keeps its SIMD's matrix core busy on `arch` ("gfx942" or "gfx950").

    This is the issue-to-issue spacing of back-to-back independent MFMAs of that kind on one SIMD (the
    instruction's pass count times 4 clocks, [CDNA4-ISA] sec. 7.6 "PASS 4 clock cycles"). gfx942 numbers are
    [CALC]'s CDNA3 `cycles`; gfx950 numbers are [CDNA4-ISA] Table 28 / Table 33 "Cycles"; both agree with LLVM's
    SIDPGFX940/950FullSpeedModel pass counts x 4 except `v_mfma_f64_4x4x4_4b_f64` on gfx950 (ISA 32, LLVM 16).

    `cbsz`/`blgp` matter only for gfx950's `v_mfma[_scale]_f32_{16x16x128,32x32x64}_f8f6f4`: they are the A and
    B formats (`F8F6F4_FORMATS`; 0 = FP8 E4M3, the assembler's default when the modifier is not printed). If
    either is FP8/BF8 (<= 1) the instruction takes twice the cycles of FP6/FP4 ([CDNA4-ISA] Table 28: "Larger
    cycle count if either matrix A or B is F8").

    Legacy gfx90a spellings (`v_mfma_f32_32x32x8bf16_1k`, `v_mfma_f32_32x32x1f32`, ...) are accepted
    (`MFMA_ALIASES`). Raises ValueError naming the mnemonic and arch if the instruction is unknown or does not
    exist on that chip (e.g. the xf32 MFMAs on gfx950, the double-K BF16 ones on gfx942).
    """
    a = _check_arch(arch)
    name = canonical_mfma(mnemonic)
    row = _MFMA_TABLE.get(name)
    cycles = None if row is None else row[ARCHS.index(a)]
    if cycles is None:
        raise ValueError(f"unknown MFMA {mnemonic!r} for arch {a}")
    if cycles == _F8F6F4:
        for field, value in (("cbsz", cbsz), ("blgp", blgp)):
            if value not in F8F6F4_FORMATS:
                raise ValueError(f"{mnemonic!r} on {a}: {field}={value} is not an f8f6f4 format (0..4)")
        m, n, k, _ = mfma_shape(name)
        with_fp8, without = _F8F6F4_CYCLES[f"{m}x{n}x{k}"]
        return with_fp8 if min(cbsz, blgp) <= 1 else without
    return int(cycles)


def mfma_shape(mnemonic: str) -> tuple[int, int, int, int]:
    """(M, N, K, blocks) of an MFMA/SMFMAC mnemonic, parsed from its name (`..._MxNxK[_Bb]_...`).

    For an SMFMAC, K is the dense-equivalent K of the 4:2-sparse A ([CDNA4-ISA] sec. 7.5), so
    `mfma_flops` gives the dense-equivalent FLOP the vendor's "sparse" peaks count.
    """
    name = canonical_mfma(mnemonic)
    match = _SHAPE.search(name + "_")
    if match is None:
        raise ValueError(f"no MxNxK shape in MFMA mnemonic {mnemonic!r}")
    m, n, k, blocks = match.groups()
    return int(m), int(n), int(k), int(blocks or 1)


def mfma_flops(mnemonic: str) -> int:
    """FLOP (or integer ops) one wave64 instruction does: 2 * M * N * K * blocks (one FMA = 2 FLOP)."""
    m, n, k, blocks = mfma_shape(mnemonic)
    return 2 * m * n * k * blocks


def mfma_mnemonics(arch: str) -> tuple[str, ...]:
    """Every MFMA/SMFMAC mnemonic (CDNA3/CDNA4 spelling) this table has for `arch`."""
    i = ARCHS.index(_check_arch(arch))
    return tuple(name for name, row in _MFMA_TABLE.items() if row[i] is not None)


# --------------------------------------------------------------------------------------------------------------
# VALU
# --------------------------------------------------------------------------------------------------------------

VALU_FULL_RATE_CYCLES = WAVE_SIZE // SIMD_LANES
"""4: a wave64 VALU instruction on a 16-lane SIMD takes 4 cycles ([HIP-HW]: "executing one instruction takes four
cycles (one cycle per 16 threads)"); LLVM's Write32Bit = 1 issue unit ([LLVM-SCHED])."""

VALU_QUARTER_RATE_CYCLES = 4 * VALU_FULL_RATE_CYCLES
"""16: a quarter-rate VALU op (LLVM WriteTrans32 / WriteTrans64 / WriteQuarterRate32 = 4 issue units on gfx940
and gfx950, [LLVM-SCHED]; SISchedule.td: "F16 or F32 transcendental instructions (these are quarter rate)")."""

TRANS_OPS: frozenset[str] = frozenset({
    # [CDNA4-ISA] sec. 4.5 Table 12 "Trans Ops" (the same list is LLVM's WriteTrans32 / WriteTrans64 set)
    "v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rcp_iflag_f32", "v_rsq_f32", "v_sqrt_f32", "v_sin_f32", "v_cos_f32",
    "v_rcp_f64", "v_rsq_f64", "v_sqrt_f64",
    "v_rcp_f16", "v_sqrt_f16", "v_rsq_f16", "v_log_f16", "v_exp_f16", "v_sin_f16", "v_cos_f16",
    "v_exp_legacy_f32", "v_log_legacy_f32",
})
"""Transcendental VALU ops, quarter rate (16 cycles/wave64): list [CDNA4-ISA] Table 12, rate [LLVM-SCHED]."""

QUARTER_RATE_OPS: frozenset[str] = frozenset({"v_qsad_pk_u16_u8", "v_mqsad_u32_u8"})
"""Other quarter-rate VALU ops: LLVM WriteQuarterRate32 (VOP3Instructions.td) = 4 issue units ([LLVM-SCHED])."""

INT_MUL32_OPS: frozenset[str] = frozenset({
    "v_mul_lo_u32", "v_mul_hi_u32", "v_mul_lo_i32", "v_mul_hi_i32", "v_mad_u64_u32", "v_mad_i64_i32",
})
"""32-bit integer multiplies: LLVM class WriteIntMul (VOP3Instructions.td).

gfx942/gfx950: WriteIntMul = 1 issue unit (full rate, 4 cycles) in both SIDPGFX940FullSpeedModel and
SIDPGFX950FullSpeedModel ([LLVM-SCHED]), as in gfx90a's SIDPFullSpeedModel; GCN chips (SIFullSpeedModel,
SIQuarterSpeedModel) have WriteIntMul = 4 (quarter rate). No AMD CDNA document found states the rate; the
full-DP-rate CDNA multiplier makes full rate plausible. `INT_MUL32_CYCLES` holds the value used; override it
(e.g. to 16 for the GCN quarter rate) if a measurement disagrees."""

INT_MUL32_CYCLES: dict[str, int] = {"gfx942": 4, "gfx950": 4}
"""Cycles of a wave64 32-bit integer multiply: [LLVM-SCHED] WriteIntMul = 1 on gfx940/gfx950 (see INT_MUL32_OPS)."""

F64_FULL_RATE_OPS: frozenset[str] = frozenset({
    "v_fma_f64", "v_add_f64", "v_mul_f64", "v_min_f64", "v_max_f64", "v_ldexp_f64", "v_div_fixup_f64",
    "v_div_scale_f64", "v_div_fmas_f64", "v_trig_preop_f64", "v_fract_f64", "v_frexp_mant_f64",
    "v_frexp_exp_i32_f64", "v_floor_f64", "v_ceil_f64", "v_trunc_f64", "v_rndne_f64",
    "v_cvt_f64_f32", "v_cvt_f32_f64", "v_cvt_f64_i32", "v_cvt_f64_u32", "v_cvt_i32_f64", "v_cvt_u32_f64",
})
"""FP64 VALU ops at full rate (4 cycles) on gfx942/gfx950: [CDNA3-WP] Table 1 Vector FP64 = 128 FLOPS/clk/CU
= 4 SIMDs x 16 lanes x 2 (FMA), i.e. one v_fma_f64 per lane per clock; [LLVM-SCHED] WriteDouble = WriteDoubleAdd
= WriteDoubleCvt = 1 on gfx940 and gfx950. For gfx950, MI355X's vector FP64 of 78.6 TFLOP/s (AMD spec, quoted
from memory, not re-read) = 256 CUs x 2.4 GHz x 128 gives the same per-CU rate. (v_rcp/rsq/sqrt_f64 are trans
ops, quarter rate.)"""

PACKED_FP32_OPS: frozenset[str] = frozenset({"v_pk_fma_f32", "v_pk_mul_f32", "v_pk_add_f32", "v_pk_mov_b32"})
"""Packed FP32 ops: full rate (4 cycles) doing 2 values per lane: [CDNA3-WP] Table 1 Vector FP32 = 256
FLOPS/clk/CU = 4 SIMDs x 16 lanes x 2 values x 2 (FMA), twice the 128 of one v_fma_f32 per lane per clock."""

_ENCODING_SUFFIX = re.compile(r"_(e32|e64|sdwa|dpp|dpp8|dpp16)$")


def _canonical_valu(mnemonic: str) -> str:
    m = mnemonic.strip().lower()
    return _ENCODING_SUFFIX.sub("", m)


def valu_cycles(mnemonic: str, arch: str) -> int:
    """Cycles one wave64 VALU instruction keeps its SIMD's vector ALU busy on `arch` ("gfx942" or "gfx950").

    - transcendentals (`TRANS_OPS`: v_exp/log/rcp/rsq/sqrt/sin/cos in f32 and f16, v_rcp_iflag_f32, and
      v_rcp/rsq/sqrt_f64): 16, quarter rate ([CDNA4-ISA] Table 12 list, [LLVM-SCHED] WriteTrans32/64 = 4).
    - `QUARTER_RATE_OPS` (v_qsad_pk_u16_u8, v_mqsad_u32_u8): 16 ([LLVM-SCHED] WriteQuarterRate32 = 4).
    - 32-bit integer multiplies (`INT_MUL32_OPS`): `INT_MUL32_CYCLES[arch]` = 4 ([LLVM-SCHED] WriteIntMul = 1 on
      gfx940/gfx950; NOT quarter rate as on GCN, see `INT_MUL32_OPS`).
    - FP64 arithmetic (`F64_FULL_RATE_OPS`): 4, full rate ([CDNA3-WP] Table 1, [LLVM-SCHED]).
    - packed FP32 (`PACKED_FP32_OPS`): 4 for 2 values per lane ([CDNA3-WP] Table 1).
    - every other v_* instruction: 4 (`VALU_FULL_RATE_CYCLES`; [HIP-HW], LLVM Write32Bit = 1). Assumption for
      ops LLVM classes otherwise: f32<->int/f16 conversions (LLVM WriteFloatCvt = 4, "taken from AMD Accelerated
      Parallel Processing guide. They may not be accurate") and 64-bit shifts (Write64Bit = 1) are taken as
      full rate; DPP/SDWA/e64 encodings cost the same as the base op.

    Encoding suffixes (`_e32`, `_e64`, `_sdwa`, `_dpp`) are ignored. Raises ValueError for an unknown arch, a
    non-VALU mnemonic (not `v_*`) or an MFMA (use `mfma_cycles`).
    """
    a = _check_arch(arch)
    m = _canonical_valu(mnemonic)
    if is_mfma(m):
        raise ValueError(f"{mnemonic!r} is an MFMA, not a VALU op: use mfma_cycles (arch {a})")
    if not m.startswith("v_"):
        raise ValueError(f"{mnemonic!r} is not a VALU instruction (arch {a})")
    if m in TRANS_OPS or m in QUARTER_RATE_OPS:
        return VALU_QUARTER_RATE_CYCLES
    if m in INT_MUL32_OPS:
        return INT_MUL32_CYCLES[a]
    return VALU_FULL_RATE_CYCLES


# --------------------------------------------------------------------------------------------------------------
# Issue
# --------------------------------------------------------------------------------------------------------------

ISSUE_INTERVAL_CYCLES = 4
"""Cycles between two instructions of the same wave: the CU's issue arbiter serves one SIMD's wave pool per
cycle, round robin over the 4 SIMDs ([HIP-HW]: "selecting wavefronts from one pool per cycle in round-robin
fashion", four pools; [GCN-WP]), so a SIMD, and any one wave on it, gets an issue slot once every 4 cycles.
On that slot the SIMD may issue up to one instruction each to VALU, VMEM, SALU/SMEM, LDS and branch, from
different waves ([HIP-HW]: "a theoretical maximum of five instructions per cycle")."""


def issue_interval_cycles() -> int:
    """Cycles between two instructions of one wave on its SIMD: 4 (`ISSUE_INTERVAL_CYCLES`, [HIP-HW], [GCN-WP])."""
    return ISSUE_INTERVAL_CYCLES


# --------------------------------------------------------------------------------------------------------------
# LDS
# --------------------------------------------------------------------------------------------------------------

LDS_BANKS: dict[str, int] = {"gfx942": 32, "gfx950": 64}
"""LDS banks per CU. gfx942: 32 ([HIP-HW] PR #3114 "32 (CDNA, CDNA2, and CDNA3)"; rocprofiler-compute's gfx942
system info uses lds_banks_per_cu = 32). gfx950: 64 ([CDNA4-ISA] sec. 2.2.1 "configured with 64 banks, each with 640
entries of 4 bytes", sec. 11.1 "segmented into 64 banks of 640 Dwords"; [HIP-HW] PR #3114 "64 (CDNA4+ ...)").
Note: rocprofiler-compute's src/rocprof_compute_soc/soc_gfx950.py still sets lds_banks_per_cu = 32."""

LDS_BANK_BYTES: dict[str, int] = {"gfx942": 4, "gfx950": 4}
"""Width of one LDS bank: 4 bytes (one Dword) on both ([HIP-HW] PR #3114 "each 4-bytes wide"; [CDNA4-ISA] sec.
11.1 "each bank being 32bits wide")."""

LDS_BYTES_PER_CLK: dict[str, int] = {a: LDS_BANKS[a] * LDS_BANK_BYTES[a] for a in ARCHS}
"""LDS bytes one CU moves per clock with no bank conflicts: banks x bank width = 128 (gfx942) and 256 (gfx950)
([HIP-HW] PR #3114: "providing 128 (CDNA, CDNA2, and CDNA3) or 256 (CDNA4+ ...) bytes per cycle"; [CDNA4-WP]:
read bandwidth doubled, as reported by chipsandcheese, "256 bytes per clock")."""

LDS_BYTES_PER_CU: dict[str, int] = {"gfx942": 64 * 1024, "gfx950": 160 * 1024}
"""LDS capacity of one CU: 64 KiB on gfx942 ([CDNA3-WP] "remain at 64KB"), 160 KiB on gfx950 ([CDNA4-ISA] sec.
2.2.1 "Each compute unit has a 160 kB memory space"; [CDNA4-WP]; ROCm GPU specs table "LDS (KiB) 160")."""


# --------------------------------------------------------------------------------------------------------------
# s_nop and s_waitcnt
# --------------------------------------------------------------------------------------------------------------

S_NOP_MAX_WAIT_STATES = 16
"""`s_nop N` inserts N+1 wait states, N = SIMM16[3:0] in 0..15 ([CDNA4-ISA] sec. 12.5 S_NOP "Insert 0..15 wait
states based on SIMM16[3:0]"; sec. 4.1 Table 9 "it can be repeated in hardware up to 16 times")."""

S_NOP_CYCLES_PER_WAIT_STATE = 4
"""Clock cycles one wait state costs the issuing wave: 4, derived (not stated verbatim by a source).

Conflict of sources: the S_NOP text in [CDNA4-ISA] sec. 12.5 reads "0x0 means the next instruction can issue on
the next clock, 0xf means ... 16 clocks later" (1 clock per wait state; wording shared with RDNA ISA guides,
where a wave32 can issue every clock). On CDNA a wave gets an issue slot only every `ISSUE_INTERVAL_CYCLES` = 4
clocks, and the same guide's MFMA dependency table ([CDNA4-ISA] Table 38, with "PASS 4 clock cycles") requires
only 5 / 8 / 12 / 20 waits between a 2 / 4 / 8 / 16-pass XDL MFMA (8 / 16 / 32 / 64 clocks) and a VALU reading
its result, which would be too few unless each wait spans one 4-clock issue slot (passes + 4 waits ~ the
MFMA's 4 x passes clocks + 16). LLVM's GCNHazardRecognizer likewise counts one wait state per instruction issued
and N+1 per `s_nop N`. So one wait state = one issue slot of the wave = 4 clocks here; use 1 to follow the
literal ISA text."""


def s_nop_cycles(n: int) -> int:
    """Cycles `s_nop n` holds its wave: (n + 1) wait states x `S_NOP_CYCLES_PER_WAIT_STATE` (n in 0..15)."""
    if not 0 <= n < S_NOP_MAX_WAIT_STATES:
        raise ValueError(f"s_nop takes 0..{S_NOP_MAX_WAIT_STATES - 1}, got {n}")
    return (n + 1) * S_NOP_CYCLES_PER_WAIT_STATE


WAITCNT_SEMANTICS = """\
s_waitcnt on gfx9-family chips (gfx942, gfx950): wait until each named counter is at or below its value.
Source: [CDNA4-ISA] sec. 4.4 "Data Dependency Resolution" (GCN-lineage text shared with [CDNA3-ISA] sec. 4.4),
sec. 8.3, sec. 10.2; LLVM SIInsertWaitcnts.cpp ([LLVM-WAITCNT]).

vmcnt (VM_CNT): vector memory operations: MUBUF/MTBUF/global/scratch/FLAT loads AND stores (gfx9 has no separate
  vscnt; that counter came with gfx10). +1 per instruction issued; -1 for a load when its data is written to the
  VGPRs, for a store when its data is written to L2. "Memory reads and writes return in the order they were
  issued, including mixing reads and writes", so `s_waitcnt vmcnt(N)` means all but the last N vector memory
  instructions have completed ([LLVM-WAITCNT]: "LOAD_CNT includes all of STORE_CNT ... do not go out of order").
lgkmcnt (LGKM_CNT): LDS (DS) instructions (+1 each; -1 when a read's data reaches the VGPRs or a write reaches
  LDS), GDS, scalar memory (SMEM, +1 for a 1-dword load, +2 for larger; "S_memtime counts the same as an
  s_load_dwordx2") and messages (S_SENDMSG). Instructions of one type return in order, except scalar memory
  reads, which "can return out-of-order" (sec. 8.3; [LLVM-WAITCNT] "Scalar memory read always can go out of
  order"), so after SMEM only lgkmcnt(0) is exact; types are also out of order with each other.
FLAT instructions increment both vmcnt and lgkmcnt (sec. 10.2: data may come from LDS or memory), so only a
  count of 0 is reliable after them; global_*/scratch_* use vmcnt only (sec. 10.4, 10.5).
expcnt: exports / GDS; unused on CDNA ("EXP_CNT: VGPR-export count: unused").
"""
"""What `s_waitcnt vmcnt/lgkmcnt` count and in which order they complete on gfx942/gfx950, with sources."""
