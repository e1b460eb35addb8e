"""Each format's sample read exactly: names, times in seconds, streams, devices, grids, the Kineto ops and shapes."""

from __future__ import annotations

import dataclasses
import gzip
import importlib.util
import json
import shutil
import sqlite3
from contextlib import closing

import pytest

from tests.traces.conftest import (
    KINETO,
    NSYS_CSV,
    NSYS_SQLITE,
    ROCPD,
    ROCPROF_COPIES,
    ROCPROF_CSV,
    ROCPROF_JSON,
    SAMPLES,
)
from traces.formats import FORMATS, Trace, TracedKernel, TraceError, read_trace

BF16 = "c10::BFloat16"
GEMM = "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"


def _by_name(trace: Trace, prefix: str) -> list[TracedKernel]:
    return [k for k in trace.kernels if k.name.startswith(prefix)]


# ---- Kineto

def test_kineto_kernels_in_start_order_with_times_in_seconds():
    trace = read_trace(KINETO)
    assert trace.format == "kineto" and trace.path == str(KINETO) and trace.skipped == 0
    assert [k.start_s for k in trace.kernels] == sorted(k.start_s for k in trace.kernels)
    assert [k.kind for k in trace.kernels] == ["kernel"] * 5 + ["memcpy", "memset"] + ["kernel"] * 2
    gemm = trace.kernels[0]
    assert gemm.name == GEMM
    assert gemm.start_s == pytest.approx(1030.5e-6, rel=1e-12)
    assert gemm.duration_s == pytest.approx(12.25e-6, rel=1e-12)
    assert (gemm.stream, gemm.device, gemm.grid, gemm.block) == ("7", 0, (16, 1, 1), (384, 1, 1))
    nccl = _by_name(trace, "ncclDevKernel_AllReduce")[0]
    assert (nccl.stream, nccl.duration_s) == ("20", pytest.approx(40e-6, rel=1e-12))
    # a GPU-side annotation spans the step on the GPU's row but is no kernel
    assert not _by_name(trace, "execute_model")


def test_kineto_kernels_carry_the_innermost_op_and_its_input_shapes():
    trace = read_trace(KINETO)
    gemm = trace.kernels[0]
    # aten::linear encloses aten::mm, whose External id the launch carries: the innermost is the op
    assert gemm.op == "aten::mm"
    assert gemm.shapes == ((16, 5120), (5120, 1024))
    assert gemm.dtypes == (BF16, BF16)
    norm = _by_name(trace, "void vllm::rms_norm_kernel")[0]
    assert (norm.op, norm.shapes) == ("_C::rms_norm", ((16, 5120), (16, 5120), (5120,), ()))
    assert norm.dtypes == (BF16, BF16, BF16, "double")
    attention = _by_name(trace, "void flash::flash_fwd_splitkv_kernel")[0]
    assert attention.op == "aten::_flash_attention_forward"
    assert attention.shapes[:3] == ((16, 32, 128), (4096, 8, 128), (4096, 8, 128))
    # launched through the driver (cuLaunchKernelEx): the cuda_driver event correlates the same way
    assert _by_name(trace, "ncclDevKernel")[0].op == "nccl:all_reduce"
    # no runtime event in the trace for this one: the kernel's own External id names the op
    assert _by_name(trace, "void at::native::vectorized_elementwise_kernel")[0].op == "aten::mul"
    copy, fill = (k for k in trace.kernels if k.kind != "kernel")
    assert (copy.name, copy.op, copy.shapes) == ("Memcpy HtoD (Pinned -> Device)", "aten::copy_", ((16,), (16,), ()))
    assert (fill.name, fill.op, fill.dtypes) == ("Memset (Device)", "aten::zero_", ("float",))


def test_kineto_graph_replays_have_no_op():
    replayed = read_trace(KINETO).kernels[-2:]
    assert [k.name[:24] for k in replayed] == [GEMM[:24], "void vllm::rms_norm_kern"]
    assert all(k.op is None and k.shapes is None and k.dtypes is None for k in replayed)


def test_kineto_busy_time_is_the_union_of_overlapping_kernels():
    trace = read_trace(KINETO)
    assert sum(k.duration_s for k in trace.kernels) == pytest.approx(101.5e-6, rel=1e-12)
    # the all-reduce (1100-1140 us, stream 20) overlaps attention (1080-1105.75) and the multiply (1110-1112)
    assert trace.busy_s() == pytest.approx(93.75e-6, rel=1e-12)


def test_kineto_gzipped_reads_the_same(write):
    path = write(gzip.compress(KINETO.read_bytes()), "trace.json.gz")
    assert read_trace(path).kernels == read_trace(KINETO).kernels


def test_kineto_without_cpu_ops_has_kernels_without_shapes(write):
    events = json.loads(KINETO.read_text())["traceEvents"]
    kept = [e for e in events if e.get("cat") not in ("cpu_op", "cuda_runtime", "cuda_driver")]
    trace = read_trace(write(json.dumps({"traceEvents": kept})))
    assert len(trace.kernels) == 9
    assert all(k.op is None and k.shapes is None for k in trace.kernels)


def _event(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_kineto_innermost_of_ops_sharing_an_external_id(write):
    # two ops with one External id, one inside the other: the one with the latest start containing the launch
    events = [_event("cpu_op", "aten::linear", 0, 100, **{"External id": 5, "Input Dims": [[4, 8]]}),
              _event("cpu_op", "aten::addmm", 10, 50, **{"External id": 5, "Input Dims": [[8], [4, 8], [8, 8]]}),
              _event("cpu_op", "aten::addmm", 70, 20, **{"External id": 5, "Input Dims": [[1]]}),
              _event("cuda_runtime", "cudaLaunchKernel", 20, 5, **{"External id": 5, "correlation": 9}),
              _event("kernel", "gemm", 30, 4, tid=7, correlation=9, device=0, stream=7)]
    kernel = read_trace(write(json.dumps({"traceEvents": events}))).kernels[0]
    assert (kernel.op, kernel.shapes) == ("aten::addmm", ((8,), (4, 8), (8, 8)))


def test_kineto_without_external_ids_takes_the_innermost_op_on_the_launching_thread(write):
    events = [_event("cpu_op", "aten::linear", 0, 100), _event("cpu_op", "aten::t", 2, 3),
              _event("cpu_op", "aten::mm", 10, 50, **{"Input Dims": [[4, 8], [8, 8]]}),
              _event("cpu_op", "aten::mm", 10, 50, tid=2),  # another thread's op at the same time
              _event("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=9),
              _event("kernel", "gemm", 30, 4, tid=7, correlation=9, device=0, stream=7)]
    kernel = read_trace(write(json.dumps({"traceEvents": events}))).kernels[0]
    assert (kernel.op, kernel.shapes) == ("aten::mm", ((4, 8), (8, 8)))


def test_kineto_older_categories_and_a_bare_event_list(write):
    # Kineto before the lower-case categories: "Kernel", "Runtime", "Operator", "external id"
    # and its ops' shapes under "Input dims"
    events = [_event("Operator", "aten::mm", 0, 50, **{"external id": 3, "Input dims": [[2, 3], [3, 5]]}),
              _event("Runtime", "cudaLaunchKernel", 5, 5, **{"external id": 3, "correlation": 4}),
              _event("Kernel", "gemm", 12, 2.5, tid=7, correlation=4, device=1, stream=7),
              _event("Memcpy", "Memcpy DtoD (Device -> Device)", 20, 1.0, tid=7, device=1, stream=7, bytes=4096)]
    trace = read_trace(write(json.dumps(events)))
    assert [(k.name, k.kind, k.device, k.op, k.shapes, k.bytes) for k in trace.kernels] == [
        ("gemm", "kernel", 1, "aten::mm", ((2, 3), (3, 5)), None),
        ("Memcpy DtoD (Device -> Device)", "memcpy", 1, None, None, 4096)]


# ---- Nsight Systems

NSYS_KERNELS = [  # (kind, start ns, duration ns, device, stream)
    ("memcpy", 812345678, 1504, 0, "7"), ("kernel", 812350000, 12256, 0, "7"), ("kernel", 812370000, 3488, 0, "7"),
    ("kernel", 812380000, 25760, 0, "7"), ("kernel", 812400000, 40000, 0, "20"), ("kernel", 812401000, 39500, 1, "20"),
    ("kernel", 812410000, 2016, 0, "7"), ("memset", 812470000, 992, 0, "7")]


@pytest.mark.parametrize("path, fmt", [(NSYS_CSV, "nsys-csv"), (NSYS_SQLITE, "nsys-sqlite")])
def test_nsys_kernels(path, fmt):
    trace = read_trace(path)
    assert trace.format == fmt and trace.skipped == 0
    assert [(k.kind, k.start_s, k.duration_s, k.device, k.stream) for k in trace.kernels] == [
        (kind, start * 1e-9, duration * 1e-9, device, stream) for kind, start, duration, device, stream in NSYS_KERNELS]
    names = [k.name for k in trace.kernels]
    assert names[0] == "[CUDA memcpy Host-to-Device]" and names[-1] == "[CUDA memset]"
    assert names[1] == GEMM and names[2].startswith("void vllm::rms_norm_kernel<c10::BFloat16, (int)8, (int)4>")
    assert names[4] == names[5] == ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned "
                                    "long)4096>)")
    assert (trace.kernels[3].grid, trace.kernels[3].block) == ((1, 16, 8), (128, 1, 1))
    assert trace.kernels[0].grid is None and all(k.op is None for k in trace.kernels)
    # device 0: 1504 + 12256 + 3488 + (34322..94322: attention under the all-reduce) + 992; device 1: 39500
    assert trace.busy_s() == pytest.approx((1504 + 12256 + 3488 + 60000 + 992 + 39500) * 1e-9, rel=1e-9)
    assert trace.devices() == (0, 1)


def test_nsys_csv_and_sqlite_agree():
    # the same records, but for a copy's bytes: the CSV rounds them to the kilobyte (0.000 MB for 128 bytes)
    sqlite, table = read_trace(NSYS_SQLITE).kernels, read_trace(NSYS_CSV).kernels
    assert [dataclasses.replace(k, bytes=None) for k in table] == [dataclasses.replace(k, bytes=None) for k in sqlite]
    # the samples' copy holds 128 bytes and their fill 65,536 (the export's bytes column); the report writes them
    # as 0.000 and 0.066 MB; kernels have none
    assert [(k.kind, k.bytes) for k in sqlite if k.bytes] == [("memcpy", 128), ("memset", 65536)]
    assert [(k.kind, k.bytes) for k in table if k.bytes] == [("memset", 66000)]


def test_nsys_csv_older_header_other_time_unit_and_notices(write):
    # notices printed before the report, the header of nsys before GreenCtx, times in microseconds
    content = ("\nNOTICE: Existing SQLite export found: report1.sqlite\n\n"
               "Processing [report1.sqlite] with [/opt/nvidia/nsight-systems/reports/cuda_gpu_trace.py]... \n\n"
               "Start (us),Duration (us),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem (MB),DymSMem (MB),"
               "Bytes (MB),Throughput (MBps),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name\n"
               '812350.000,12.256,2105,16,1,1,384,1,1,168,0.000,0.201,,,,,GPU 3,1,7,"gemm<(int)1, (int)2>(T1 *)"\n')
    trace = read_trace(write(content, "report_cuda_gpu_trace.csv"))
    kernel = trace.kernels[0]
    assert (kernel.name, kernel.device, kernel.stream, kernel.grid) == ("gemm<(int)1, (int)2>(T1 *)", 3, "7",
                                                                        (16, 1, 1))
    assert (kernel.start_s, kernel.duration_s) == (pytest.approx(0.81235, rel=1e-12), pytest.approx(12.256e-6))


def test_nsys_csv_of_nsys_2021(write):
    # nsys 2021's report: start in seconds, duration in nanoseconds, no unit space, no GreenCtx
    content = ("Start(sec),Duration(nsec),CorrId,GrdX,GrdY,GrdZ,BlkX,BlkY,BlkZ,Reg/Trd,StcSMem,DymSMem,Bytes,"
               "Thru(MB/s),SrcMemKd,DstMemKd,Device,Ctx,Strm,Name\n"
               "0.812346,1504,2101,,,,,,,,,,128,85.106,Pinned,Device,A100-SXM4-40GB (0),1,7,[CUDA memcpy HtoD]\n"
               "0.812350,12256,2105,16,1,1,384,1,1,168,0,200704,,,,,A100-SXM4-40GB (0),1,7,ampere_bf16_s16816gemm\n")
    trace = read_trace(write(content, "gputrace.csv"))
    assert [(k.kind, k.start_s, k.duration_s) for k in trace.kernels] == [
        ("memcpy", pytest.approx(0.812346, rel=1e-12), pytest.approx(1504e-9, rel=1e-12)),
        ("kernel", pytest.approx(0.81235, rel=1e-12), pytest.approx(12256e-9, rel=1e-12))]


def test_nsys_sqlite_takes_the_short_name_when_the_demangled_one_is_missing(tmp_path):
    path = tmp_path / "report.sqlite"
    shutil.copy(NSYS_SQLITE, path)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999 WHERE correlationId = 2109")
    assert _by_name(read_trace(path), "rms_norm_kernel")[0].name == "rms_norm_kernel"


# ---- rocprofv3

ROCM_T0 = 2414192765300000
ROCM_KERNELS = [  # (name prefix, start ns after T0, duration ns, stream, grid in workgroups, workgroup)
    ("Cijk_Alik_Bljk_BBS_BH", 53337, 14248, "1", (16, 1, 1), (256, 1, 1)),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>", 71000, 3912, "1", (16, 1, 1), (512, 1, 1)),
    ("kernel_unified_attention_2d", 80000, 29440, "1", (1, 16, 8), (128, 1, 1)),
    ("ncclDevKernel_Generic_4", 100000, 46000, "2", (16, 1, 1), (256, 1, 1)),
    ("ncclDevKernel_Generic_4", 101000, 45500, "3", (16, 1, 1), (256, 1, 1)),
    ("void at::native::vectorized_elementwise_kernel<8", 150000, 1840, "1", (40, 1, 1), (256, 1, 1)),
]


def _rocm_rows(trace: Trace) -> list[tuple]:
    return [(k.name, k.start_s, k.duration_s, k.stream, k.grid, k.block) for k in trace.kernels if k.kind == "kernel"]


def test_rocprofv3_kernel_trace_csv():
    trace = read_trace(ROCPROF_CSV)
    assert trace.format == "rocprofv3-csv" and len(trace.kernels) == 6
    for kernel, (prefix, start, duration, stream, grid, block) in zip(trace.kernels, ROCM_KERNELS, strict=True):
        assert kernel.name.startswith(prefix)
        assert kernel.start_s == pytest.approx((ROCM_T0 + start) * 1e-9, rel=1e-15)
        assert kernel.duration_s == pytest.approx(duration * 1e-9, rel=1e-12)
        # Grid_Size counts work-items: 4096 of 256 a workgroup are 16 workgroups
        assert (kernel.stream, kernel.grid, kernel.block, kernel.op) == (stream, grid, block, None)
    # "Agent 2", "Agent 3": the agent numbers, counting the node's two CPU agents
    assert [k.device for k in trace.kernels] == [2, 2, 2, 2, 3, 2]


def test_rocprofv3_memory_copy_trace_csv():
    copies = read_trace(ROCPROF_COPIES).kernels
    assert [(k.name, k.kind, k.device, k.stream) for k in copies] == [
        ("MEMORY_COPY_HOST_TO_DEVICE", "memcpy", 2, "1"), ("MEMORY_COPY_DEVICE_TO_HOST", "memcpy", 2, "1")]
    assert [k.duration_s for k in copies] == [pytest.approx(1760e-9), pytest.approx(2080e-9)]


def test_rocprofv3_csv_of_rocm_6_without_streams(write):
    # before Stream_Id and "Agent N": bare agent numbers, the HSA queue as the stream
    content = ('"Kind","Agent_Id","Queue_Id","Kernel_Id","Kernel_Name","Correlation_Id","Start_Timestamp",'
               '"End_Timestamp","Private_Segment_Size","Group_Segment_Size","Workgroup_Size_X","Workgroup_Size_Y",'
               '"Workgroup_Size_Z","Grid_Size_X","Grid_Size_Y","Grid_Size_Z"\n'
               '"KERNEL_DISPATCH",4,1,2,"matrixTranspose(float*, float*, int)",1,671599758568,671599825328,0,0,'
               '4,4,1,1024,1024,1\n')
    kernel = read_trace(write(content, "199_kernel_trace.csv")).kernels[0]
    assert (kernel.name, kernel.device, kernel.stream) == ("matrixTranspose(float*, float*, int)", 4, "1")
    assert (kernel.grid, kernel.block, kernel.duration_s) == ((256, 256, 1), (4, 4, 1), pytest.approx(66760e-9))


@pytest.mark.parametrize("path, fmt", [(ROCPROF_JSON, "rocprofv3-json"), (ROCPD, "rocpd")])
def test_rocprofv3_json_and_rocpd_match_the_csv(path, fmt):
    trace = read_trace(path)
    assert trace.format == fmt and trace.skipped == 0
    assert _rocm_rows(trace) == _rocm_rows(read_trace(ROCPROF_CSV))
    # the agents of the JSON and rocpd say which agents are GPUs: devices are GPU indices
    assert [k.device for k in trace.kernels if k.kind == "kernel"] == [0, 0, 0, 0, 1, 0]
    copies = [(k.name, k.device, k.duration_s) for k in trace.kernels if k.kind == "memcpy"]
    assert copies == [("MEMORY_COPY_HOST_TO_DEVICE", 0, pytest.approx(1760e-9)),
                      ("MEMORY_COPY_DEVICE_TO_HOST", 0, pytest.approx(2080e-9))]
    # GPU 0: the copies, and 53337..67585, 71000..74912, 80000..146000 (attention under the all-reduce),
    # 150000..151840; GPU 1: the all-reduce
    busy_ns = 1760 + 14248 + 3912 + 66000 + 1840 + 2080 + 45500
    assert trace.busy_s() == pytest.approx(busy_ns * 1e-9, rel=1e-5)


def test_the_sqlite_samples_are_what_their_script_builds(tmp_path):
    spec = importlib.util.spec_from_file_location("make_samples", SAMPLES / "make_samples.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.make_nsys(tmp_path / "nsys.sqlite")
    script.make_rocpd(tmp_path / "rocpd.db")
    assert read_trace(tmp_path / "nsys.sqlite").kernels == read_trace(NSYS_SQLITE).kernels
    assert read_trace(tmp_path / "rocpd.db").kernels == read_trace(ROCPD).kernels


def test_every_format_is_sniffed_and_can_be_named():
    for path, fmt in [(KINETO, "kineto"), (NSYS_CSV, "nsys-csv"), (NSYS_SQLITE, "nsys-sqlite"),
                      (ROCPROF_CSV, "rocprofv3-csv"), (ROCPROF_JSON, "rocprofv3-json"), (ROCPD, "rocpd")]:
        assert read_trace(path).format == fmt
        assert read_trace(path, format=fmt).kernels == read_trace(path).kernels
    assert set(FORMATS) == {"kineto", "nsys-sqlite", "nsys-csv", "rocprofv3-csv", "rocprofv3-json", "rocpd"}


def test_a_traced_kernel_needs_a_positive_duration():
    with pytest.raises(ValueError, match="duration > 0"):
        TracedKernel("k", 0.0, 0.0, "7", 0)
    with pytest.raises(ValueError, match="need finite"):
        TracedKernel("k", 1e308, 1.7e308, "7", 0)
    with pytest.raises(TraceError):  # TraceError is the readers' error, a ValueError
        raise TraceError("x")
