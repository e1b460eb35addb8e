"""The SASS counter of the bench's `sass-counts` command: a kernel's main path, as prologue and loop body."""

from __future__ import annotations

import pytest

from compiled.sass_code import count

# A hand-written main path: 3 instructions, a 3-instruction loop, a skipped division slow path, EXIT, then a
# subroutine that count() must leave out.
SASS = """
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   MOV R1, RZ ;
.L_x_0:
        /*0020*/                   FADD R1, R1, 1 ;
        /*0030*/                   ISETP.NE.AND P0, PT, R1, 8, PT ;
        /*0040*/              @P0 BRA `(.L_x_0) ;
        /*0050*/              @!P1 BRA `(.L_x_1) ;
        /*0060*/                   MOV R33, 0x41000000 ;
        /*0070*/                   MOV R2, 0x90 ;
        /*0080*/                   CALL.REL.NOINC `($__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath) ;
        /*0090*/                   MOV R23, R0 ;
.L_x_1:
        /*00a0*/                   EXIT ;
        /*00b0*/                   RET.REL.NODEC R2 `(kernel) ;
"""


def test_count_splits_prologue_and_loop_and_skips_slow_paths():
    # main path: 11 instructions to EXIT, 3 of them the loop, 4 the skipped slow-path call
    assert count(SASS) == (11 - 3 - 4, 3)


# A 4-instruction spin-wait on an acquire read at system scope, then two copies of a 3-instruction tile loop
# (one per peer): the spin loop is counted once, in the prologue, and the copies are the loop.
SPIN_AND_TILES = """
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   LDG.E.STRONG.SYS R2, desc[UR4][R4.64] ;
        /*0020*/                   CCTL.IVALL ;
        /*0030*/                   ISETP.GE.AND P0, PT, R2, R3, PT ;
        /*0040*/              @!P0 BRA `(.L_x_0) ;
.L_x_1:
        /*0050*/                   LDG.E R6, desc[UR4][R8.64] ;
        /*0060*/                   STG.E desc[UR4][R10.64], R6 ;
        /*0070*/              @P1 BRA `(.L_x_1) ;
        /*0080*/                   IADD3 R8, R8, 0x10, RZ ;
.L_x_2:
        /*0090*/                   LDG.E R6, desc[UR4][R8.64] ;
        /*00a0*/                   STG.E desc[UR4][R12.64], R6 ;
        /*00b0*/              @P1 BRA `(.L_x_2) ;
        /*00c0*/                   ATOMG.E.EXCH.STRONG.SYS PT, RZ, desc[UR4][R12.64], R3 ;
        /*00d0*/                   EXIT ;
"""


def test_count_takes_tile_loop_copies_as_the_loop_and_spin_loops_once():
    # 14 instructions to EXIT: two tile loops of 3, and the rest, the spin loop's 4 once
    assert count(SPIN_AND_TILES) == (14 - 2 * 3, 3)


def test_count_rejects_two_different_loops():
    # without the acquire read the spin loop is a 4-instruction loop beside the 3-instruction ones
    different = SPIN_AND_TILES.replace("LDG.E.STRONG.SYS", "LDG.E").replace("CCTL.IVALL", "IADD3 R1, R1, 1, RZ")
    with pytest.raises(ValueError, match="loops"):
        count(different)


def test_the_mla_launch_strides_are_the_launchers():
    # the tensors mla_decode.mla_decode builds: contiguous q, cache, output, fp32 partials and log-sum-exps
    import torch

    from compiled.companion_sources import mla_int_arguments as _mla_int_arguments

    for splits in (1, 4, 16):
        for padded in (12, 16):
            q, kv = torch.empty(3, padded, 576), torch.empty(3, 1024, 576)
            out = torch.empty(3, padded, 512)
            values = _mla_int_arguments(splits, padded)
            assert values["n_heads"] == padded
            assert (values["stride_qb"], values["stride_qh"]) == q.stride()[:2]
            assert (values["stride_kb"], values["stride_kt"]) == kv.stride()[:2]
            assert (values["stride_ob"], values["stride_oh"]) == out.stride()[:2]
            if splits > 1:
                part, lse = torch.empty(3, splits, padded, 512), torch.empty(3, splits, padded)
                assert (values["stride_pb"], values["stride_ps"], values["stride_ph"]) == part.stride()[:3]
                assert (values["stride_lb"], values["stride_ls"]) == lse.stride()[:2]
            else:
                assert values["stride_pb"] == values["stride_lb"] == 0


def test_the_specialization_is_tritons():
    # the int arguments marked divisible by 16 are those Triton's JIT marks at launch for the same values
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    from compiled.companion_sources import mla_int_arguments as _mla_int_arguments
    from compiled.companion_sources import specialized as _specialized

    for splits, padded in ((1, 12), (4, 12), (16, 12), (16, 16)):
        values = _mla_int_arguments(splits, padded)
        signature = {"ptr": "*bf16", **dict.fromkeys(values, "i32"), "BLOCK": "constexpr"}
        aligned = _specialized(signature, values)
        for name, value in values.items():
            kind, attribute = native_specialize_impl(BaseBackend, value, False, True, True)
            assert kind == "i32"
            assert (attribute == "D") == (name in aligned), (splits, padded, name, value)
        assert ("n_heads" in aligned) == (padded % 16 == 0)
    with pytest.raises(ValueError, match="value 1"):
        _specialized({"n": "i32"}, {"n": 1})
