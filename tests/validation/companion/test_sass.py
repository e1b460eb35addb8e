"""The SASS counter of the bench's `sass-counts` command: a kernel's main path, as prologue and loop body."""

from __future__ import annotations

from validation.companion.bench.sass import count

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
