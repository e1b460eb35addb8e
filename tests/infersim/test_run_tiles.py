"""`infersim run` of a model whose 512-wide attention heads need tiles sized to the GPU's LDS."""

from __future__ import annotations

import json

from infersim.cli import main


def test_deepseek_v4_flash_runs_at_tp2_on_the_default_mi355x_platform(capsys):
    argv = ["run", "--set", "model.name=deepseek-v4-flash", "--set", "parallel.tp=2",
            "--set", "workload.sessions=2", "--set", "workload.turns_mean=2", "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["gpus"] == 2 and summary["requests_completed"] > 0
    assert summary["total_tok_per_s_per_gpu"] > 0
