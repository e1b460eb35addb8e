"""`infersim kernel --triton`: a kernel written here, compiled for each GPU's instruction set and timed from its code,
its trips and bytes counted in Triton's interpreter."""

from __future__ import annotations

import json
import textwrap

import pytest

from compiled import triton_build
from compiled.triton_args import TensorArg, TritonKernelError, parse_arg, parse_grid
from compiled.triton_counts import SECTOR_BYTES
from compiled.triton_kernel import triton_launch
from hwmodels.calibration import load_calibration
from hwmodels.dtypes import Dtype
from hwmodels.roofline import LaunchMode, kernel_time
from hwmodels.spec import load_gpu
from infersim.cli import main

pytestmark = pytest.mark.skipif(not triton_build.available(), reason="needs Triton (pip install 'infersim[triton]')")

KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def scale_add(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def _tile(a, b, rm, rn, rk, k, lda, ldb):
    x = tl.load(a + rm[:, None] * lda + (k + rk)[None, :])
    return tl.dot(x, tl.load(b + (k + rk)[:, None] * ldb + rn[None, :]))


@triton.jit
def matmul(a, b, c, K, lda, ldb, ldc, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += _tile(a, b, rm, rn, rk, k, lda, ldb)
    tl.store(c + rm[:, None] * ldc + rn[None, :], acc.to(tl.bfloat16))


@triton.jit
def row_sums(x, out, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, tl.load(cols + row), BLOCK):
        total += tl.load(x + row * 4096 + start + tl.arange(0, BLOCK)).to(tl.float32)
    tl.store(out + row, tl.sum(total))


@triton.jit
def gather_rows(x, index, out, D: tl.constexpr):
    row = tl.load(index + tl.program_id(0)).to(tl.int64)
    tl.store(out + tl.program_id(0) * D + tl.arange(0, D), tl.load(x + row * D + tl.arange(0, D)))


@triton.jit
def two_loops(x, n, BLOCK: tl.constexpr):
    for i in range(0, n, BLOCK):
        tl.store(x + i + tl.arange(0, BLOCK), 1.0)
    for i in range(0, n, BLOCK):
        tl.store(x + i + tl.arange(0, BLOCK), 2.0)
'''

TARGETS = {"h200": "sm_90", "b300": "sm_103", "mi355x": "gfx950"}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "my_kernels.py"
    path.write_text(textwrap.dedent(KERNELS))
    return path


def _matmul_args(m: int, n: int, k: int) -> dict[str, object]:
    return {"a": TensorArg("bf16", (m, k)), "b": TensorArg("bf16", (k, n)), "c": TensorArg("bf16", (m, n)),
            "K": k, "lda": k, "ldb": n, "ldc": n, "BM": 64, "BN": 64, "BK": 32}


@pytest.mark.parametrize("hw", list(TARGETS))
def test_a_kernel_written_here_is_predicted_from_its_code_on_each_gpu(kernels, hw, capsys):
    n = 3 * 2**18 + 5  # not a whole number of blocks: the last program is masked
    argv = ["kernel", "--hw", hw, "--triton", f"{kernels}:scale_add", "--grid", str(-(-n // 1024)),
            "--arg", f"x=fp32[{n}]", "--arg", f"y=fp32[{n}]", "--arg", f"out=fp32[{n}]", "--arg", f"n={n}",
            "--arg", "alpha=0.5", "--arg", "BLOCK=1024", "--launch", "graph", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (code,) = out["compiled_code"]
    assert out["program"] == "compiled" and code["target"] == TARGETS[hw] and code["origin"] == "compiled"
    assert code["registers"] > 0 and code["prologue_instructions"] > 0 and code["loop_instructions"] == 0
    assert code["config"] == f"BLOCK=1024 stages={3 if hw != 'mi355x' else 2}"  # n is odd: not specialised
    # every byte of the three tensors moves once, to the sector
    assert out["read_bytes"] == pytest.approx(2 * 4 * n, abs=2 * SECTOR_BYTES)
    assert out["write_bytes"] == pytest.approx(4 * n, abs=SECTOR_BYTES)
    gpu = load_gpu(hw)
    # a streaming kernel of 9 MiB: under the HBM's peak, within a few launch latencies of it
    streamed_s = out["bytes"] / gpu.hbm_bandwidth_bytes_per_s
    assert streamed_s < out["time_s"] < 5 * streamed_s + 20e-6


@pytest.mark.parametrize("hw", list(TARGETS))
def test_the_loop_trips_flop_and_bytes_of_a_tiled_matmul_are_counted(kernels, hw):
    m, n, k = 128, 192, 512
    gpu = load_gpu(hw)
    found = triton_launch(f"{kernels}:matmul", parse_grid(f"{m // 64},{n // 64}"), _matmul_args(m, n, k), gpu)
    assert found.counts.trips == [k // 32] * 6  # every program, the loop's body in a called function
    assert found.work.flop_by_dtype == {Dtype.BF16: 2.0 * m * n * k}
    assert found.work.read_bytes == 2 * (m * k + k * n) and found.work.write_bytes == 2 * m * n
    program = found.work.program
    assert program.trips == k // 32 and program.trip_load_bytes == 2 * (64 * 32 + 32 * 64)
    assert program.reuse == pytest.approx(6 * (k // 32) * program.trip_load_bytes / found.work.read_bytes)
    assert found.code["loop_instructions"] > 0 and found.code["shared_bytes"] > 0
    calib = load_calibration(gpu.name, None)
    small = kernel_time(found.work, gpu, calib, LaunchMode.GRAPH).time_s
    longer = triton_launch(f"{kernels}:matmul", parse_grid(f"{m // 64},{n // 64}"), _matmul_args(m, n, 4 * k), gpu)
    assert kernel_time(longer.work, gpu, calib, LaunchMode.GRAPH).time_s > 2 * small


def test_uneven_trips_over_the_grid_are_read_from_an_integer_tensor(kernels):
    """A loop bounded by a value the kernel loads: trips follow the tensor's fill, here 2048 / 256 = 8."""
    found = triton_launch(f"{kernels}:row_sums", (64, 1, 1),
                          {"x": TensorArg("fp16", (64, 4096)), "out": TensorArg("fp32", (64,)),
                           "cols": TensorArg("i32", (64,), fill=2048), "BLOCK": 256}, load_gpu("h200"))
    assert found.counts.trips == [8] * 32 and len(found.counts.programs) == 32  # 32 of the 64 programs
    # half of each row is read, scaled from the interpreted programs to the grid
    assert found.work.read_bytes == pytest.approx(64 * 2048 * 2 + 64 * 4, rel=0.01)


def test_a_loop_the_compiler_unrolled_is_timed_per_compiled_trip(kernels):
    """LLVM unrolls a short streaming loop 4 times on sm_90: one compiled trip moves four source trips' bytes, so
    the program runs a quarter of the source trips, each four times the bytes."""
    args = {"x": TensorArg("fp16", (64, 4096)), "out": TensorArg("fp32", (64,)),
            "cols": TensorArg("i32", (64,), fill=4096), "BLOCK": 1024}
    found = triton_launch(f"{kernels}:row_sums", (64, 1, 1), args, load_gpu("h200"))
    assert found.counts.trips == [4] * 32 and found.unroll == 4
    assert found.work.program.trips == 1 and found.work.program.trip_load_bytes == pytest.approx(4 * 1024 * 2)


def test_an_unrolled_gfx942_loop_with_its_remainder_loop_is_read_and_the_unroll_is_its_own():
    """At 16 x 16 tiles and two waves LLVM unrolls AITER's block-scaled GEMM loop by four for gfx942 and follows it
    with a remainder loop for the trips a runtime K leaves over: the reader takes the unrolled loop (16 MFMAs) and
    reads the unroll off the two loops' matrix instructions, not off a lane's bytes (each lane loads its own copy of
    the scales, which would make it five)."""
    from compiled import amdgcn_code

    k, n, m = 512, 2112, 224
    scales = {"a_scale_ptr": TensorArg("fp32", (m, k // 128)), "b_scale_ptr": TensorArg("fp32", (k // 128, n // 16))}
    args = {"a_ptr": TensorArg("fp8e4b8", (m, k)), "b_ptr": TensorArg("fp8e4b8", (n, k)),
            "c_ptr": TensorArg("bf16", (m, n)), **scales, "M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1,
            "stride_bk": 1, "stride_bn": k, "stride_cm": n, "stride_cn": 1, "stride_ascale_m": k // 128,
            "stride_ascale_k": 1, "stride_bscale_k": n // 16, "stride_bscale_n": 1, "GROUP_K": 128, "GROUP_N": 16,
            "BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 128}
    found = triton_launch("companion/kernels/aiter_gemm.py:gemm_a8w8_blockscale_kernel", (1848, 1, 1), args,
                          load_gpu("mi300x"), num_warps=2, num_stages=2)
    assert found.counts.trips == [4] * len(found.counts.trips) and found.unroll == 4
    assert found.work.program.trips == 1 and found.code["target"] == "gfx942"
    assert found.code["loop_unroll"] == 4
    build = triton_build.build(*_aiter_case(args), target=triton_build.target_of(load_gpu("mi300x")))
    main, remainder = (sum("mfma" in amdgcn_code.opcode(line) for line in run_text)
                       for run_text in _loop_texts(build.asm))
    assert (main, remainder) == (16, 4)


def _aiter_case(args):
    """The AITER port's build arguments at `args` (the companion's case at its generic config, re-tiled)."""
    from compiled.companion_sources import _AITER_GEMM, _companion

    constexprs = {name: args[name] for name, kind in _AITER_GEMM.items() if kind == "constexpr"}
    aligned = tuple(name for name, kind in _AITER_GEMM.items() if kind == "i32" and args[name] % 16 == 0)
    return (_companion("aiter_gemm").gemm_a8w8_blockscale_kernel, _AITER_GEMM, constexprs, 2, aligned, 2)


def _loop_texts(asm):
    from compiled import amdgcn_code

    body, runs = amdgcn_code._loops(asm)
    return [[body[i][0] for i in run] for run in runs]


def test_bad_input_names_the_problem(kernels, capsys):
    base = ["kernel", "--hw", "h200", "--triton", f"{kernels}:scale_add", "--grid", "4"]
    good = ["--arg", "x=fp32[4096]", "--arg", "y=fp32[4096]", "--arg", "n=4096", "--arg", "alpha=1.0",
            "--arg", "BLOCK=1024"]
    cases = [
        (base + good + ["--arg", "out=fp32[1000]"], "after the last of out"),
        (base + good, "needs --arg out="),
        (base + good + ["--arg", "out=fp32[4096]", "--arg", "beta=2"], "no parameter beta"),
        (base + good + ["--arg", "out=fp99[4096]"], "unknown datatype 'fp99'"),
        (base + good + ["--arg", "out=fp32[0]"], "positive sizes"),
        (["kernel", "--hw", "h200", "--triton", f"{kernels}:nothing", "--grid", "4"], "has no nothing"),
        (["kernel", "--hw", "h200", "--triton", f"{kernels}:two_loops", "--grid", "1", "--arg", "x=fp32[64]",
          "--arg", "n=64", "--arg", "BLOCK=32"], "2 loops"),
        (["kernel", "--hw", "h200", "--triton", f"{kernels}:scale_add"], "--grid"),
        (["kernel", "--hw", "h200", "gemm", "--triton", f"{kernels}:scale_add", "--grid", "1"], "one or the other"),
        (base + good + ["--arg", "out=fp32[4096]", "--num-warps", "3"], "power of two"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)


def test_without_triton_the_option_says_how_to_get_it(kernels, monkeypatch):
    monkeypatch.setattr(triton_build, "available", lambda: False)
    with pytest.raises(TritonKernelError, match=r"infersim\[triton\]"):
        triton_launch(f"{kernels}:scale_add", (1, 1, 1), {}, load_gpu("h200"))


def test_an_index_of_distinct_rows_reads_every_row_where_a_constant_one_reads_one(kernels):
    """A gather: with `=perm` each program reads its own row of x from HBM; with the default 0 every program reads
    row 0, which L2 serves after the first."""
    rows, d = 512, 256
    gpu = load_gpu("h200")

    def launch(fill):
        return triton_launch(f"{kernels}:gather_rows", (rows, 1, 1),
                             {"x": TensorArg("bf16", (rows, d)), "index": TensorArg("i32", (rows,), fill),
                              "out": TensorArg("bf16", (rows, d)), "D": d}, gpu)

    distinct, same = launch("perm"), launch(0)
    row_bytes = 2 * d
    assert distinct.work.read_bytes == pytest.approx(rows * row_bytes + 4 * rows, rel=0.02)
    assert same.work.read_bytes < 4 * row_bytes + 4 * rows
    calib = load_calibration(gpu.name, None)
    assert (kernel_time(distinct.work, gpu, calib, LaunchMode.GRAPH).time_s
            > kernel_time(same.work, gpu, calib, LaunchMode.GRAPH).time_s)


def test_index_fills_are_the_element_numbers_in_order_or_in_a_fixed_order():
    assert TensorArg("i32", (2, 3), "arange").values().tolist() == [0, 1, 2, 3, 4, 5]
    perm = TensorArg("i32", (1000,), "perm").values()
    assert sorted(perm.tolist()) == list(range(1000)) and perm.tolist() != list(range(1000))
    assert perm.tolist() == TensorArg("i32", (1000,), "perm").values().tolist()  # the same every run
    assert TensorArg("i32", (4,), 7).values() == 7


def test_arguments_parse_as_tensors_numbers_and_flags():
    assert parse_arg("x=bf16[4096, 512]") == ("x", TensorArg("bf16", (4096, 512)))
    assert parse_arg("lens=i32[8]=1024") == ("lens", TensorArg("i32", (8,), 1024))
    assert parse_arg("ids=i32[8]=perm") == ("ids", TensorArg("i32", (8,), "perm"))
    assert parse_arg("ids=i64[8]=arange") == ("ids", TensorArg("i64", (8,), "arange"))
    assert parse_arg("n=4096") == ("n", 4096) and parse_arg("s=0.125") == ("s", 0.125)
    assert parse_arg("CAUSAL=True") == ("CAUSAL", True)
    assert parse_grid("8") == (8, 1, 1) and parse_grid("4,2,3") == (4, 2, 3)
    for bad in ("x", "=3", "x=bf16[4]=2", "x=hello", "x=bf16[4]=perm", "x=u8[300]=arange", "x=i32[4]=shuffle"):
        with pytest.raises(TritonKernelError):
            parse_arg(bad)
    for bad in ("0", "1,2,3,4", "a"):
        with pytest.raises(TritonKernelError):
            parse_grid(bad)


def test_a_kernel_named_by_its_module_is_the_kernel_of_its_file(capsys):
    # `MODULE:KERNEL` (the shipped examples, found from any folder) predicts what `FILE.py:KERNEL` does
    from pathlib import Path

    from compiled import examples

    argv = ["--grid", "64", "--launch", "graph", "--arg", "x=fp16[64,4096]", "--arg", "out=fp32[64]",
            "--arg", "cols=4096", "--arg", "stride=4096", "--arg", "BLOCK=1024", "--json"]
    by_file = str(Path(examples.__file__).parent / "triton_kernels.py")
    times = []
    for spec in ("compiled.examples.triton_kernels:row_sums", f"{by_file}:row_sums"):
        assert main(["kernel", "--hw", "h200", "--triton", spec, *argv]) == 0
        times.append(json.loads(capsys.readouterr().out)["time_s"])
    assert times[0] == times[1] > 0
    assert main(["kernel", "--hw", "h200", "--triton", "no.such.module:row_sums", "--grid", "1"]) == 2
    assert "no importable module of that name" in capsys.readouterr().err


def test_a_process_that_interprets_kernels_still_compiles_them(tmp_path):
    """Triton imported under TRITON_INTERPRET=1 (a CPU test run of the kernels) holds tl.sum and the rest of the
    language's own @triton.jit functions as interpreted ones: a kernel that calls one is compiled in a child
    process there, and gives the code a plain process gives. Fresh caches: Triton's own would skip the tracing."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    (tmp_path / "summing.py").write_text(textwrap.dedent('''
        import triton
        import triton.language as tl

        @triton.jit
        def row_total(x, out, BLOCK: tl.constexpr):
            cols = tl.arange(0, BLOCK)
            tl.store(out + tl.program_id(0), tl.sum(tl.load(x + tl.program_id(0) * BLOCK + cols), axis=0))
    '''))
    script = textwrap.dedent(f'''
        import importlib.util, sys
        from compiled import triton_build
        spec = importlib.util.spec_from_file_location("summing", {str(tmp_path / "summing.py")!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        build = triton_build._build(module.row_total, {{"x": "*fp32", "out": "*fp32", "BLOCK": "constexpr"}},
                                    {{"BLOCK": 256}}, 4, (), 3, triton_build.Target("cuda", "sm_90"))
        print(triton_build.language_interpreted(), build.registers, build.asm.count("SHFL"))
    ''')

    def run(interpret: bool) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.update(TRITON_CACHE_DIR=str(tmp_path / ("tc_i" if interpret else "tc")), INFERSIM_NO_CACHE="1",
                   PYTHONPATH=str(ROOT), **({"TRITON_INTERPRET": "1"} if interpret else {}))
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    interpreted, plain = run(True), run(False)
    assert interpreted[0] == "True" and plain[0] == "False"
    assert interpreted[1:] == plain[1:] and int(plain[2]) > 0  # the same registers; tl.sum's warp shuffles
