"""Shared fixtures: the repository root and a writer of throwaway spec files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent

# Property tests check properties, not speed: hypothesis's per-example deadline (200 ms) fails them when a loaded
# machine stalls one example (seen on CI: a 34 ms example took 470 ms once). Speed is the benchmarks' job.
# The default run draws the same examples every time (derandomized), so that a red CI is a change's doing, not a
# new random draw's; `INFERSIM_HYPOTHESIS=explore pytest ...` draws fresh examples to look for new failures.
settings.register_profile("infersim", deadline=None, derandomize=True)
settings.register_profile("explore", deadline=None)
settings.load_profile("explore" if os.environ.get("INFERSIM_HYPOTHESIS") == "explore" else "infersim")


@pytest.fixture(autouse=True, scope="session")
def _own_cache_folder(tmp_path_factory):
    """The run keeps its simulated cycles (`compiled.sass_timing`) in a folder of its own, shared by the
    processes it starts (the CLI, the notebooks' kernels), not in the user's cache: every run starts cold."""
    previous = os.environ.get("INFERSIM_CACHE_DIR")
    os.environ["INFERSIM_CACHE_DIR"] = str(tmp_path_factory.mktemp("infersim-cache"))
    yield
    if previous is None:
        os.environ.pop("INFERSIM_CACHE_DIR", None)
    else:
        os.environ["INFERSIM_CACHE_DIR"] = previous


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a mapping (or raw text) to a YAML file in a temporary folder and return its path."""

    def write(content, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return write
