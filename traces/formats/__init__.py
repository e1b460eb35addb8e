"""GPU kernel traces written by profilers, read into one record type.

    from traces.formats import read_trace
    trace = read_trace("trace.json.gz")          # the format is sniffed from the content
    trace.kernels[0].name, trace.kernels[0].duration_s, trace.busy_s()

Formats: the PyTorch profiler's (Kineto) Chrome-trace JSON, plain or gzipped (`kineto`), with each kernel's
launching op and its input shapes; Nsight Systems' SQLite export (`nsys-sqlite`) and its `cuda_gpu_trace` CSV
report (`nsys-csv`); rocprofv3's kernel and memory copy trace CSVs (`rocprofv3-csv`), its JSON output
(`rocprofv3-json`) and its rocpd database (`rocpd`). What each holds and where its fields are documented:
FORMATS.md beside this file. Pure Python (json, csv, sqlite3, gzip): no GPU and no torch.
"""

from traces.formats.records import Trace, TracedKernel, TraceError
from traces.formats.sniff import FORMATS, read_trace

__all__ = ["FORMATS", "Trace", "TraceError", "TracedKernel", "read_trace"]
