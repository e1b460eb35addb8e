"""Malformed traces fail with one line naming the file and the record; a few bad records among good ones are
skipped and counted."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from hwmodels import input_files
from tests.traces.conftest import (
    KINETO,
    NSYS_CSV,
    NSYS_SQLITE,
    ROCPD,
    ROCPROF_CSV,
    ROCPROF_JSON,
)
from traces.formats import TraceError, read_trace, sniff

SGEMM = "ampere_sgemm_128x64_tn"


def _fails(path: Path, *fragments: str, format: str | None = None) -> str:
    """read_trace raises one line naming the file and each fragment; returns the message."""
    with pytest.raises(TraceError) as caught:
        read_trace(path, format=format)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def _kineto(*kernels: dict) -> str:
    return json.dumps({"traceEvents": list(kernels)})


def _kernel(name: str = SGEMM, ts: object = 10.0, dur: object = 5.0, **args) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": 1, **args}}


def _copy(tmp_path: Path, sample: Path) -> Path:
    path = tmp_path / sample.name
    shutil.copy(sample, path)
    return path


def _sql(path: Path, *statements: str) -> Path:
    with closing(sqlite3.connect(path)) as db, db:
        for statement in statements:
            db.execute(statement)
    return path


# ---- files that are no trace at all

def test_not_any_format(write):
    _fails(write("time,value\n1,2\n", "notes.csv"), "not a known trace format")
    _fails(write(b"\x00\x01\x02\xff\xfe binary", "blob.bin"), "not a known trace format", "byte 3")
    _fails(write('{"hello": "world"}'), "neither a PyTorch profiler trace", "nor rocprofv3")


def test_empty_file(write):
    _fails(write(""), "is empty")
    _fails(write("  \n\n"), "is empty")


def test_missing_file_and_folder(tmp_path):
    _fails(tmp_path / "absent.json", "cannot be read", "No such file")
    _fails(tmp_path, "cannot be read")


def test_unknown_or_wrong_format_name():
    _fails(KINETO, "unknown format 'chrome'", "known: kineto", format="chrome")
    _fails(KINETO, "is not an SQLite database, so not nsys-sqlite", format="nsys-sqlite")
    _fails(NSYS_SQLITE, "is an SQLite database, not kineto", format="kineto")
    _fails(NSYS_CSV, "not valid JSON", format="kineto")


def test_truncated_json_and_gzip(write):
    text = KINETO.read_text()
    _fails(write(text[: len(text) // 2]), "is not valid JSON", "line", "truncated?")
    packed = gzip.compress(text.encode())
    _fails(write(packed[: len(packed) // 2], "trace.json.gz"), "damaged or truncated gzip")


def test_deeply_nested_or_huge_json_is_a_trace_error(write):
    _fails(write("[" * 200_000 + "]" * 200_000), "too large or too deeply nested")
    _fails(write('{"traceEvents": [' + "[" * 200_000), "too large or too deeply nested")
    _fails(write('{"traceEvents": [{"ts": ' + "9" * 5000 + "}]}"), "is not readable JSON")


def test_files_beyond_the_size_limit(write, monkeypatch):
    monkeypatch.setattr(sniff, "MAX_TRACE_BYTES", 4000)
    monkeypatch.setattr(input_files, "CHUNK_BYTES", 512)
    plain = write(KINETO.read_bytes())
    _fails(plain, f"is {KINETO.stat().st_size} bytes, more than the 4000 this reader takes")
    packed = write(gzip.compress(KINETO.read_bytes()), "trace.json.gz")
    assert packed.stat().st_size < 4000
    _fails(packed, "holds more than 4000 bytes of gzip content")


def test_not_a_path():
    with pytest.raises(TraceError, match=r"^12: not a file path$"):
        read_trace(12)


# ---- Kineto records

def test_kineto_negative_duration_names_the_event(write):
    path = write(_kineto(_kernel(dur=-3.0)))
    _fails(path, f'event 0 ("{SGEMM}") has a negative duration -3 us')


def test_kineto_non_finite_and_non_numeric_fields(write):
    _fails(write(_kineto(_kernel(dur=float("nan")))), f'event 0 ("{SGEMM}") has a non-finite dur nan')
    _fails(write(_kineto(_kernel(ts="noon"))), f"event 0 (\"{SGEMM}\") has a non-numeric ts 'noon'")
    _fails(write(_kineto(_kernel(ts=None))), f'event 0 ("{SGEMM}") has no ts')
    _fails(write(_kineto(_kernel(device="gpu0"))), f"event 0 (\"{SGEMM}\") has a non-numeric device 'gpu0'")
    _fails(write(_kineto(_kernel(name=""))), 'event 0 ("") has no name')
    _fails(write(_kineto(_kernel(dur=0))), "has a zero duration")


def test_kineto_long_names_are_cut_in_messages(write):
    name = "void cutlass::Kernel<" + "x" * 5000 + ">"
    message = _fails(write(_kineto(_kernel(name=name, dur=-1))), 'event 0 ("void cutlass::Kernel<xxx')
    assert len(message) < 300


def test_kineto_no_gpu_events(write):
    only_cpu = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 3}
    _fails(write(_kineto(only_cpu)), "has no GPU events")
    _fails(write(json.dumps({"traceEvents": {}})), "has no traceEvents list")


def test_kineto_some_bad_records_are_skipped_and_counted(write):
    events = json.loads(KINETO.read_text())
    kernels = [i for i, e in enumerate(events["traceEvents"]) if e.get("cat") == "kernel"]
    events["traceEvents"][kernels[1]]["dur"] = -2.5
    events["traceEvents"][kernels[2]]["ts"] = "soon"
    events["traceEvents"].append(17)
    trace = read_trace(write(json.dumps(events)))
    assert (len(trace.kernels), trace.skipped) == (7, 3)
    assert trace.skipped_reasons[0] == (f'event {kernels[1]} ("void vllm::rms_norm_kernel<c10::BFloat16, 8, '
                                        '4>(c10::BFloat1...") has a negative duration -2.5 us')
    assert trace.skipped_reasons[1].startswith(f'event {kernels[2]} ("void flash::flash_fwd_splitkv_kernel')
    assert trace.skipped_reasons[2] == f"event {len(events['traceEvents']) - 1} is not an object but int"


def test_at_most_five_reasons_are_kept(write):
    trace = read_trace(write(_kineto(_kernel(), *(_kernel(name=f"k{i}", dur=-1) for i in range(9)))))
    assert (trace.skipped, len(trace.skipped_reasons)) == (9, 5)
    assert trace.skipped_reasons[4] == 'event 5 ("k4") has a negative duration -1 us'


def test_all_records_bad_raises_the_first_and_counts_the_rest(write):
    _fails(write(_kineto(_kernel(dur=-1), _kernel(dur=-2))), f'event 0 ("{SGEMM}") has a negative duration -1 us',
           "(and 1 more bad records)")


# ---- nsys CSV

NSYS_HEADER = NSYS_CSV.read_text().splitlines()[0]


def test_nsys_csv_bad_rows(write):
    rows = [NSYS_HEADER, "812350000,-12256,2105,16,1,1,384,1,1,168,0.000,0.201,,,,,NVIDIA H200 (0),1,,7,gemm_a"]
    _fails(write("\n".join(rows), "t.csv"), 'line 2 ("gemm_a") has a negative duration -12256 ns')
    rows[1] = "812350000,inf,2105,16,1,1,384,1,1,168,0.000,0.201,,,,,NVIDIA H200 (0),1,,7,gemm_a"
    _fails(write("\n".join(rows), "t.csv"), 'line 2 ("gemm_a") has a non-finite duration')
    rows[1] = "12:00:01,5,2105,16,1,1,384,1,1,168,0.000,0.201,,,,,NVIDIA H200 (0),1,,7,gemm_a"
    _fails(write("\n".join(rows), "t.csv"), "line 2 (\"gemm_a\") has a non-numeric start '12:00:01'")
    rows[1] = "812350000,5,2105,16,1,gemm_a"
    _fails(write("\n".join(rows), "t.csv"), 'line 2 ("gemm_a") has 6 fields, the header 21')


def test_nsys_csv_times_beyond_the_float_range(write):
    header = NSYS_HEADER.replace("Start (ns),Duration (ns)", "Start (s),Duration (s)")
    row = "1.7e308,1.7e308,2105,16,1,1,384,1,1,168,0.000,0.201,,,,,NVIDIA H200 (0),1,,7,gemm_a"
    _fails(write(header + "\n" + row, "t.csv"), 'line 2 ("gemm_a") has an unusable time: start 1.7e+308 s')


def test_nsys_csv_missing_column_and_empty(write):
    header = NSYS_HEADER.replace("Duration (ns),", "")
    _fails(write(header + "\n1,2\n", "t.csv"), 'header has no "Duration (ns)" column')
    _fails(write(NSYS_HEADER.replace(",Name", ",Kernel") + "\n", "t.csv"), 'has no "Name" column')
    _fails(write(NSYS_HEADER.replace("Start (ns)", "Start (fortnights)") + "\n", "t.csv"), "unknown time unit")
    _fails(write(NSYS_HEADER + "\n", "t.csv"), "has a header but no rows")


def test_nsys_csv_one_bad_row_among_good_ones(write):
    lines = NSYS_CSV.read_text().splitlines()
    lines[2] = lines[2].replace("812350000,12256", "812350000,-1")
    trace = read_trace(write("\n".join(lines), "t.csv"))
    assert (len(trace.kernels), trace.skipped) == (7, 1)
    assert trace.skipped_reasons == ('line 3 ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT") has a negative duration -1 ns',)


# ---- nsys SQLite

def test_nsys_sqlite_missing_tables(tmp_path):
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    _fails(path, "has no CUPTI_ACTIVITY_KIND_KERNEL table")
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "DROP TABLE StringIds")
    _fails(path, "has no StringIds table")
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN start")
    _fails(path, "CUPTI_ACTIVITY_KIND_KERNEL has no column start")


def test_nsys_sqlite_bad_rows(tmp_path):
    path = _sql(_copy(tmp_path, NSYS_SQLITE), 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 10',
                "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
    _fails(path, 'CUPTI_ACTIVITY_KIND_KERNEL row 1 ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT") has a negative duration '
                 "-10 ns", "(and 5 more bad records)")
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE correlationId "
                                              "= 2109")
    trace = read_trace(path)
    assert trace.skipped_reasons == ("CUPTI_ACTIVITY_KIND_KERNEL row 2 (\"void vllm::rms_norm_kernel<c10::BFloat16, "
                                     "(int)8, (int)4>(T1...\") has a non-numeric start 'x'",)
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999, "
                                              "shortName = 998, mangledName = 997 WHERE correlationId = 2109")
    assert "has a name not in StringIds (demangledName 999, shortName 998, mangledName 997)" in \
           read_trace(path).skipped_reasons[0]


def test_nsys_sqlite_empty_and_damaged(tmp_path):
    path = _sql(_copy(tmp_path, NSYS_SQLITE), "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
                "DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY", "DELETE FROM CUPTI_ACTIVITY_KIND_MEMSET")
    _fails(path, "has no rows in CUPTI_ACTIVITY_KIND_KERNEL")
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(NSYS_SQLITE.read_bytes()[:5000])
    _fails(damaged, "SQLite")
    other = _sql(tmp_path / "other.sqlite", "CREATE TABLE notes (text TEXT)")
    _fails(other, "neither nsys tables")


# ---- rocprofv3

ROCPROF_HEADER = ROCPROF_CSV.read_text().splitlines()[0]


def test_rocprofv3_csv_bad_rows(write):
    row = '"KERNEL_DISPATCH","Agent 2",1,1,58211,1,31,"Cijk_a",101,2000,1000,0,0,128,0,96,256,1,1,4096,1,1'
    _fails(write(ROCPROF_HEADER + "\n" + row, "k.csv"), 'line 2 ("Cijk_a") has a negative duration -1000 ns')
    _fails(write(ROCPROF_HEADER + "\n" + row.replace("2000,1000", "2000,1e999"), "k.csv"),
           'line 2 ("Cijk_a") has a non-finite end')
    _fails(write(ROCPROF_HEADER + "\n" + row.replace("2000,1000", "2000,later"), "k.csv"),
           "line 2 (\"Cijk_a\") has a non-numeric end 'later'")
    _fails(write(ROCPROF_HEADER + "\n" + row.replace('"Agent 2"', '"Node X"').replace("2000,1000", "1000,2000"),
                 "k.csv"), 'line 2 ("Cijk_a") has an unreadable Agent_Id "Node X"')


def test_rocprofv3_csv_missing_column_and_empty(write):
    _fails(write(ROCPROF_HEADER.replace(',"End_Timestamp"', "") + "\n", "k.csv"), "has no End_Timestamp column")
    _fails(write(ROCPROF_HEADER + "\n", "k.csv"), "has a header but no rows")


def test_rocprofv3_json_malformed(write):
    data = json.loads(ROCPROF_JSON.read_text())
    dispatches = data["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"]
    dispatches[0]["end_timestamp"] = dispatches[0]["start_timestamp"] - 5
    dispatches[1]["dispatch_info"]["kernel_id"] = 77
    trace = read_trace(write(json.dumps(data)))
    assert trace.skipped == 2 and len(trace.kernels) == 6
    assert trace.skipped_reasons == (
        'process 0 kernel_dispatch 0 ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI1...") '
        "has a negative duration -5 ns",
        'process 0 kernel_dispatch 1 ("") has kernel_id 77, not in kernel_symbols')
    del data["rocprofiler-sdk-tool"][0]["buffer_records"]
    _fails(write(json.dumps(data)), "process 0 has no buffer_records object")
    _fails(write(json.dumps({"rocprofiler-sdk-tool": [{"buffer_records": {"hip_api": []}}]})),
           "has no kernel_dispatch or memory_copy records")
    _fails(write(json.dumps({"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": []}}]})),
           "has no kernel dispatches or copies")
    _fails(write(json.dumps({"rocprofiler-sdk-tool": 3})), 'has no "rocprofiler-sdk-tool" list')


def test_rocpd_malformed(tmp_path):
    path = _sql(_copy(tmp_path, ROCPD), "DROP VIEW kernels")
    _fails(path, "has no kernels view")
    path = _sql(_copy(tmp_path, ROCPD), "UPDATE rocpd_timestamp SET value = value - 1000000 WHERE phase = 2")
    _fails(path, 'kernels row 1 ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI1...") has a negative '
                 "duration -985752 ns", "(and 7 more bad records)")
    path = _sql(_copy(tmp_path, ROCPD), "DELETE FROM rocpd_kernel_dispatch", "DELETE FROM rocpd_memory_copy")
    _fails(path, "has no rows in its kernels view")
