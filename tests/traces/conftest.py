"""The committed sample traces, one per format, and a writer of throwaway variants of them."""

from __future__ import annotations

from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parent / "samples"
KINETO = SAMPLES / "kineto_trace.json"
NSYS_CSV = SAMPLES / "nsys_cuda_gpu_trace.csv"
NSYS_SQLITE = SAMPLES / "nsys_report.sqlite"
ROCPROF_CSV = SAMPLES / "rocprofv3_kernel_trace.csv"
ROCPROF_COPIES = SAMPLES / "rocprofv3_memory_copy_trace.csv"
ROCPROF_JSON = SAMPLES / "rocprofv3_results.json"
ROCPD = SAMPLES / "rocpd_results.db"
ALL_SAMPLES = (KINETO, NSYS_CSV, NSYS_SQLITE, ROCPROF_CSV, ROCPROF_COPIES, ROCPROF_JSON, ROCPD)


@pytest.fixture
def write(tmp_path: Path):
    """Write text or bytes to a file in a temporary folder and return its path."""

    def write(content: str | bytes, name: str = "trace.json") -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return write
