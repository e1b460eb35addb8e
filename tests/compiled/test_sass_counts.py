"""The recorded SASS counts behind the roofline's issue term, and how the suites hand them to the model."""

from __future__ import annotations

import pytest

from compiled.kernel import Compiled
from compiled.sass_counts import compiled
from hwmodels.work import Work
from workloads.kernels import Quantize


def test_counts_scale_with_iterations_and_warps():
    instructions, registers = compiled("h200", "kda_scan", "chunk=64 bv=32", 0)
    more, _ = compiled("h200", "kda_scan", "chunk=64 bv=32", 10)
    assert registers > 0 and more > instructions
    assert (more - instructions) % 10 == 0


def test_unknown_kernel_names_the_missing_code_and_why():
    with pytest.raises(ValueError, match=r"no compiled code of nope 'x' for h200: .*no companion kernel 'nope'"):
        compiled("h200", "nope", "x")


def test_compiled_sets_each_launch_and_checks_the_launch_count():
    model = Quantize(values=1 << 20, codec="int4")
    (work,) = Compiled(model, (2400.0,), (32,)).launches()
    assert isinstance(work, Work)
    assert work.warp_instructions_per_workgroup == 2400.0 and work.registers_per_thread == 32
    assert work.bytes == model.launches()[0].bytes
    with pytest.raises(ValueError, match="1 launches, 2 instruction counts"):
        Compiled(model, (1.0, 2.0), (1, 2)).launches()
