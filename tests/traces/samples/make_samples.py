"""Build the two SQLite samples: an nsys export (`nsys_report.sqlite`) and a rocpd database (`rocpd_results.db`).

    python tests/traces/samples/make_samples.py    # rewrites both files beside this script

The tables and columns are those of the formats' documentation (FORMATS.md in traces/formats cites
it), holding the same small decode step as the CSV and JSON samples: a GEMM, an RMSNorm, flash attention, an
all-reduce overlapping it on a second stream (and on a second GPU), an elementwise kernel, a copy and a fill.
Only the tables a reader could need are built; the other tables of a real export are left out.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE_BYTES = 512  # SQLite's smallest page: a table takes a page at least, and the samples stay a few KB

# ---- nsys export --type sqlite: CUPTI activity tables, names as ids into StringIds

NSYS_SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
    correlationId INTEGER, nameId INTEGER NOT NULL REFERENCES StringIds(id), returnValue INTEGER NOT NULL,
    callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL REFERENCES StringIds(id), shortName INTEGER NOT NULL REFERENCES StringIds(id),
    mangledName INTEGER REFERENCES StringIds(id), launchType INTEGER, cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL,
    blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL,
    gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL REFERENCES ENUM_CUDA_MEMCPY_OPER(id), deprecatedSrcId INTEGER,
    srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER,
    dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
"""

COPY_KINDS = [(0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"), (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
              (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"), (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
              (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer")]

PID = 4242 << 24  # nsys's globalPid: the pid shifted by 24 bits
# (demangled name, short name, mangled name)
NAMES = {
    10: ("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "nvjet_tst_64x8_64x16_4x1_v_bz_TNT"),
    11: ("void vllm::rms_norm_kernel<c10::BFloat16, (int)8, (int)4>(T1 *, const T1 *, long, const T1 *, float, int, "
         "int)", "rms_norm_kernel", "_ZN4vllm15rms_norm_kernelIN3c108BFloat16ELi8ELi4EEEvPT_PKS3_lS6_fii"),
    12: ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, "
         "(bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, "
         "cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>"
         "(Flash_fwd_params)", "flash_fwd_splitkv_kernel", "_ZN5flash24flash_fwd_splitkv_kernelI23Flash_fwd_params"),
    13: ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
         "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
         "_Z39ncclDevKernel_AllReduce_Sum_bf16_RING_LL24ncclDevKernelArgsStorageILm4096EE"),
    14: ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<c10::BFloat16, "
         "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char *, "
         "(unsigned long)2>>(int, T2, T3)", "vectorized_elementwise_kernel",
         "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIN3c108BFloat16ES4_S4_NS0_15binary_internal10MulFunctorIfEEEESt5arrayIPcLm2EEEEviT0_T1_"),
}
T0 = 812345678
# (start, duration, device, stream, correlation, name id, grid, block, registers)
KERNELS = [
    (T0 + 4322, 12256, 0, 7, 2105, 10, (16, 1, 1), (384, 1, 1), 168),
    (T0 + 24322, 3488, 0, 7, 2109, 11, (16, 1, 1), (512, 1, 1), 32),
    (T0 + 34322, 25760, 0, 7, 2113, 12, (1, 16, 8), (128, 1, 1), 255),
    (T0 + 54322, 40000, 0, 20, 2117, 13, (2, 1, 1), (640, 1, 1), 96),
    (T0 + 64322, 2016, 0, 7, 2121, 14, (80, 1, 1), (128, 1, 1), 24),
    (T0 + 55322, 39500, 1, 20, 3117, 13, (2, 1, 1), (640, 1, 1), 96),
]


def make_nsys(path: Path) -> None:
    """Write the nsys export sample."""
    path.unlink(missing_ok=True)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(f"PRAGMA page_size = {PAGE_BYTES}")
        db.executescript(NSYS_SCHEMA)
        strings = [(1, "cudaLaunchKernel_v7000"), (2, "cudaMemcpyAsync_v3020"), (3, "cudaMemsetAsync_v3020"),
                   (4, "cuLaunchKernelEx")]
        for key, names in NAMES.items():
            strings += [(key, names[0]), (key + 100, names[1]), (key + 200, names[2])]
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
        db.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", COPY_KINDS)
        for start, duration, device, stream, correlation, name, grid, block, registers in KERNELS:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, NULL, ?, ?, ?, ?, ?, ?, 0, 0, ?, "
                       "?, ?, ?, ?, ?, ?, 0, ?, 0, 0, ?, NULL, NULL, NULL)",
                       (start, start + duration, device, stream, correlation, PID + device, name, name + 100,
                        name + 200, registers, *grid, *block, 210944 if name == 10 else 0, correlation))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
                       (start - 9000, start - 4000, PID + 4242, correlation, 4 if name == 13 else 1))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 1, NULL, 7, 2101, ?, 128, 1, NULL, 2, 0, "
                   "NULL, NULL, 0, 1, 0, NULL, NULL)", (T0, T0 + 1504, PID))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, 1, NULL, 7, 2125, ?, 0, 65536, NULL, 0)",
                   (T0 + 124322, T0 + 124322 + 992, PID))


# ---- rocpd: rocprofv3's database, read through its kernels and memory_copies views

ROCPD_SCHEMA = """
CREATE TABLE rocpd_metadata (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL, value TEXT NOT NULL);
CREATE TABLE rocpd_string (id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, string TEXT NOT NULL UNIQUE);
CREATE TABLE rocpd_info_agent (
    id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, pid INTEGER NOT NULL,
    type TEXT CHECK (type IN ('CPU', 'GPU')), absolute_index INTEGER, logical_index INTEGER, type_index INTEGER,
    uuid INTEGER, name TEXT, generic_name TEXT, model_name TEXT, vendor_name TEXT, product_name TEXT,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_queue (id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL,
    pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_stream (id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL,
    pid INTEGER NOT NULL, name TEXT, extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_info_kernel_symbol (
    id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, pid INTEGER NOT NULL,
    code_object_id INTEGER NOT NULL, kernel_name TEXT, display_name TEXT, kernel_object INTEGER,
    kernarg_segment_size INTEGER, kernarg_segment_alignment INTEGER, group_segment_size INTEGER,
    private_segment_size INTEGER, sgpr_count INTEGER, arch_vgpr_count INTEGER, accum_vgpr_count INTEGER,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_track (
    id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, nid INTEGER NOT NULL, ppid INTEGER, pid INTEGER,
    tid INTEGER, agent_id INTEGER, queue_id INTEGER, stream_id INTEGER, name_id INTEGER,
    extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_timestamp (id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, value BIGINT NOT NULL,
    phase INTEGER CHECK (phase IN (0, 1, 2)), track_id INTEGER);
CREATE TABLE rocpd_event (id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, category_id INTEGER,
    stack_id INTEGER, parent_stack_id INTEGER, correlation_id INTEGER, call_stack JSONB DEFAULT '{}' NOT NULL,
    line_info JSONB DEFAULT '{}' NOT NULL, extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_kernel_dispatch (
    id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, track_id INTEGER NOT NULL, kernel_id INTEGER NOT NULL,
    dispatch_id INTEGER NOT NULL, start_id INTEGER NOT NULL, end_id INTEGER NOT NULL, private_segment_size INTEGER,
    group_segment_size INTEGER, workgroup_size_x INTEGER NOT NULL, workgroup_size_y INTEGER NOT NULL,
    workgroup_size_z INTEGER NOT NULL, grid_size_x INTEGER NOT NULL, grid_size_y INTEGER NOT NULL,
    grid_size_z INTEGER NOT NULL, region_name_id INTEGER, event_id INTEGER, extdata JSONB DEFAULT '{}' NOT NULL);
CREATE TABLE rocpd_memory_copy (
    id INTEGER PRIMARY KEY AUTOINCREMENT, guid TEXT NOT NULL, track_id INTEGER NOT NULL, start_id INTEGER NOT NULL,
    end_id INTEGER NOT NULL, name_id INTEGER NOT NULL, dst_agent_id INTEGER, dst_address INTEGER,
    src_agent_id INTEGER, src_address INTEGER, size INTEGER NOT NULL, region_name_id INTEGER, event_id INTEGER,
    extdata JSONB DEFAULT '{}' NOT NULL);

-- the documented views, with the columns a reader takes from them
CREATE VIEW kernels AS
SELECT K.id, K.guid, T.pid, T.tid, S.display_name AS name, T.agent_id, A.absolute_index AS agent_absolute_index,
    A.logical_index AS agent_logical_index, A.type_index AS agent_type_index, A.type AS agent_type, K.kernel_id,
    K.dispatch_id, T.queue_id, T.stream_id, DS.value AS start, DE.value AS end, (DE.value - DS.value) AS duration,
    K.grid_size_x AS grid_x, K.grid_size_y AS grid_y, K.grid_size_z AS grid_z,
    K.workgroup_size_x AS workgroup_x, K.workgroup_size_y AS workgroup_y, K.workgroup_size_z AS workgroup_z,
    (K.grid_size_x / K.workgroup_size_x) AS grid_size_x, (K.grid_size_y / K.workgroup_size_y) AS grid_size_y,
    (K.grid_size_z / K.workgroup_size_z) AS grid_size_z, E.correlation_id
FROM rocpd_kernel_dispatch K
    INNER JOIN rocpd_track T ON T.id = K.track_id
    INNER JOIN rocpd_info_agent A ON A.id = T.agent_id
    INNER JOIN rocpd_event E ON E.id = K.event_id
    INNER JOIN rocpd_info_kernel_symbol S ON S.id = K.kernel_id
    INNER JOIN rocpd_timestamp DS ON DS.id = K.start_id
    INNER JOIN rocpd_timestamp DE ON DE.id = K.end_id;
CREATE VIEW memory_copies AS
SELECT M.id, M.guid, T.pid, T.tid, NS.string AS name, DS.value AS start, DE.value AS end,
    (DE.value - DS.value) AS duration, T.queue_id, T.stream_id, M.size, DA.type AS dst_agent_type,
    DA.type_index AS dst_agent_type_index, SA.type AS src_agent_type, SA.type_index AS src_agent_type_index,
    E.correlation_id
FROM rocpd_memory_copy M
    INNER JOIN rocpd_track T ON T.id = M.track_id
    INNER JOIN rocpd_event E ON E.id = M.event_id
    INNER JOIN rocpd_string NS ON NS.id = M.name_id
    INNER JOIN rocpd_info_agent DA ON DA.id = M.dst_agent_id
    INNER JOIN rocpd_info_agent SA ON SA.id = M.src_agent_id
    INNER JOIN rocpd_timestamp DS ON DS.id = M.start_id
    INNER JOIN rocpd_timestamp DE ON DE.id = M.end_id;
"""

GUID = "0000ddb5-8903-7903-b269-cd8d3745bb8a"
ROCPD_T0 = 2414192765300000
# kernel symbols: (display name, LDS bytes, SGPRs, VGPRs)
SYMBOLS = [
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x16x256_MI16x16x1_SN_LDSB1_GRVWA8_GRVWB8_ISA942_WG16_16_1",
     34816, 96, 128),
    ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, "
     "c10::BFloat16 const*, float, int, int)", 0, 24, 32),
    ("kernel_unified_attention_2d", 65536, 104, 256),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", 0, 48, 96),
    ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<c10::BFloat16>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)", 0, 16, 16),
]
# dispatches: (track, symbol id, start, end, workgroup size, grid size in work-items, correlation id)
DISPATCHES = [
    (1, 1, 53337, 67585, (256, 1, 1), (4096, 1, 1), 101),
    (1, 2, 71000, 74912, (512, 1, 1), (8192, 1, 1), 102),
    (1, 3, 80000, 109440, (128, 1, 1), (128, 16, 8), 103),
    (2, 4, 100000, 146000, (256, 1, 1), (4096, 1, 1), 105),
    (1, 5, 150000, 151840, (256, 1, 1), (10240, 1, 1), 106),
    (3, 4, 101000, 146500, (256, 1, 1), (4096, 1, 1), 205),
]


def make_rocpd(path: Path) -> None:
    """Write the rocpd sample."""
    path.unlink(missing_ok=True)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(f"PRAGMA page_size = {PAGE_BYTES}")
        db.executescript(ROCPD_SCHEMA)
        db.executemany("INSERT INTO rocpd_metadata (tag, value) VALUES (?, ?)",
                       [("schema_version", "3"), ("guid", GUID)])
        db.executemany("INSERT INTO rocpd_string (guid, string) VALUES (?, ?)",
                       [(GUID, "KERNEL_DISPATCH"), (GUID, "MEMORY_COPY_HOST_TO_DEVICE"),
                        (GUID, "MEMORY_COPY_DEVICE_TO_HOST")])
        cpu, gpu = "AMD EPYC 9654 96-Core Processor", "AMD Instinct MI300X"
        agents = [("CPU", 0, 0, 0, cpu), ("CPU", 1, 1, 1, cpu), ("GPU", 2, 2, 0, gpu), ("GPU", 3, 3, 1, gpu)]
        db.executemany("INSERT INTO rocpd_info_agent (guid, nid, pid, type, absolute_index, logical_index, type_index, "
                       "name, product_name) VALUES (?, 1, 58211, ?, ?, ?, ?, ?, ?)",
                       [(GUID, t, a, lo, ti, "gfx942" if t == "GPU" else n, n) for t, a, lo, ti, n in agents])
        db.executemany("INSERT INTO rocpd_info_queue (guid, nid, pid, name) VALUES (?, 1, 58211, ?)",
                       [(GUID, f"Queue {i}") for i in (1, 2, 3)])
        db.executemany("INSERT INTO rocpd_info_stream (guid, nid, pid, name) VALUES (?, 1, 58211, ?)",
                       [(GUID, f"Stream {i}") for i in (1, 2, 3)])
        # tracks: (agent, queue, stream) of GPU 0's two streams and GPU 1's one
        db.executemany("INSERT INTO rocpd_track (guid, nid, pid, tid, agent_id, queue_id, stream_id) "
                       "VALUES (?, 1, 58211, 58211, ?, ?, ?)", [(GUID, 3, 1, 1), (GUID, 3, 2, 2), (GUID, 4, 3, 3)])
        db.executemany("INSERT INTO rocpd_info_kernel_symbol (guid, nid, pid, code_object_id, kernel_name, "
                       "display_name, group_segment_size, private_segment_size, sgpr_count, arch_vgpr_count, "
                       "accum_vgpr_count) VALUES (?, 1, 58211, 1, ?, ?, ?, 0, ?, ?, 0)",
                       [(GUID, name, name, lds, sgpr, vgpr) for name, lds, sgpr, vgpr in SYMBOLS])
        for number, (track, symbol, start, end, block, grid, correlation) in enumerate(DISPATCHES, start=1):
            first = _timestamp(db, ROCPD_T0 + start, 1, track)
            last = _timestamp(db, ROCPD_T0 + end, 2, track)
            event = db.execute("INSERT INTO rocpd_event (guid, category_id, correlation_id) VALUES (?, 1, ?)",
                               (GUID, correlation)).lastrowid
            db.execute("INSERT INTO rocpd_kernel_dispatch (guid, track_id, kernel_id, dispatch_id, start_id, end_id, "
                       "private_segment_size, group_segment_size, workgroup_size_x, workgroup_size_y, "
                       "workgroup_size_z, grid_size_x, grid_size_y, grid_size_z, event_id) "
                       "VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (GUID, track, symbol, number, first, last, SYMBOLS[symbol - 1][1], *block, *grid, event))
        # a copy to GPU 0 before the step and one back after it: (name id, start, end, destination, source)
        for name, start, end, destination, source in ((2, 0, 1760, 3, 1), (3, 160000, 162080, 1, 3)):
            first = _timestamp(db, ROCPD_T0 + start, 1, 1)
            last = _timestamp(db, ROCPD_T0 + end, 2, 1)
            event = db.execute("INSERT INTO rocpd_event (guid, category_id, correlation_id) VALUES (?, 2, ?)",
                               (GUID, 98 + name)).lastrowid
            db.execute("INSERT INTO rocpd_memory_copy (guid, track_id, start_id, end_id, name_id, dst_agent_id, "
                       "src_agent_id, size, event_id) VALUES (?, 1, ?, ?, ?, ?, ?, 131072, ?)",
                       (GUID, first, last, name, destination, source, event))


def _timestamp(db: sqlite3.Connection, value: int, phase: int, track: int) -> int:
    """Insert one timestamp and return its id."""
    return db.execute("INSERT INTO rocpd_timestamp (guid, value, phase, track_id) VALUES (?, ?, ?, ?)",
                      (GUID, value, phase, track)).lastrowid


if __name__ == "__main__":
    make_nsys(HERE / "nsys_report.sqlite")
    make_rocpd(HERE / "rocpd_results.db")
