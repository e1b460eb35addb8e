"""The bench's GPU-free parts: the collective sweep's timing plan, the multicast-off environment, and its
entry point, which parses every sub-command and lists planned cases without importing torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from companion.bench import collective_plan as mc
from tests.conftest import ROOT


def test_plan_bounds():
    assert mc.plan(4096, 1e-9, "eager") == (200, mc.SAMPLES, mc.WARM_SAMPLES)
    assert mc.plan(4096, 1.0, "eager")[0] == 20
    assert mc.plan(4096, 1e-9, "graph")[0] == 50
    assert mc.plan(4096, 1.0, "graph")[0] == 10
    calls, samples, _ = mc.plan(64 << 20, 1e-3, "graph")
    assert calls == 5 and samples >= 10
    assert mc.plan(1 << 30, 3e-3, "eager")[:2] == (5, mc.LARGE_SAMPLES)
    assert mc.SAMPLES >= 20


def test_safe_env_is_forced():
    env = {"NCCL_NVLS_ENABLE": "1"}
    changed = mc.force_safe_env(env)
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    assert set(changed) == set(env)
    assert mc.force_safe_env(env) == []


def test_the_entry_point_parses_every_command_without_torch():
    code = ("import sys; from companion.bench.cli import COMMANDS, parser; parser(); "
            "import companion.bench.collective_workers; print('torch' in sys.modules, sorted(COMMANDS))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    commands = ("['collectives', 'engine-step', 'gemm-choices', 'gemm-floor', 'kernel-split', 'probes', 'quickreduce', "
                "'sass-counts', 'suites', 'user-kernels']\n")
    assert out.stdout.split(maxsplit=1) == ["False", commands]


def test_profile_summary_reads_the_committed_source_pages():
    """The counter summary groups the KDA intra kernel's straight-line set-up apart from its loop and counts its
    shared wavefronts against the conflict-free count (NOTES: 2.2 times)."""
    from companion.bench.profile_targets import source_pages, summary

    path = str(ROOT / "validation" / "data" / "h200" / "ncu" / "kda_source.csv.gz")
    pages = source_pages(path)
    assert set(pages) == {"kda_intra_kernel", "kda_scan_kernel"}
    setup = [r for r in pages["kda_intra_kernel"] if r["Instructions Executed"] == "1056"]
    waves = sum(float(r["L1 Wavefronts Shared"]) for r in setup)
    ideal = sum(float(r["L1 Wavefronts Shared Ideal"]) for r in setup)
    assert 2.0 < waves / ideal < 2.4
    text = summary(path)
    assert "executed      1056x:  5255 instructions" in text and "kda_scan_kernel" in text


def test_profile_targets_without_a_target_prints_usage():
    out = subprocess.run([sys.executable, "-m", "companion.bench.profile_targets"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and "summary SOURCE.csv.gz" in out.stderr


def test_engine_step_plan_lists_its_cases_without_a_gpu():
    from validation import engine_steps

    cases = engine_steps.cases()
    assert len([c for c in cases if c.phase == "decode"]) >= 8 and len([c for c in cases if c.phase == "prefill"]) >= 4
    assert len({c.label for c in cases}) == len(cases)
    out = subprocess.run([sys.executable, "-m", "companion.bench", "engine-step", "--list"], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[1] == "qwen3-32b_decode_8x1024 --decode 8x1024"
    bad = subprocess.run([sys.executable, "-m", "companion.bench", "engine-step", "--list", "--only",
                          "decode_8x1024", "decode_3x3"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "decode_3x3" in bad.stdout and "prefill_1x8192" in bad.stdout
    recorded = (ROOT / "validation" / "data" / "h200" / "engine_step" / "engine_step.csv").read_text().splitlines()
    assert recorded[0].split(",") == list(engine_steps.COLUMNS) and len(recorded) == len(cases) + 1


def test_spaced_bench_takes_every_sample_in_every_round_with_gaps_between(monkeypatch):
    from companion.bench import timing

    calls, sleeps = [], []
    monkeypatch.setattr(timing, "bench", lambda sample, ops, hide_host_gaps: calls.append((sample(), ops,
                                                                                          hide_host_gaps)) or [ops])
    monkeypatch.setattr(timing.time, "sleep", sleeps.append)
    times = timing.spaced_bench({"a": (lambda: "a", 100), "b": (lambda: "b", 1000)}, rounds=3, gap_s=7.0)
    # every round runs both samples, host gaps included; the rounds are 7 s apart (none before the first)
    assert calls == [("a", 100, False), ("b", 1000, False)] * 3
    assert sleeps == [7.0, 7.0]
    assert times == {"a": [100, 100, 100], "b": [1000, 1000, 1000]}


def test_the_kda_residency_grid_spans_one_to_ten_workgroups_a_sm():
    from validation.suites import kda

    cases = kda.residency_cases()
    assert len(cases) == len(set(cases)) == 20
    # four 32-column tiles of each of 11 heads: 44 workgroups a sequence, 1 to 10 a SM on 132 SMs
    per_sm = sorted({c.seqs * c.heads * (c.value_dim // c.block_v) / 132 for c in cases})
    assert per_sm == [1.0, 2.0, 3.0, 5.0, 10.0]
    assert {c.store_states for c in cases} == {True, False} and {c.tokens for c in cases} == {4, 16}
    assert not set(cases) & set(kda.cases())  # none of them a planned row
    out = subprocess.run([sys.executable, "-m", "companion.bench", "suites", "--suite", "all", "--grid", "residency",
                          "--list"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert len(out.stdout.splitlines()) == 20 and all(line.startswith("kda ") for line in out.stdout.splitlines())


def test_the_kda_residency_and_generations_grids_list_their_workgroups_a_sm_without_a_gpu(capsys):
    """Each grid lists its KDA verify launches: 11 heads of four 32-column tiles, so 44 workgroups a sequence, at
    the workgroups a SM its predictions (validation/NOTES.md) were written for, stored and not."""
    import ast

    from companion.bench.cli import main

    for grid, per_sm in (("residency", {1, 2, 3, 5, 10}), ("generations", {4, 5, 6, 7, 8, 9, 12, 13, 20, 21})):
        assert main(["suites", "--suite", "kda", "--grid", grid, "--list"]) == 0
        rows = [ast.literal_eval(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
        assert {r["seqs"] * r["heads"] * (r["value_dim"] // r["block_v"]) / 132 for r in rows} == per_sm
        assert {r["store_states"] for r in rows} == {True, False} and len(rows) == 2 * len(per_sm) * (
            2 if grid == "residency" else 1)


def test_the_mla_split_grid_pairs_each_unplanned_shape_at_one_four_and_sixteen_partitions(capsys):
    """The split grid lists 16 seeded shapes no planned row has, each at 1, 4 and 16 KV partitions, every split
    holding rows; read back as rows, each shape gives the design-change table a 1 -> 4 and a 1 -> 16 pair."""
    import ast

    from companion.bench.cli import main
    from validation.design_changes import pairs
    from validation.suites import mla_decode

    assert main(["suites", "--suite", "all", "--grid", "splits", "--list"]) == 0
    rows = [ast.literal_eval(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 48 and rows == [mla_decode.splits_cases()[i].shape() | {
        k: v for k, v in rows[i].items() if k not in mla_decode.SHAPE_COLUMNS} for i in range(48)]
    shapes = {(r["seqs"], r["context"], r["heads"]) for r in rows}
    assert len(shapes) == 16 and not shapes & {(c.seqs, c.context, c.heads) for c in mla_decode.cases()}
    assert {r["heads"] for r in rows} <= {12, 16, 32} and all(r["context"] >= 16 * r["block_n"] for r in rows)
    assert max(r["seqs"] * r["context"] for r in rows) <= mla_decode.SPLIT_GRID_MAX_TOKENS
    measured = [{k: str(v) for k, v in r.items()} | {"time_s_median": str(1e-4 * (1 + i % 3)), "time_s_p10": "0",
                                                      "time_s_p90": "0", "gpu_name": "NVIDIA H200", "sm_count": "132"}
                for i, r in enumerate(rows)]
    found = pairs([mla_decode.compare(r, "h200") for r in measured])
    assert sorted(p.change for p in found) == ["1 -> 16"] * 16 + ["1 -> 4"] * 16
    assert all(p.measured_ratio in (pytest.approx(2.0), pytest.approx(3.0)) for p in found)
