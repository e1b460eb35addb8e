"""A dependent DRAM round trip under the launch's own traffic: the H200's curves are refitted from the loaded-latency
probe, the factors follow them, and a launch's time is the fixed point of its rates and its latency."""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels import loaded_latency
from hwmodels.calibration import load_calibration
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from hwmodels.specfile import FieldError

TB = 1e12


def test_the_h200_curves_are_the_probe_rows():
    from validation.probes import loaded_latency_pairs

    gpu, fitted = load_gpu("h200"), loaded_latency_pairs()
    assert fitted is not None
    assert gpu.dram_latency_under_reads == fitted["reads"]
    assert gpu.dram_latency_under_copies == fitted["copies"]
    assert gpu.dram_latency_under_writes == fitted["writes"]
    # what the probe showed: at the same rate writes hold a round trip back far longer than reads
    reads = loaded_latency.latency_factor(gpu, 3.4 * TB, 0.0)
    writes = loaded_latency.latency_factor(gpu, 0.0, 3.4 * TB)
    assert reads < 1.2 < 2.0 < writes


def test_the_factor_is_read_off_the_curves_and_between_them_by_write_share():
    gpu = load_gpu("h200")
    rates, factors = gpu.dram_latency_under_writes[::2], gpu.dram_latency_under_writes[1::2]
    for rate, factor in zip(rates, factors, strict=True):  # on the points
        assert loaded_latency.latency_factor(gpu, 0.0, rate * TB) == pytest.approx(factor)
    mid = (rates[-2] + rates[-1]) / 2  # linear between them
    assert loaded_latency.latency_factor(gpu, 0.0, mid * TB) == pytest.approx((factors[-2] + factors[-1]) / 2)
    # beyond the last point: the last factor (nothing was measured there)
    assert loaded_latency.latency_factor(gpu, 0.0, 9 * TB) == pytest.approx(factors[-1])
    # nothing moved, or a GPU without the curves: the idle latency
    assert loaded_latency.latency_factor(gpu, 0.0, 0.0) == 1.0
    assert loaded_latency.latency_factor(load_gpu("mi355x"), 2 * TB, 2 * TB) == 1.0
    # at one total rate the factor grows with the write share, through the copies' curve at one half
    total = 2.8 * TB
    by_share = [loaded_latency.latency_factor(gpu, total * (1 - s), total * s) for s in (0, 0.25, 0.5, 0.75, 1)]
    assert by_share == sorted(by_share)
    copies = loaded_latency.latency_factor(gpu, total / 2, total / 2)
    assert copies == pytest.approx(loaded_latency._on_curve(gpu.dram_latency_under_copies, total))


def test_bad_curves_name_the_field():
    gpu = load_gpu("h200")
    for key, pairs, problem in (("dram_latency_under_writes", (2.0, 1.1, 1.0, 1.2), "ascending"),
                                ("dram_latency_under_reads", (1.0, 0.9), "at least 1"),
                                ("dram_latency_under_copies", (), "all three")):
        with pytest.raises(FieldError, match=problem) as raised:
            dataclasses.replace(gpu, **{key: pairs})
        assert raised.value.key in (key, "dram_latency_under_reads")


def _kda_verify_launch(seqs: int, tile_cols: int):
    from compiled.launch_time import launch_works
    from workloads.kda_kernels import KdaVerify

    (work,) = launch_works(KdaVerify(seqs=seqs, positions=4, heads=12, tile_cols=tile_cols), load_gpu("h200"))
    return work


def test_a_launch_takes_the_latency_its_own_traffic_makes():
    """The KDA verify recurrence at 64 sequences writes its states at about 2 TB/s and waits on dependent loads:
    timed at the factors of its own rates, it lands on the fixed point, slower than at the idle latency."""
    gpu, calib = load_gpu("h200"), load_calibration("h200")
    work = _kda_verify_launch(64, 32)
    loaded = kernel_time(work, gpu, calib, LaunchMode.GRAPH)
    idle_gpu = dataclasses.replace(gpu, dram_latency_under_reads=(), dram_latency_under_copies=(),
                                   dram_latency_under_writes=())
    idle = kernel_time(work, idle_gpu, calib, LaunchMode.GRAPH)
    assert loaded.time_s > 1.03 * idle.time_s
    assert loaded.dram_latency_factor > 1.3 and idle.dram_latency_factor == 1.0
    # the fixed point: the time's own rates give the factor that gives the time
    factor = loaded_latency.latency_factor(gpu, work.read_bytes / loaded.latency_s,
                                                work.write_bytes / loaded.latency_s)
    at_factor = dataclasses.replace(idle_gpu, dram_latency_s=gpu.dram_latency_s * factor)
    assert kernel_time(work, at_factor, calib, LaunchMode.GRAPH).latency_s == pytest.approx(loaded.latency_s,
                                                                                             rel=0.005)
    # a launch that moves little is left at the idle latency
    small = _kda_verify_launch(1, 32)
    assert kernel_time(small, gpu, calib, LaunchMode.GRAPH).time_s == pytest.approx(
        kernel_time(small, idle_gpu, calib, LaunchMode.GRAPH).time_s, rel=0.01)


def test_infersim_kernel_reports_the_factor(capsys):
    import json

    from infersim.cli import main

    assert main(["kernel", "kda-verify", "--hw", "h200", "--param", "seqs=64", "--param", "heads=12",
                 "--param", "positions=4", "--launch", "graph", "--json"]) == 0
    (launch,) = json.loads(capsys.readouterr().out)["launches"]
    assert launch["dram_latency_factor"] > 1.3
    assert main(["kernel", "kda-verify", "--hw", "mi355x", "--param", "seqs=64", "--param", "heads=12",
                 "--param", "positions=4", "--launch", "graph", "--json"]) == 0
    (launch,) = json.loads(capsys.readouterr().out)["launches"]
    assert launch["dram_latency_factor"] == 1.0  # no curves measured there
