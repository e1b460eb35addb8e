"""How the bench times a collective sweep: calls and samples per case, the time budget, and the safe environment.

NVLink multicast stays off on these machines: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
NVSHMEM_DISABLE_NVLS=1 are forced in the parent's environment before anything starts (`force_safe_env`), so
every child process and nvidia-smi call inherits them, and every worker checks them again.
"""

from __future__ import annotations

import datetime
import math
import os

from validation.suites import EAGER

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# Timing policy. Below LARGE_BYTES: calls per sample chosen so one sample lasts about
# TARGET_SAMPLE_S, within [20, 200] eager calls or [10, 50] graph-captured calls; SAMPLES samples
# after WARM_SAMPLES untimed ones. From LARGE_BYTES up: LARGE_CALLS calls per sample, LARGE_SAMPLES.
TARGET_SAMPLE_S = 2e-3
EAGER_CALLS = (20, 200)
GRAPH_CALLS = (10, 50)
SAMPLES = 30
WARM_SAMPLES = 3
LARGE_BYTES = 64 << 20
LARGE_CALLS = 5
LARGE_SAMPLES = 20
LARGE_WARM_SAMPLES = 2
P2P_CALLS = 5
BUDGET_S = 270.0  # stop starting new cases after this long (a run of about 4 minutes)
DEADLINE_S = 330.0  # the workers are terminated after this long; their finished cases are kept


def plan(size_bytes: int, t_call_s: float, mode: str) -> tuple[int, int, int]:
    """(calls per sample, timed samples, warm-up samples) of one case, from a per-call estimate."""
    if size_bytes >= LARGE_BYTES:
        return LARGE_CALLS, LARGE_SAMPLES, LARGE_WARM_SAMPLES
    lo, hi = EAGER_CALLS if mode == EAGER else GRAPH_CALLS
    calls = min(hi, max(lo, math.ceil(TARGET_SAMPLE_S / max(t_call_s, 1e-9))))
    return calls, SAMPLES, WARM_SAMPLES


def force_safe_env(environ: dict | None = None) -> list[str]:
    """Set the multicast-off variables; returns the names that were missing or different."""
    environ = os.environ if environ is None else environ
    changed = [k for k, v in SAFE_ENV.items() if environ.get(k) != v]
    for k, v in SAFE_ENV.items():
        environ[k] = v
    return changed


def now_utc() -> str:
    """The `date` column of a row timed now."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
