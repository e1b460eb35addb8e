"""CDNA3/CDNA4 issue costs: MFMA cycles against the published peaks, VALU rates, aliases, LDS, s_nop."""

from __future__ import annotations

import pytest

from compiled.cdna_issue import (
    ARCHS,
    ISSUE_INTERVAL_CYCLES,
    LDS_BANK_BYTES,
    LDS_BANKS,
    LDS_BYTES_PER_CLK,
    LDS_BYTES_PER_CU,
    MFMA_ALIASES,
    S_NOP_CYCLES_PER_WAIT_STATE,
    SIMDS_PER_CU,
    TRANS_OPS,
    VALU_FULL_RATE_CYCLES,
    WAITCNT_SEMANTICS,
    canonical_mfma,
    issue_interval_cycles,
    mfma_cycles,
    mfma_flops,
    mfma_mnemonics,
    mfma_shape,
    s_nop_cycles,
    valu_cycles,
)

# Published dense peaks -> FLOP per clock per CU.
MI300X_BF16 = 1307.4e12 / (2100e6 * 304)  # ~2048
MI355X_BF16 = 2.5e15 / (2400e6 * 256)  # ~4069


def flop_per_clk_per_cu(mnemonic: str, arch: str, **kw: int) -> float:
    return mfma_flops(mnemonic) / mfma_cycles(mnemonic, arch, **kw) * SIMDS_PER_CU


def test_bf16_16x16_reproduces_mi300x_peak():
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x16_bf16", "gfx942") == pytest.approx(MI300X_BF16, rel=0.01)
    assert flop_per_clk_per_cu("v_mfma_f32_32x32x8_bf16", "gfx942") == pytest.approx(MI300X_BF16, rel=0.01)
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x16_f16", "gfx942") == pytest.approx(MI300X_BF16, rel=0.01)


def test_bf16_16x16_reproduces_mi355x_peak():
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x32_bf16", "gfx950") == pytest.approx(MI355X_BF16, rel=0.01)
    assert flop_per_clk_per_cu("v_mfma_f32_32x32x16_bf16", "gfx950") == pytest.approx(MI355X_BF16, rel=0.01)
    # the CDNA3-shaped 16x16x16 keeps its 16 cycles on gfx950: half the CDNA4 peak
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x16_bf16", "gfx950") == pytest.approx(MI355X_BF16 / 2, rel=0.01)


def test_other_cdna3_white_paper_rates():
    # [CDNA3-WP] Table 1, FLOPS/clock/CU
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x32_fp8_fp8", "gfx942") == 4096
    assert flop_per_clk_per_cu("v_mfma_i32_16x16x32_i8", "gfx942") == 4096
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x8_xf32", "gfx942") == 1024
    assert flop_per_clk_per_cu("v_mfma_f32_16x16x4_f32", "gfx942") == 256
    assert flop_per_clk_per_cu("v_mfma_f64_16x16x4_f64", "gfx942") == 256


def test_cdna4_low_precision_rates():
    # MI355X: FP8 ~5 PFLOP/s, FP6/FP4 ~10 PFLOP/s dense at 2.4 GHz on 256 CUs
    fp8 = flop_per_clk_per_cu("v_mfma_f32_16x16x128_f8f6f4", "gfx950")
    fp4 = flop_per_clk_per_cu("v_mfma_f32_16x16x128_f8f6f4", "gfx950", cbsz=4, blgp=4)
    assert fp8 == pytest.approx(2 * MI355X_BF16, rel=0.01)  # FP8 is twice BF16 (~5 PFLOP/s)
    assert fp4 == 2 * fp8
    assert mfma_cycles("v_mfma_scale_f32_32x32x64_f8f6f4", "gfx950") == 64
    assert mfma_cycles("v_mfma_scale_f32_32x32x64_f8f6f4", "gfx950", cbsz=2, blgp=4) == 32
    # one FP8 operand is enough for the long form
    assert mfma_cycles("v_mfma_f32_16x16x128_f8f6f4", "gfx950", cbsz=4, blgp=1) == 32
    with pytest.raises(ValueError):
        mfma_cycles("v_mfma_f32_16x16x128_f8f6f4", "gfx950", cbsz=7)


def test_unknown_mfma_raises_with_mnemonic():
    with pytest.raises(ValueError, match="v_mfma_f32_99x99x1_f32") as err:
        mfma_cycles("v_mfma_f32_99x99x1_f32", "gfx942")
    assert "gfx942" in str(err.value)
    # instructions that exist only on the other chip
    with pytest.raises(ValueError, match="v_mfma_f32_16x16x8_xf32"):
        mfma_cycles("v_mfma_f32_16x16x8_xf32", "gfx950")
    with pytest.raises(ValueError, match="v_mfma_f32_16x16x32_bf16"):
        mfma_cycles("v_mfma_f32_16x16x32_bf16", "gfx942")
    with pytest.raises(ValueError, match="gfx90a"):
        mfma_cycles("v_mfma_f32_16x16x16_bf16", "gfx90a")


def test_1k_and_gfx90a_aliases_resolve():
    for arch in ARCHS:
        assert mfma_cycles("v_mfma_f32_32x32x8bf16_1k", arch) == mfma_cycles("v_mfma_f32_32x32x8_bf16", arch)
        assert mfma_cycles("v_mfma_f32_16x16x16bf16_1k", arch) == mfma_cycles("v_mfma_f32_16x16x16_bf16", arch)
        assert mfma_cycles("v_mfma_f32_4x4x4bf16_1k", arch) == 8
        assert mfma_cycles("v_mfma_f32_32x32x1f32", arch) == 64
        assert mfma_cycles("V_MFMA_F32_16X16X16_BF16_1K", arch) == mfma_cycles("v_mfma_f32_16x16x16_bf16", arch)
        for alias, name in MFMA_ALIASES.items():
            assert mfma_cycles(alias, arch) == mfma_cycles(name, arch)
            assert mfma_shape(alias) == mfma_shape(name)
    assert canonical_mfma("v_mfma_f32_32x32x4bf16_1k") == "v_mfma_f32_32x32x4_2b_bf16"


def test_table_covers_families_and_passes_are_whole():
    for arch in ARCHS:
        names = mfma_mnemonics(arch)
        for family in ("_bf16", "_f16", "_f32", "_i8", "_f64", "_fp8_fp8"):
            assert any(n.endswith(family) and "16x16" in n for n in names), (arch, family)
            assert any(n.endswith(family) and ("32x32" in n or "_f64" in family) for n in names), (arch, family)
        for n in names:
            assert mfma_cycles(n, arch) % 4 == 0  # whole passes of 4 clocks
    assert len(mfma_mnemonics("gfx942")) == 46  # every CDNA3 entry of the Matrix Instruction Calculator


def test_shape_and_flops():
    assert mfma_shape("v_mfma_f32_32x32x1_2b_f32") == (32, 32, 1, 2)
    assert mfma_shape("v_smfmac_f32_16x16x64_fp8_fp8") == (16, 16, 64, 1)
    assert mfma_flops("v_mfma_f32_16x16x16_bf16") == 8192


def test_valu_rates():
    for arch in ARCHS:
        full = valu_cycles("v_fma_f32", arch)
        assert full == VALU_FULL_RATE_CYCLES == 4
        for op in ("v_exp_f32", "v_log_f32", "v_rcp_f32", "v_rsq_f32", "v_sqrt_f32", "v_sin_f32", "v_cos_f32",
                   "v_exp_f16", "v_rcp_iflag_f32", "v_rsq_f64"):
            assert op in TRANS_OPS
            assert valu_cycles(op, arch) == 4 * full  # quarter rate
        assert valu_cycles("v_exp_f32_e32", arch) == 4 * full  # encoding suffix ignored
        assert valu_cycles("v_add_u32_e64", arch) == full
        for op in ("v_fma_f64", "v_add_f64", "v_mul_f64", "v_pk_fma_f32", "v_pk_mul_f32", "v_pk_add_f32"):
            assert valu_cycles(op, arch) == full
        for op in ("v_mul_lo_u32", "v_mul_hi_u32", "v_mul_hi_i32", "v_mad_u64_u32"):
            assert valu_cycles(op, arch) in (full, 4 * full)
    with pytest.raises(ValueError, match="v_mfma_f32_16x16x16_bf16"):
        valu_cycles("v_mfma_f32_16x16x16_bf16", "gfx942")
    with pytest.raises(ValueError, match="s_add_u32"):
        valu_cycles("s_add_u32", "gfx950")


def test_issue_lds_nop_waitcnt():
    assert issue_interval_cycles() == ISSUE_INTERVAL_CYCLES == 4
    assert LDS_BANKS == {"gfx942": 32, "gfx950": 64}
    assert LDS_BANK_BYTES == {"gfx942": 4, "gfx950": 4}
    assert LDS_BYTES_PER_CLK == {"gfx942": 128, "gfx950": 256}
    assert LDS_BYTES_PER_CU["gfx950"] == 160 * 1024
    assert s_nop_cycles(0) == S_NOP_CYCLES_PER_WAIT_STATE
    assert s_nop_cycles(15) == 16 * S_NOP_CYCLES_PER_WAIT_STATE
    with pytest.raises(ValueError):
        s_nop_cycles(16)
    assert "vmcnt" in WAITCNT_SEMANTICS and "lgkmcnt" in WAITCNT_SEMANTICS
