"""Shared fixtures: the repository root and a writer of throwaway spec files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write a mapping (or raw text) to a YAML file in a temporary folder and return its path."""

    def write(content, name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False))
        return path

    return write
