"""One warp's issue timeline from SASS control codes: decoding, the in-order simulator, the recorded table."""

from __future__ import annotations

import csv
import json
import random

import pytest

from compiled.sass_code import NO_BARRIER, control, count, warp_timeline
from compiled.sass_counts import DATA_DIR, PIPELINED_CLASSES
from compiled.sass_timing import (
    SHARED_QUEUE_CYCLES,
    issue_cycles,
    issue_streams,
    pipe_cycles,
    section_cycles,
    shared_trip_cycles,
    timeline,
    warp_cycles,
    wavefront_cycles,
)
from hwmodels.spec import load_gpu

LATENCY = {"global_load": 500.0, "shared": 30.0, "sfu": 20.0, "other": 4.0, "operand_read": 4.0, "barrier": 0.0}


def word(stall: int, wait: int = 0, write: int = NO_BARRIER, read: int = NO_BARRIER, yld: int = 1,
         reuse: int = 0) -> int:
    """The second 64-bit word of an instruction with this control code (bits 105-125 of the 128)."""
    return (stall | yld << 4 | write << 5 | read << 8 | wait << 11 | reuse << 17) << 41


def listing(body: list[tuple[str, int]]) -> str:
    """An `nvdisasm -hex` listing: (text or '.L_x_N:' label, high word) per line; the low word is made up."""
    lines, addr = [], 0
    for text, hi in body:
        if text.endswith(":"):
            lines.append(text)
            continue
        lines.append(f"        /*{addr:04x}*/                   {text} ;    /* 0x000000ff00007b82 */")
        lines.append(f"                                                        /* 0x{hi:016x} */")
        addr += 16
    return "\n".join(lines) + "\n"


# A load and its consumer 11 cycles later; two loads on two barriers, consumed one after the other; a loop whose
# trip issues a load 9 cycles before its back edge and waits for it at the top of the next trip
ONE_LOAD = listing([("S2R R0, SR_TID.X", word(2)),
                    ("LDG.E R3, desc[UR4][R2.64]", word(1, write=0)),
                    ("IADD3 R4, R4, 0x1, RZ", word(4)),
                    ("IADD3 R5, R5, 0x1, RZ", word(6)),
                    ("FADD R6, R3, 1", word(3, wait=0b1)),
                    ("EXIT", word(5))])
TWO_LOADS = listing([("LDG.E R3, desc[UR4][R2.64]", word(1, write=0)),
                     ("LDG.E R5, desc[UR4][R4.64]", word(1, write=1)),
                     ("FADD R6, R3, 1", word(1, wait=0b01)),
                     ("FADD R7, R5, 1", word(1, wait=0b10)),
                     ("EXIT", word(5))])
LOOP_CARRIED = listing([("S2R R0, SR_TID.X", word(2)),
                        (".L_x_0:", 0),
                        ("FADD R6, R3, 1", word(2, wait=0b10)),
                        ("IADD3 R4, R4, 0x1, RZ", word(10)),
                        ("LDG.E R3, desc[UR4][R2.64]", word(1, write=1)),
                        ("ISETP.NE.AND P0, PT, R4, 8, PT", word(3)),
                        ("@P0 BRA `(.L_x_0)", word(5)),
                        ("EXIT", word(5))])


def test_control_decodes_a_hand_made_word():
    hi = word(stall=5, yld=1, write=2, read=4, wait=0b100101, reuse=0b0011) | 0x0000_0000_0c1e_1900
    assert control(hi) == {"stall": 5, "yield": 1, "write_barrier": 2, "read_barrier": 4, "wait_mask": 0b100101,
                           "reuse": 0b0011}


def test_control_decodes_words_ptxas_wrote():
    # From mla_decode for sm_90: LDG.E R3 sets barrier 2; the VIADD that reads R3 waits on it.
    ldg, viadd = control(0x000EA2000C1E1900), control(0x004FCA0000000000)
    assert (ldg["stall"], ldg["write_barrier"], ldg["read_barrier"], ldg["wait_mask"]) == (1, 2, NO_BARRIER, 0)
    assert (viadd["stall"], viadd["write_barrier"], viadd["wait_mask"]) == (5, NO_BARRIER, 0b100)


def test_a_load_and_its_consumer_expose_latency_less_distance():
    sass = ONE_LOAD
    tl = warp_timeline(sass)
    assert tl["loop"] == {}
    assert tl["prologue"]["stall_cycles"] == 2 + 1 + 4 + 6 + 3 + 5
    assert tl["prologue"]["waits"] == [["global_load", 1 + 4 + 6, 13]]
    assert tl["prologue"]["stream"] == [[2, 0, 7, None], [1, 0, 0, "global_load"], [4, 0, 7, None], [6, 0, 7, None],
                                        [3, 1, 7, None], [5, 0, 7, None]]
    assert section_cycles(tl["prologue"], LATENCY) == 21 + (500 - 11)
    assert count(sass) == (6, 0)


def test_waits_in_flight_together_expose_once():
    # two loads on two barriers, consumed one after the other: the second's latency elapsed during the first wait
    prologue = warp_timeline(TWO_LOADS)["prologue"]
    assert prologue["waits"] == [["global_load", 2, 2], ["global_load", 2, 3]]
    assert section_cycles(prologue, LATENCY) == 9 + 498


def test_loop_carried_dependency_shows_in_the_second_trip():
    # the loop's first instruction waits on a load issued at the end of the previous trip
    sass = LOOP_CARRIED
    tl = warp_timeline(sass)
    assert count(sass) == (2, 5)
    # the first trip has no load in flight; the second waits on the first's, 1 + 3 + 5 cycles before the back edge
    assert (tl["loop"]["stall_cycles"], tl["loop"]["waits"]) == (21, [["global_load", 9, 0]])
    assert len(tl["loop"]["stream"]) == 5 and tl["loop"]["entry"] == 1  # one prologue instruction before it
    assert tl["prologue"]["stall_cycles"] == 2 + 5 and tl["prologue"]["waits"] == []
    assert section_cycles(tl["loop"], LATENCY, loop=True) == 21 + 500 - 9


def test_a_loop_wait_on_an_earlier_trip_counts_that_trips_delays():
    # a trip of 100 cycles: at 5 a wait on a load of the previous trip (issued at its 15), at 60 a wait on a load
    # of this trip; in steady state the previous trip's 390-cycle stall at 60 lies between the old load and its
    # consumer, so only the first trip (no earlier stall) exposes the old load
    loop = {"stall_cycles": 100, "waits": [["global_load", 90, 5], ["global_load", 10, 60]]}
    latency = {"global_load": 400.0}
    assert section_cycles(loop, latency, loop=True) == 100 + 390
    assert section_cycles(loop, latency) == 100 + (400 - 90) + 390  # as a section run once


def test_depbar_retires_the_oldest_async_copy_groups():
    sass = listing([("LDGSTS.E.BYPASS.128 [R67], desc[UR60][R8.64]", word(1)),
                    ("LDGDEPBAR", word(1, write=0)),
                    ("LDGSTS.E.BYPASS.128 [R67+0x800], desc[UR60][R8.64+0x10]", word(1)),
                    ("LDGDEPBAR", word(1, write=0)),
                    ("NOP", word(4)),
                    ("DEPBAR.LE SB0, 0x1", word(1)),
                    ("DEPBAR.LE SB0, 0x0", word(1)),
                    ("EXIT", word(5))])
    assert warp_timeline(sass)["prologue"]["waits"] == [["async_copy", 7, 8], ["async_copy", 6, 9]]


def test_the_table_covers_every_counted_row():
    with open(DATA_DIR / "h200.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        tl = timeline(row["kernel"], row["config"])
        loop_instructions = int(row["loop_instructions"])
        assert bool(tl["loop"]) == bool(loop_instructions), (row["kernel"], row["config"])
        # every instruction issues for at least one cycle
        assert tl["prologue"]["stall_cycles"] >= int(row["prologue_instructions"])
        copies = tl.get("loop_copies") or [tl["loop"]]
        if loop_instructions:
            mean = sum(c["stall_cycles"] for c in copies) / len(copies)
            assert mean >= loop_instructions - 5, (row["kernel"], row["config"])


def test_mla_decode_loop_takes_more_cycles_than_instructions():
    prologue, loop = warp_cycles("h200", "mla_decode", "splits=1 even=True")
    with open(DATA_DIR / "h200.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["kernel"], r["config"]) == ("mla_decode", "splits=1 even=True"))
    assert loop > int(row["loop_instructions"])
    assert prologue > int(row["prologue_instructions"])


def test_a_configuration_outside_the_table_is_compiled_and_one_with_no_source_refused():
    prologue, loop = warp_cycles("h200", "mla_decode", "splits=3 even=True")  # compiled here (Triton installed)
    assert prologue > 0 and loop > 0
    with pytest.raises(ValueError, match="no compiled code of mla_decode 'splits=0 even=True'"):
        warp_cycles("h200", "mla_decode", "splits=0 even=True")


def test_a_compiled_row_takes_its_chains_from_the_sass_timeline():
    from compiled.kernel import UNPIPELINED_ROUND_TRIPS, Compiled
    from compiled.sass_counts import SIMULATED_WARPS, cycles_of, per_thread
    from workloads.attention_kernels import MlaDecode
    from workloads.kda_kernels import KdaVerify

    # MLA decode: the model's kernel is pipelined (prefetch 1), but the compiled loop waits for a whole round trip
    # on the loads it issued in the same trip (register-staged tiles, no asynchronous copies): unpipelined
    mla = MlaDecode(seqs=1, context=1024, heads=16, kv_dtype="bf16", q_dtype="bf16", threads=128, block_n=32)
    assert mla.launches()[0].program.prefetch == 1
    config = "splits=1 even=True"
    outside, per_trip = per_thread("h200", "mla_decode", config)
    cycles = cycles_of("h200", "mla_decode", config)
    assert cycles[3] >= UNPIPELINED_ROUND_TRIPS
    program = Compiled(mla, (None,), (None,), ((outside, per_trip),), (cycles,)).launches()[0].program
    assert program.prefetch == 0
    # simulated up to the first count that reaches the warps a scheduler can hold (MLA decode: 2 workgroups of
    # 4 warps a SM by its registers, 2 a scheduler)
    assert [n for n, _ in program.trip_cycles_by_warps] == list(SIMULATED_WARPS[:2])
    # one warp a scheduler: its own timeline, but for the cycles its conversions, shuffles and integer multiply-adds
    # hold the scheduler beyond their stalls, and for the shared-memory pipe the SM's four warps share
    alone = shared_trip_cycles("h200", "mla_decode", config, 1, without=PIPELINED_CLASSES, shared_pipe=False)[1]
    assert cycles[1] <= alone <= 1.03 * cycles[1]
    assert alone < program.trip_cycles_by_warps[0][1] <= 1.3 * alone
    assert program.trip_chain.dram == pytest.approx(max(0.0, cycles[3] - 1))
    assert program.setup_chain.dram == pytest.approx(cycles[2])
    # a loop fed a trip ahead (its loads waited for nowhere in the trip) keeps the kernel's pipeline
    fed = (cycles[0], cycles[1], cycles[2], 0.1, cycles[4])
    program = Compiled(mla, (None,), (None,), ((outside, per_trip),), (fed,)).launches()[0].program
    assert program.prefetch == 1 and program.trip_chain.dram == 0
    # unpipelined (KDA verify): its first load per token is the program's; the others it waits for in series
    verify = KdaVerify(seqs=1, positions=4, heads=12, tile_cols=32)
    config = "bv=32 store=True"
    counts, cycles = per_thread("h200", "kda_recurrent", config), cycles_of("h200", "kda_recurrent", config)
    program = Compiled(verify, (None,), (None,), (counts,), (cycles,)).launches()[0].program
    assert cycles[3] > 1.5  # a token's loads wait on each other: more than one round trip in series
    assert program.trip_chain.dram == pytest.approx(cycles[3] - 1) and program.prefetch == 0


# --- Several warps sharing one scheduler ---------------------------------------------------------------------

def test_one_warp_issues_a_section_as_the_static_timeline_has_it():
    sass = listing([("S2R R0, SR_TID.X", word(2)),
                    ("LDG.E R3, desc[UR4][R2.64]", word(1, write=0)),
                    ("IADD3 R4, R4, 0x1, RZ", word(4)),
                    ("FADD R6, R3, 1", word(3, wait=0b1)),
                    ("EXIT", word(5))])
    prologue = warp_timeline(sass)["prologue"]
    assert issue_streams([prologue["stream"]], 1, LATENCY) == [section_cycles(prologue, LATENCY)]


def test_without_stalls_or_waits_a_scheduler_issues_one_instruction_per_cycle():
    # ten one-cycle instructions, no barriers: N warps take N x 10 cycles, the second trip of a loop as well
    part = [[1, 0, NO_BARRIER, None]] * 10
    for warps in (1, 2, 3, 8):
        ends = issue_streams([part, part], warps, LATENCY)
        assert ends == [pytest.approx(warps * 10, abs=warps), pytest.approx(2 * warps * 10, abs=warps)]
        assert ends[1] - ends[0] == pytest.approx(warps * 10, abs=1)


def test_other_warps_issue_while_one_waits_on_a_load():
    # a load, 20 independent cycles, its consumer: one warp exposes 500 - 21; a second warp's work fills 21 more
    part = [[1, 0, 0, "global_load"], *[[1, 0, NO_BARRIER, None]] * 20, [1, 1, NO_BARRIER, None]]
    one, = issue_streams([part], 1, LATENCY)
    two, = issue_streams([part], 2, LATENCY)
    assert one == pytest.approx(501, abs=1)
    assert two < 2 * one  # the waits overlap
    assert two == pytest.approx(502, abs=2)  # both loads in flight together; the second issued one cycle later


def test_depbar_waits_for_all_but_the_newest_groups():
    # three async-copy groups on barrier 0 issued 100 cycles apart (with stalls), then DEPBAR.LE SB0, 1: it waits
    # for the second group (issued at 101) to land, not the third
    copy = [1, 0, 0, "async_copy"]
    gap = [99, 0, NO_BARRIER, None]
    depbar = [1, 0, NO_BARRIER, None, NO_BARRIER, ["depbar", 0, 1]]
    latency = {**LATENCY, "async_copy": 500.0}
    ends = issue_streams([[copy, gap, copy, gap, copy, depbar]], 1, latency)
    assert ends == [pytest.approx(100 + 500 + 1)]
    depbar_all = [1, 0, NO_BARRIER, None, NO_BARRIER, ["depbar", 0, 0]]
    assert issue_streams([[copy, gap, copy, gap, copy, depbar_all]], 1, latency) == [pytest.approx(200 + 500 + 1)]


def test_random_streams_stay_between_the_issue_bound_and_warps_in_series():
    rng = random.Random()
    classes = ["global_load", "shared", "sfu", "other"]
    for _ in range(30):
        part = []
        for _ in range(rng.randint(5, 40)):
            write = rng.choice([NO_BARRIER, NO_BARRIER, rng.randrange(6)])
            part.append([rng.randint(1, 12), rng.randrange(64) if rng.random() < 0.3 else 0, write,
                         rng.choice(classes) if write != NO_BARRIER else None])
        one, = issue_streams([part], 1, LATENCY)
        for warps in (2, 3, 5, 8):
            many, = issue_streams([part], warps, LATENCY)
            assert max(warps * len(part), one) <= many + 1e-9, (warps, part)
            assert many <= warps * one + 1e-9, (warps, part)


def test_shared_trip_cycles_of_one_warp_is_its_static_timeline():
    # one warp: the compiler's stalls already space most same-pipe instructions; the pipes add a little
    config = "splits=1 even=True"
    for without in ((), ("global_load", "async_copy")):
        shared = shared_trip_cycles("h200", "mla_decode", config, 1, without=without, shared_pipe=False)
        static = warp_cycles("h200", "mla_decode", config, without=without)
        assert static[1] * 0.98 <= shared[1] <= static[1] * 1.05, without
        assert static[0] * 0.95 <= shared[0] <= static[0] * 1.25, without  # the prologue: address arithmetic


def test_warps_on_one_scheduler_share_its_pipes():
    # eight conversions (8 cycles of the conversion pipe each), no stalls or waits: one warp issues them as
    # fast as the pipe takes them, and a second warp's wait for the pipe, not for its own stalls
    part = [[1, 0, NO_BARRIER, None]] * 8
    pipes = ["X" * 8]
    hold = {"X": 8.0}
    one, = issue_streams([part], 1, LATENCY, pipes, hold)
    two, = issue_streams([part], 2, LATENCY, pipes, hold)
    assert one == pytest.approx(7 * 8 + 1)
    assert two == pytest.approx(15 * 8 + 1)
    assert issue_streams([part], 2, LATENCY) == [pytest.approx(16, abs=1)]  # without pipes: issue-bound
    assert pipe_cycles(load_gpu("h200")) == {"F": 1, "I": 2, "A": 2, "X": 8, "M": 8, "S": 4}


def test_a_conversion_holds_the_scheduler_for_its_issue_cycles():
    # one conversion among 16 one-cycle instructions, 8 warps: issue binds (the conversion pipe is free 9 of 17
    # cycles), and each conversion holds the scheduler 3 cycles: 8 x 19 a round, not 8 x 17
    part = [[1, 0, NO_BARRIER, None]] * 17
    pipes = ["X" + "F" * 16]
    hold = {"X": 8.0, "F": 1.0}
    plain, = issue_streams([part], 8, LATENCY, pipes, hold)
    held, = issue_streams([part], 8, LATENCY, pipes, hold, {"X": 3.0})
    assert plain == pytest.approx(8 * 17, abs=2)
    assert held == pytest.approx(8 * 19, abs=3)
    h200 = load_gpu("h200")
    assert issue_cycles(h200) == {"X": h200.xu_issue_cycles, "M": h200.xu_issue_cycles, "S": h200.shfl_issue_cycles,
                                  "I": h200.imad_issue_cycles}
    assert issue_cycles(load_gpu("mi355x")) == {}  # not measured there: one cycle, like any instruction


def test_staggered_starts_let_warps_interleave_their_conversions():
    # eight conversions, then 56 one-cycle instructions: started together, 8 warps queue on the conversion pipe;
    # staggered over one warp's run, they take the pipe in turn and the scheduler's issue binds
    part = [[1, 0, NO_BARRIER, None]] * 64
    pipes = ["X" * 8 + "F" * 56]
    hold = {"X": 8.0}
    together, = issue_streams([part], 8, LATENCY, pipes, hold)
    alone, = issue_streams([part], 1, LATENCY, pipes, hold)
    staggered = issue_streams([part] * 3, 8, LATENCY, pipes * 3, hold, starts=[alone * w / 8 for w in range(8)])
    per_run = (staggered[-1] - staggered[0]) / 2
    assert together > 8 * 64 * 1.5  # the conversions of all warps in series first
    assert per_run == pytest.approx(8 * 64, rel=0.05)  # issue-bound once interleaved
    with pytest.raises(ValueError, match="1 starts for 2 warps"):
        issue_streams([part], 2, LATENCY, starts=[0.0])  # a start for every warp


def test_more_warps_per_scheduler_take_longer_per_trip_within_bounds():
    config = "splits=1 even=True"
    with open(DATA_DIR / "h200.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["kernel"], r["config"]) == ("mla_decode", config))
    instructions = int(row["loop_instructions"])
    one = shared_trip_cycles("h200", "mla_decode", config, 1)[1]
    previous = one
    for warps in (2, 4):
        trip = shared_trip_cycles("h200", "mla_decode", config, warps)[1]
        assert max(warps * instructions, one) <= trip + 1 <= warps * one + 1, warps
        assert trip >= previous
        previous = trip
    assert shared_trip_cycles("h200", "mla_decode", config, 1.5) == shared_trip_cycles("h200", "mla_decode",
                                                                                        config, 2)
    with pytest.raises(ValueError, match="warps_per_scheduler must be positive"):
        shared_trip_cycles("h200", "mla_decode", config, 0)


def test_every_recorded_stream_matches_the_counts_and_the_stalls():
    with open(DATA_DIR / "h200.csv", newline="") as f:
        counts = {(r["kernel"], r["config"]): r for r in csv.DictReader(f)}
    for (kernel, config), row in counts.items():
        tl = timeline(kernel, config)
        assert len(tl["prologue"]["stream"]) == int(row["prologue_instructions"]), (kernel, config)
        assert sum(ins[0] for ins in tl["prologue"]["stream"]) == tl["prologue"]["stall_cycles"]
        copies = tl.get("loop_copies") or ([tl["loop"]] if tl["loop"] else [])
        for copy in copies:
            assert sum(ins[0] for ins in copy["stream"]) == copy["stall_cycles"], (kernel, config)
        if copies:  # several copies: the count is their mean, rounded
            mean = sum(len(c["stream"]) for c in copies) / len(copies)
            assert abs(mean - int(row["loop_instructions"])) <= 0.5, (kernel, config)



@pytest.mark.parametrize(("kernel", "config"), [("qr_reduce", "int4"), ("qr_scatter", "int4"),
                                                ("mla_decode", "splits=16 even=False")])
def test_many_warps_never_issue_a_trip_faster_than_one_instruction_a_cycle(kernel, config):
    # warps that run ahead into their next trip while others finish this one must not shorten the trip
    with open(DATA_DIR / "h200.csv", newline="") as f:
        row = next(r for r in csv.DictReader(f) if (r["kernel"], r["config"]) == (kernel, config))
    for warps in (8, 16):
        trip = shared_trip_cycles("h200", kernel, config, warps)[1]
        assert trip >= warps * (int(row["loop_instructions"]) - 1), warps


def test_the_shared_pipe_is_one_for_the_sm_and_a_conflict_delays_the_result():
    # a warp storing 8 wavefronts each, 16 times, stalls only for its pipe: alone, 16 x 8 x 1 cycles plus issue
    store = [1, 0, NO_BARRIER, None]
    part = [store] * 16
    fronts = [[[i, 8.0] for i in range(16)]]
    alone, = issue_streams([part], 1, LATENCY, shared=fronts, wavefront_cycles=1.0)
    four, = issue_streams([part], 1, LATENCY, shared=fronts, wavefront_cycles=1.0, schedulers=4)
    free, = issue_streams([part], 1, LATENCY, schedulers=4)  # no wavefronts given: the schedulers independent
    assert free == pytest.approx(16)
    # the last store issues once the backlog ahead of it is down to the queue (then its one issue cycle)
    assert alone == pytest.approx(16 * 8 - 8 - SHARED_QUEUE_CYCLES + 1)
    # four schedulers, one pipe: four times the wavefronts through it
    assert four == pytest.approx(4 * 16 * 8 - 8 - SHARED_QUEUE_CYCLES + 1)
    # a load of 4 wavefronts returns 3 pipe cycles after one of 1, and its user waits for it
    load = [1, 0, 0, "shared"]
    use = [1, 1, NO_BARRIER, None]
    one, = issue_streams([[load, use]], 1, LATENCY, shared=[[[0, 1.0]]], wavefront_cycles=2.0)
    four_way, = issue_streams([[load, use]], 1, LATENCY, shared=[[[0, 4.0]]], wavefront_cycles=2.0)
    assert four_way - one == pytest.approx(3 * 2.0)


def test_a_loop_kernel_sets_up_with_its_warps_together():
    # KDA prefill's set-up: its layout conversions' bank conflicts through the SM's one shared-memory pipe make
    # the eight warps' set-up (two a scheduler) far longer than one warp's stalls
    alone = warp_cycles("h200", "kda_intra", "chunk=64", without=PIPELINED_CLASSES)[0]
    together = shared_trip_cycles("h200", "kda_intra", "chunk=64", 2, without=PIPELINED_CLASSES)[0]
    independent = shared_trip_cycles("h200", "kda_intra", "chunk=64", 2, without=PIPELINED_CLASSES,
                                     shared_pipe=False)[0]
    fronts = sum(n for _, n in timeline("kda_intra", "chunk=64")["prologue"]["shared"])
    assert together >= 8 * fronts * wavefront_cycles(load_gpu("h200")) * 0.95  # the pipe's own time, 8 warps
    assert together > 1.5 * max(alone, independent)


def test_a_barrier_holds_a_workgroup_until_its_last_warp_arrives():
    # two schedulers of two warps, one workgroup of four; the second warp of each scheduler starts 300 cycles late.
    # Free barriers: the early warps finish their 100 steps alone, the late ones theirs from 300. Held: the early
    # warps wait at the barrier for the late ones, then both share their scheduler's issue
    bar = [1, 0, NO_BARRIER, None, NO_BARRIER, ["bar"]]
    step = [1, 0, NO_BARRIER, None]
    part = [bar] + [step] * 100
    free, = issue_streams([part], 2, LATENCY, starts=[0.0, 300.0], schedulers=2)
    held, = issue_streams([part], 2, LATENCY, starts=[0.0, 300.0], schedulers=2, workgroup=4)
    assert free == pytest.approx(300 + 101)
    assert held == pytest.approx(300 + 201, abs=2)
    # two workgroups of two (one warp of each scheduler): the early ones hold only each other
    pairs, = issue_streams([part], 2, LATENCY, starts=[0.0, 300.0], schedulers=2, workgroup=2)
    assert pairs == pytest.approx(free)


def test_simulated_cycles_kept_on_disk_are_the_simulations(tmp_path, monkeypatch):
    import compiled.sass_timing as timing

    monkeypatch.setenv("INFERSIM_CACHE_DIR", str(tmp_path))
    args = ("h200", "kda_recurrent", "bv=8 store=True", 2, tuple(sorted(timing.latencies(load_gpu("h200")).items())))
    timing._shared_trip_cycles.cache_clear()
    first = timing._shared_trip_cycles(*args)
    kept = list((tmp_path / "sass_timing").glob("*.json"))
    assert len(kept) == 1 and not list((tmp_path / "sass_timing").glob("*.tmp"))
    timing._shared_trip_cycles.cache_clear()
    assert timing._shared_trip_cycles(*args) == first  # read back
    kept[0].write_text("{not json")  # a damaged file is simulated afresh and rewritten
    timing._shared_trip_cycles.cache_clear()
    assert timing._shared_trip_cycles(*args) == first
    assert json.loads(kept[0].read_text()) == list(first)
    monkeypatch.setenv("INFERSIM_NO_CACHE", "1")
    timing._shared_trip_cycles.cache_clear()
    assert timing._shared_trip_cycles(*args) == first == timing._shared_trip_cycles.__wrapped__(*args)
    timing._shared_trip_cycles.cache_clear()


@pytest.mark.parametrize(("text", "cls"), [
    ("LDS R7, [R89+UR10+0xd800]", "shared"), ("@!P5 LDS.64 R4, [R2]", "shared"),
    ("LDS.128 R8, [R4+0x80]", "shared_128"), ("@P0 LDS.U.128 R8, [R4]", "shared_128"),
    ("LDSM.16.M88.4 R72, [R103+UR10]", "ldsm"), ("LDSM.16.MT88.4 R20, [R3]", "ldsm"),
    ("STS.128 [R90], R84", "shared"), ("LDG.E R2, desc[UR6][R2.64]", "global_load")])
def test_shared_loads_take_the_latency_class_of_their_form(text, cls):
    """The shared-load probe times LDS, LDS.128 and ldmatrix apart (23, 32 and 29 cycles on Hopper)."""
    from compiled.sass_code import latency_class

    assert latency_class(text) == cls


def test_a_section_records_how_long_its_loads_fly_before_the_first_wait():
    # the LDG issues at cycle 2, its consumer at 13; with two loads the first wait comes one cycle after the second
    assert warp_timeline(ONE_LOAD)["prologue"]["load_lead"] == [11, 11]
    assert warp_timeline(TWO_LOADS)["prologue"]["load_lead"] == [2, 1]
    # nothing in the loop's trip waits for its load: it flies from its issue to the trip's end
    tl = warp_timeline(LOOP_CARRIED)
    assert tl["loop"]["load_lead"] == [9, 9] and "load_lead" not in tl["prologue"]


def test_the_timeline_says_whether_the_kernel_issues_matrix_instructions():
    plain = [("FADD R6, R3, 1", word(1)), ("EXIT", word(5))]
    assert warp_timeline(listing(plain))["matrix"] is False
    assert warp_timeline(listing([("HMMA.16816.F32.BF16 R84, R84, R76, RZ", word(1)), *plain]))["matrix"] is True


def test_the_recorded_mla_loop_issues_its_copies_before_its_end():
    # the MLA decode loop copies the next trip's keys (LDGSTS) over its last few hundred cycles and waits for them
    # at the top of the next trip: they fly from the first copy to the trip's end, the last one only a few cycles
    row = timeline("mla_decode", "splits=16 even=False")
    first, last = row["loop"]["load_lead"]
    assert row["matrix"] is True and 100 < first < row["loop"]["stall_cycles"] and 0 <= last < 0.1 * first
