"""The SASS counter behind the roofline's issue term, and how the suites hand its counts to the model."""

from __future__ import annotations

import pytest

from hwmodels.work import Work
from validation.comparison import Compiled
from validation.sass_counts import compiled, count
from workloads.kernels import Quantize

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


def test_counts_scale_with_iterations_and_warps():
    instructions, registers = compiled("h200", "kda_scan", "chunk=64 bv=32", 0)
    more, _ = compiled("h200", "kda_scan", "chunk=64 bv=32", 10)
    assert registers > 0 and more > instructions
    assert (more - instructions) % 10 == 0


def test_unknown_kernel_names_the_missing_count():
    with pytest.raises(ValueError, match="no SASS count of nope"):
        compiled("h200", "nope", "x")


def test_compiled_sets_each_launch_and_checks_the_launch_count():
    model = Quantize(values=1 << 20, codec="int4")
    (work,) = Compiled(model, (2400.0,), (32,)).launches()
    assert isinstance(work, Work)
    assert work.warp_instructions_per_workgroup == 2400.0 and work.registers_per_thread == 32
    assert work.bytes == model.launches()[0].bytes
    with pytest.raises(ValueError, match="1 launches, 2 instruction counts"):
        Compiled(model, (1.0, 2.0), (1, 2)).launches()
