"""Calibration: efficiencies per kernel family and datatype, partial-grid bandwidth, and launch overheads."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

from hwmodels.dtypes import Dtype
from hwmodels.specfile import FieldError, load_record, overlay_keys, read_yaml
from hwmodels.work import Family

CALIBRATION_DIR = Path(__file__).parent / "calibrations"
DEFAULT = "default"
# The terms that can bound a launch, as `family_time_scale` keys them (beside `default`)
TIME_SCALE_BOUNDS = ("compute", "memory", "latency", DEFAULT)


class CostModel(Enum):
    """How a launch is timed: the roofline with its partial-grid heuristics, or workgroup programs (cycle-level)."""

    ROOFLINE = "roofline"
    CYCLE = "cycle"


@dataclass(frozen=True)
class Calibration:
    """How far real kernels fall short of the roofline; starts from documented defaults, later fitted.

    `compute_efficiency[family][dtype]` and `memory_efficiency[family]` fall back to the `default`
    entry. `hbm_saturation_cu_fraction` is the share of CUs that must stream at once to reach full HBM
    bandwidth; `latency_hiding_workgroups_per_cu` is how many resident workgroups a CU needs to hide
    memory latency. Launch overheads, when set, replace the GPU spec's.
    """

    name: str
    compute_efficiency: Mapping[str, Mapping[str, float]]
    memory_efficiency: Mapping[str, float]
    hbm_saturation_cu_fraction: float
    latency_hiding_workgroups_per_cu: float
    launch_eager_s: float | None = None
    launch_graph_node_s: float | None = None
    # The cycle-level model's curve of a CU's HBM bandwidth against its bytes in flight (hwmodels.cycle_time):
    # Little's law at `mlp_latency_s` (None: the GPU's pointer-chase DRAM latency times `mlp_latency_ratio`), bent
    # by `mlp_smoothness` into the CU's ceiling.
    mlp_smoothness: float = 2.0
    mlp_latency_s: float | None = None
    mlp_latency_ratio: float = 1.0
    mlp_deep_thread_share: float = 1.0  # of a thread's register loads beyond 32 bytes, the share in flight
    # HBM bandwidth a grid-stride (persistent) loop reaches, over one workgroup per tile's (`Program.grid_stride`)
    grid_stride_efficiency: float = 1.0
    # What a vendor-library GEMM launch (family gemm) spends beyond its tiles' work and the launch itself: the
    # persistent kernel's set-up before its first tile and its epilogue's completion (the gemm-floor probe); 0:
    # not measured for this GPU
    library_gemm_setup_s: float = 0.0
    # the same for CUTLASS's grouped GEMM as `torch._grouped_mm` runs it (the grouped probe's one-tile call): its
    # TMA descriptors set up in global memory, its clusters launched, its one tile's epilogue completed; 0: not
    # measured for this GPU
    library_grouped_setup_s: float = 0.0
    # what the grouped GEMM's persistent CTAs spend on each empty group past the call's last rows: after its last
    # tile every CTA walks the remaining groups' problem sizes to the end of the list (the grouped probe's `tail1`
    # over `few1`); 0: not measured for this GPU
    library_grouped_scan_s: float = 0.0
    cost_model: CostModel = CostModel.CYCLE
    # Fitted on measured traces (`infersim calibrate`): a launch's time (its compute, memory and latency terms;
    # not the launch overhead) times the factor of its family and of the term that bounds it (`compute`,
    # `memory`, `latency`), else the family's `default`; families not named keep 1.
    family_time_scale: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    fitted_on: str = ""  # what a fitted calibration was fitted on and tested against (text; nothing reads it)
    gpu: str = ""  # the GPU a fitted calibration was fitted on: loading it for another GPU is an error
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        families = {f.value for f in Family} | {DEFAULT}
        dtypes = {d.value for d in Dtype} | {DEFAULT}
        for fam, per_dtype in self.compute_efficiency.items():
            _check_names("compute_efficiency", [fam], families)
            _check_names(f"compute_efficiency.{fam}", per_dtype, dtypes)
            for dtype, eff in per_dtype.items():
                _check_efficiency(f"compute_efficiency.{fam}.{dtype}", eff)
        _check_names("memory_efficiency", self.memory_efficiency, families)
        for fam, eff in self.memory_efficiency.items():
            _check_efficiency(f"memory_efficiency.{fam}", eff)
        if DEFAULT not in self.compute_efficiency or DEFAULT not in self.compute_efficiency[DEFAULT]:
            raise FieldError("compute_efficiency", "needs a default.default entry")
        if DEFAULT not in self.memory_efficiency:
            raise FieldError("memory_efficiency", "needs a default entry")
        _check_efficiency("hbm_saturation_cu_fraction", self.hbm_saturation_cu_fraction)
        if self.mlp_latency_s is not None and not self.mlp_latency_s > 0:
            raise FieldError("mlp_latency_s", f"must be positive, got {self.mlp_latency_s}")
        if not 1 <= self.mlp_latency_ratio <= 4:
            raise FieldError("mlp_latency_ratio", f"must be in [1, 4], got {self.mlp_latency_ratio}")
        if not 0 < self.mlp_deep_thread_share <= 1:
            raise FieldError("mlp_deep_thread_share", f"must be in (0, 1], got {self.mlp_deep_thread_share}")
        if not 0 < self.grid_stride_efficiency <= 1:
            raise FieldError("grid_stride_efficiency", f"must be in (0, 1], got {self.grid_stride_efficiency}")
        for name in ("library_gemm_setup_s", "library_grouped_setup_s", "library_grouped_scan_s"):
            if not 0 <= getattr(self, name) < 1e-3:
                raise FieldError(name, f"must be in [0, 1 ms), got {getattr(self, name)}")
        if not self.mlp_smoothness > 0:
            raise FieldError("mlp_smoothness", f"must be positive, got {self.mlp_smoothness}")
        if self.latency_hiding_workgroups_per_cu < 1:
            raise FieldError("latency_hiding_workgroups_per_cu", "must be at least 1")
        _check_names("family_time_scale", self.family_time_scale, {f.value for f in Family})
        for fam, per_bound in self.family_time_scale.items():
            _check_names(f"family_time_scale.{fam}", per_bound, set(TIME_SCALE_BOUNDS))
            for bound, scale in per_bound.items():
                if not (isinstance(scale, int | float) and 0.05 <= scale <= 20):
                    raise FieldError(f"family_time_scale.{fam}.{bound}", f"must be in [0.05, 20], got {scale}")

    def time_scale_for(self, family: Family | None, bound: str) -> float:
        """The fitted factor on a launch of this family bound by `bound` (1 where none was fitted)."""
        table = self.family_time_scale.get(family.value, {}) if family else {}
        return table.get(bound, table.get(DEFAULT, 1.0))

    def compute_efficiency_for(self, family: Family | None, dtype: Dtype) -> float:
        """Share of the dtype's dense peak this family reaches."""
        table = self.compute_efficiency.get(family.value if family else DEFAULT, {})
        default = self.compute_efficiency[DEFAULT]
        return table.get(dtype.value, table.get(DEFAULT, default.get(dtype.value, default[DEFAULT])))

    def memory_efficiency_for(self, family: Family | None) -> float:
        """Share of peak HBM bandwidth this family reaches with the whole GPU streaming."""
        return self.memory_efficiency.get(family.value if family else DEFAULT, self.memory_efficiency[DEFAULT])


def _check_names(key: str, names: Any, valid: set[str]) -> None:
    for name in names:
        if name not in valid:
            raise FieldError(f"{key}.{name}", f"unknown name (valid: {', '.join(sorted(valid))})")


def _check_efficiency(key: str, value: float) -> None:
    if not 0 < value <= 1:
        raise FieldError(key, f"must be in (0, 1], got {value}")


def _deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Tables merge key by key; a quantity replaces every spelling of its field (`_us` over `_s`)."""
    merged = dict(base)
    for key, value in overlay.items():
        is_leaf = isinstance(value, Mapping) and set(value) == {"value", "source"}
        if isinstance(value, Mapping) and not is_leaf and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged = overlay_keys(Calibration, merged, {key: value})
    return merged


# The cost model a caller chose for everything it times (`infersim validate --cost-model`, the before/after
# columns of the report); None: each calibration's own.
_CHOSEN_MODEL: contextvars.ContextVar[CostModel | None] = contextvars.ContextVar("cost_model", default=None)


# A calibration file the caller chose for everything it times (`--calibration` of `run`, `step`, `compare`,
# `validate`): overlaid on each GPU's calibration wherever one is loaded without a path of its own.
_CHOSEN_PATH: contextvars.ContextVar[str | None] = contextvars.ContextVar("calibration_path", default=None)


@contextlib.contextmanager
def calibration_chosen(path: str | Path | None) -> Iterator[None]:
    """Within the block, every calibration loaded without an explicit path overlays the file at `path`."""
    if path is not None and not Path(path).is_file():
        raise FieldError("calibration", f"{path}: no such calibration file")
    token = _CHOSEN_PATH.set(None if path is None else str(path))
    try:
        yield
    finally:
        _CHOSEN_PATH.reset(token)


def chosen() -> tuple[str | None, str | None]:
    """The calibration file and cost model the caller chose (`calibration_chosen`, `cost_model_chosen`), for
    memos whose results depend on them."""
    model = _CHOSEN_MODEL.get()
    return _CHOSEN_PATH.get(), model.value if model else None


@contextlib.contextmanager
def cost_model_chosen(model: CostModel | str | None) -> Iterator[None]:
    """Within the block, every calibration loaded without an explicit model uses `model`."""
    token = _CHOSEN_MODEL.set(_parse_model(model) if model is not None else None)
    try:
        yield
    finally:
        _CHOSEN_MODEL.reset(token)


def _parse_model(model: CostModel | str) -> CostModel:
    if isinstance(model, CostModel):
        return model
    try:
        return CostModel(model)
    except ValueError:
        valid = ", ".join(m.value for m in CostModel)
        raise FieldError("cost_model", f"unknown cost model {model!r} (valid: {valid})") from None


def load_calibration(gpu_name: str | None = None, path: str | Path | None = None,
                     cost_model: CostModel | str | None = None) -> Calibration:
    """The default calibration, overlaid with `calibrations/<gpu>.yaml` if it exists, then with `path` (else the
    file `calibration_chosen` set, if any);
    `cost_model` ('cycle' or 'roofline', else the one chosen by `cost_model_chosen`) replaces the file's."""
    path = path if path is not None else _CHOSEN_PATH.get()
    calib = _load_calibration(gpu_name, None if path is None else str(path))
    if calib.gpu and gpu_name and calib.gpu != gpu_name:
        raise FieldError("calibration", f"{path}: fitted on {calib.gpu}, not usable for {gpu_name}")
    cost_model = cost_model if cost_model is not None else _CHOSEN_MODEL.get()
    if cost_model is None:
        return calib
    model = _parse_model(cost_model)
    return calib if model is calib.cost_model else dataclasses.replace(calib, cost_model=model)


def shipped_calibration(gpu_name: str) -> Calibration:
    """The calibration shipped for a GPU (the default overlaid with `calibrations/<gpu>.yaml`), at the cycle-level
    model, whatever calibration file or cost model a run chose: what a library's own choices are timed with."""
    calib = _load_calibration(gpu_name, None)
    return calib if calib.cost_model is CostModel.CYCLE else dataclasses.replace(calib, cost_model=CostModel.CYCLE)


@cache
def _load_calibration(gpu_name: str | None, path: str | None) -> Calibration:
    raw = read_yaml(CALIBRATION_DIR / f"{DEFAULT}.yaml")
    where = CALIBRATION_DIR / f"{DEFAULT}.yaml"
    overlays = []
    if gpu_name and (CALIBRATION_DIR / f"{gpu_name}.yaml").exists():
        overlays.append(CALIBRATION_DIR / f"{gpu_name}.yaml")
    if path is not None:
        overlays.append(Path(path))
    for overlay_path in overlays:
        overlay = read_yaml(overlay_path)
        if not isinstance(overlay, Mapping):
            return load_record(Calibration, overlay, overlay_path)  # raises, naming the file
        raw = _deep_merge(raw, overlay)
        where = overlay_path
    return load_record(Calibration, raw, where)
