"""A collective library's protocols (NCCL/RCCL): per-step latency and bandwidth share, by message size.

Libraries switch protocols with size: a low-latency one for small messages (NCCL LL/LL128, which
spend part of every line on flags) and a bulk one for large messages (Simple). A ring collective of
`steps` steps moving `wire` bytes per rank then takes

    latency_s(p) + steps * step_latency_s(p) + wire / (raw_gpu_bandwidth * efficiency(p)),

with p the protocol for the size: a fixed cost per collective (kernel start, setup, the final
flag round), one per step, and the bytes at the protocol's share of the line rate.

Defaults are assumptions (calibrations/libraries/default.yaml); a platform's own file, fitted to its
measurements by `infersim validate --links PLATFORM --refit`, overlays them. A group smaller than its platform
whose ranks use the same links as a measured platform of that size takes that platform's fit (`SAME_LINKS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from hwmodels.spec import load_platform
from hwmodels.specfile import FieldError, load_record, overlay_keys, read_yaml

LIBRARY_DIR = Path(__file__).parent / "calibrations" / "libraries"
# (platform, ranks) -> the measured platform whose fit prices that group. A 2-rank NCCL ring on an HGX H100 or
# H200 board drives each GPU's 18 NVLink 4 ports toward one peer, as the measured NV18 pair does; the NVSwitch hop
# between them is assumed to fall within the fit's fixed latency. Without it a 2-rank ring took the defaults, whose
# 82 % share with no fixed cost is what 8-rank rings reach at large messages (published 8x H100 nccl-tests within
# 1 %), and came out 25-30 % fast at 32-64 MiB against the pair's measurements (245-269 GB/s bus bandwidth).
SAME_LINKS = {("h100-8", 2): "h200-2", ("h200-8", 2): "h200-2"}


@dataclass(frozen=True)
class CollectiveLibrary:
    """Latency and bandwidth share of the two protocol regimes of a vendor collective library."""

    name: str
    small_latency_s: float
    small_step_latency_s: float
    small_efficiency: float
    large_latency_s: float
    large_step_latency_s: float
    large_efficiency: float
    protocol_switch_bytes: float  # messages of at least this size use the large-message protocol
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for key in ("small_efficiency", "large_efficiency"):
            if not 0 < getattr(self, key) <= 1:
                raise FieldError(key, f"must be in (0, 1], got {getattr(self, key)}")

    def protocol(self, size_bytes: float) -> tuple[float, float, float]:
        """(fixed latency s, latency per step s, bandwidth share) for a message of `size_bytes`."""
        if size_bytes >= self.protocol_switch_bytes:
            return self.large_latency_s, self.large_step_latency_s, self.large_efficiency
        return self.small_latency_s, self.small_step_latency_s, self.small_efficiency


@cache
def load_library(platform_name: str, ranks: int | None = None) -> CollectiveLibrary:
    """The default library calibration, overlaid with the platform's fitted file if there is one; for a group of
    `ranks` that `SAME_LINKS` lists, the measured platform's calibration, its bandwidth shares rescaled so that it
    moves the same bytes a second over this platform's line rate."""
    measured = SAME_LINKS.get((platform_name, ranks))
    if measured is not None:
        library = load_library(measured)
        scale = _line_rate_bytes_per_s(measured) / _line_rate_bytes_per_s(platform_name)
        return replace(library, name=f"{library.name} ({ranks} ranks of {platform_name})",
                       small_efficiency=min(1.0, library.small_efficiency * scale),
                       large_efficiency=min(1.0, library.large_efficiency * scale))
    raw = dict(read_yaml(LIBRARY_DIR / "default.yaml"))
    where = LIBRARY_DIR / "default.yaml"
    own = LIBRARY_DIR / f"{platform_name}.yaml"
    if own.exists():
        raw = overlay_keys(CollectiveLibrary, raw, read_yaml(own))
        where = own
    return load_record(CollectiveLibrary, raw, where)


def _line_rate_bytes_per_s(platform_name: str) -> float:
    """Raw bandwidth out of one GPU of the platform, one direction, before any protocol's share."""
    platform = load_platform(platform_name)
    return platform.links_per_gpu * platform.link_bandwidth_bytes_per_s
