"""The wheel is the product: every command of the README runs, as written, from an empty folder against the built
wheel (not the repository), `validate --hw h200` included. The wheel is installed apart (`pip install --no-deps
--target`) over the test environment's dependencies, and each of the README's bash blocks runs in order in one
empty folder, as a reader would paste it. Slow (about 20 minutes on two cores): CI runs it as a step of its own
(`pytest -m slow tests/test_readme_commands.py`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.test_wheel_contents import ROOT, _wheel

BLOCK_TIMEOUT_S = 1800


def readme_blocks() -> list[str]:
    """The README's bash blocks as a reader runs them after installing: `pip` lines dropped (the wheel is installed
    already), a `pip ... && infersim ...` line kept from its infersim command, the test command left out."""
    blocks = []
    for block in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S):
        lines = []
        for line in block.splitlines():
            if line.startswith("pip "):
                command = line.partition("&& ")[2]
                if command.startswith("infersim "):
                    lines.append(command)
                continue
            lines.append(line)
        if any(line.strip() for line in lines):
            blocks.append("\n".join(lines))
    return blocks


def test_the_readme_blocks_hold_every_infersim_command():
    text = (ROOT / "README.md").read_text()
    commands = [line for line in text.splitlines() if line.startswith("infersim ")]
    joined = "\n".join(readme_blocks())
    assert len(commands) > 30 and all(command in joined or command in text for command in commands)
    assert "infersim validate --hw h200" in joined and "infersim run" in joined


@pytest.mark.slow
def test_every_readme_command_runs_from_an_empty_folder_against_the_wheel(tmp_path):
    site, folder = tmp_path / "site", tmp_path / "empty"
    folder.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                    str(_wheel(tmp_path))], check=True, capture_output=True, timeout=600)
    path = os.pathsep.join([str(site / "bin"), os.path.dirname(sys.executable), os.environ["PATH"]])
    env = {**os.environ, "PYTHONPATH": str(site), "PATH": path}
    env.pop("INFERSIM_NOTEBOOK_OUT", None)
    probe = "import infersim, validation; print(infersim.__file__, validation.__file__)"
    where = subprocess.run(["python", "-c", probe], cwd=folder, env=env, check=True, capture_output=True,
                           text=True).stdout
    assert where.count(str(site)) == 2, where  # the wheel's packages, not the repository's
    for block in readme_blocks():
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=folder, env=env, capture_output=True,
                              text=True, timeout=BLOCK_TIMEOUT_S)
        assert done.returncode == 0, f"README block failed:\n{block}\n--- stderr ---\n{done.stderr[-3000:]}"
    assert (folder / "runs" / "a" / "summary.json").is_file() and (folder / "h200-fitted.yaml").is_file()
