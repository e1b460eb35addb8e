"""Links and collectives: fair sharing, wire bytes per algorithm, codecs, and the selection policy."""

from __future__ import annotations

import pytest

from hwmodels.calibration import load_calibration
from hwmodels.interconnect import Link, Transfer, build_fabric, fair_rates, gpu_node, transfer_finish_s
from hwmodels.spec import load_gpu, load_platform
from simulator.cost.collective_algorithms import Algorithm, allreduce_phases, gather_phases, wire_bytes_per_rank
from simulator.cost.collective_policy import collective_time, quickreduce_min_bytes, select_allreduce
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp

MI355X, H200 = load_gpu("mi355x"), load_gpu("h200")
MESH = build_fabric(load_platform("mi355x-8"), MI355X)
SWITCH = build_fabric(load_platform("h200-8"), H200)
PAIR = build_fabric(load_platform("h200-2"), H200)


def test_fair_share_splits_a_link_equally_and_respects_the_slowest_hop():
    a = Link("a", "b", 100.0, 0.0)
    b = Link("b", "c", 30.0, 0.0)
    assert fair_rates([(a,), (a,)]) == [50.0, 50.0]
    # flow 0 is held to 30 by link b; flow 1 gets the rest of link a
    assert fair_rates([(a, b), (a,)]) == pytest.approx([30.0, 70.0])


def test_transfers_re_share_when_one_finishes():
    # two flows on one 100 B/s link: the small one ends at 2 s (50 B/s), then the big one runs alone
    fabric = PAIR
    link_bw = fabric.links[(gpu_node(0), gpu_node(1))].bandwidth_bytes_per_s
    alpha = fabric.links[(gpu_node(0), gpu_node(1))].latency_s
    small, big = link_bw * 1.0, link_bw * 3.0
    finish = transfer_finish_s(fabric, [Transfer("gpu0", "gpu1", small), Transfer("gpu0", "gpu1", big)])
    assert finish[0] == pytest.approx(alpha + 2.0)
    assert finish[1] == pytest.approx(alpha + 2.0 + 2.0)  # 1 unit sent by then; 2 more at the full rate
    assert transfer_finish_s(fabric, [Transfer("gpu1", "gpu0", 0.0)]) == [alpha]


def test_a_switch_route_has_two_hops_and_a_mesh_one():
    assert len(SWITCH.route("gpu0", "gpu5")) == 2
    assert len(MESH.route("gpu0", "gpu5")) == 1
    # a full mesh spreads 7 links over 7 peers; all of them together make the GPU's bandwidth
    assert MESH.gpu_bandwidth_bytes_per_s == pytest.approx(7 * 76.8e9 * 0.75)
    with pytest.raises(ValueError, match="no route"):
        PAIR.route("gpu0", "gpu5")


@pytest.mark.parametrize("n", [2, 4, 8])
def test_wire_bytes_per_rank_of_each_all_reduce(n):
    size = 64 * 2**20
    ring = wire_bytes_per_rank(allreduce_phases(Algorithm.RING, size, n, MESH), n)
    assert ring == pytest.approx(2 * (n - 1) / n * size)
    one_shot = wire_bytes_per_rank(allreduce_phases(Algorithm.ONE_SHOT, size, n, MESH), n)
    assert one_shot == pytest.approx((n - 1) * size)
    two_shot = wire_bytes_per_rank(allreduce_phases(Algorithm.TWO_SHOT, size, n, MESH), n)
    assert two_shot == pytest.approx(2 * (n - 1) / n * size)


@pytest.mark.parametrize("codec", list(Codec))
@pytest.mark.parametrize("n", [2, 4, 8])
def test_quantized_two_shot_sends_2_n_minus_1_over_n_tiles_of_the_codec(codec, n):
    values = 2048 * 8 * 64  # whole tiles in every rank's slice
    tiles = values // 2048
    phases = allreduce_phases(Algorithm.QUICKREDUCE, values * 2, n, MESH, codec)
    assert wire_bytes_per_rank(phases, n) == pytest.approx(2 * (n - 1) / n * tiles * codec.tile_bytes)


def test_gather_ops_move_n_minus_1_over_n():
    for op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL):
        assert wire_bytes_per_rank(gather_phases(op, 8e6, 8, SWITCH), 8) == pytest.approx(7 / 8 * 8e6)


def test_int3_beats_int4_beats_ring_on_large_mi355x_messages():
    calib = load_calibration("mi355x")
    times = {}
    for label, algo, codec in (("ring", Algorithm.RING, None), ("int4", Algorithm.QUICKREDUCE, Codec.INT4),
                               ("int3", Algorithm.QUICKREDUCE, Codec.INT3)):
        coll = Collective(CollectiveOp.ALL_REDUCE, 256 * 2**20, 2, "test")
        times[label] = collective_time(coll, MESH, MI355X, calib, algorithm=algo, codec=codec).time_s
    assert times["int3"] < times["int4"] < times["ring"]


@pytest.mark.parametrize(("size", "world", "codec", "expected"), [
    (64 * 1024, 2, None, Algorithm.ONE_SHOT),
    (4 * 2**20, 2, None, Algorithm.ONE_SHOT),  # W = 2 is always one-shot below 8 MiB
    (300 * 1024, 4, None, Algorithm.ONE_SHOT),  # < 512 KiB at W <= 4
    (600 * 1024, 4, None, Algorithm.TWO_SHOT),
    (200 * 1024, 8, None, Algorithm.ONE_SHOT),  # < 256 KiB at W <= 8
    (300 * 1024, 8, None, Algorithm.TWO_SHOT),
    (16 * 2**20, 8, None, Algorithm.RING),  # above the custom all-reduce's 8 MiB
    (2 * 2**20, 8, Codec.INT4, Algorithm.QUICKREDUCE),  # fp16 row, TP8 INT4: 2 MB minimum
    (1 * 2**20, 8, Codec.INT4, Algorithm.TWO_SHOT),
    (900_000, 2, Codec.INT4, Algorithm.ONE_SHOT),  # under the 1 MB activation threshold
    (2 * 2**20, 4, Codec.INT3, Algorithm.TWO_SHOT),  # INT3 only at TP2 in vLLM
    (2 * 2**20, 2, Codec.INT3, Algorithm.QUICKREDUCE),
])
def test_selection_follows_vllm_thresholds(size, world, codec, expected):
    assert select_allreduce(size, world, MI355X, MESH, codec).algorithm is expected


def test_quickreduce_is_rocm_only_and_its_minimums_follow_the_table():
    assert select_allreduce(64 * 2**20, 8, H200, SWITCH, Codec.INT4).algorithm is Algorithm.RING
    assert quickreduce_min_bytes(Codec.FP, 8) == 16 * 2**20
    assert quickreduce_min_bytes(Codec.INT8, 4) == 16 * 2**20
    assert quickreduce_min_bytes(Codec.INT4, 2) == 2**20


def test_a_group_larger_than_the_platform_is_refused():
    with pytest.raises(ValueError, match="does not fit on h200-2"):
        collective_time(Collective(CollectiveOp.ALL_REDUCE, 1e6, 4, "x"), PAIR, H200, load_calibration("h200"))


def test_the_published_mi300x_table_is_compared_row_by_row():
    from validation.published_collectives import compare_mi300x

    rows = compare_mi300x()
    assert len(rows) == 9 * 5  # 9 sizes x RCCL, QR-FP16, Q8, Q6, Q4
    assert all(r.predicted_s > 0 and r.measured_s > 0 for r in rows)
    ring = {r.size_bytes: r for r in rows if r.label == "RCCL"}
    assert ring[64 * 2**20].predicted_s > ring[32 * 1024].predicted_s
