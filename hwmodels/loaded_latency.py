"""How much longer a dependent DRAM round trip takes while the GPU's memory is busy, by the kind of traffic.

The loaded-latency probe (`validation/data/h200/probe_loaded.csv`) chases pointers on one SM while a background
kernel reads, copies or writes on the others. On the H200, reads at 3.5 TB/s lengthen a round trip by 14 %; writes
at the same rate by 107 %, and copies (half of each) at 3.3 TB/s by 76 %: writes hold reads back in the memory
controller long before they approach its bandwidth. The GPU spec keeps the three curves
(`GPU.dram_latency_under_reads`, `..._copies`, `..._writes`); a launch moving reads r and writes w per second takes
the factor at r + w on each curve, linearly in between the points, 1 below the first, the last beyond it (no
measurement there), and between the curves linearly in its write share w / (r + w) (0, 1/2, 1).

Only the dependent round trips of a program's chains (`Chain.dram`), timed at the idle latency, take the factor:
that is the quantity the probe measures. The memory curve's latency (`Calibration.mlp_latency_s`) is a bulk
transfer's effective latency, fitted with every SM reading, and stays as it is (scaling it too made the copy family
8-13 % slow: `validation/NOTES.md`). A launch's rates depend on its time, and its time on the factor:
`hwmodels.roofline.under_load` solves the two together.
"""

from __future__ import annotations

import bisect

from hwmodels.spec import GPU

TB = 1e12


def measured(gpu: GPU) -> bool:
    """Whether the GPU's spec holds the loaded-latency curves."""
    return bool(gpu.dram_latency_under_reads)


def _on_curve(pairs: tuple[float, ...], bytes_per_s: float) -> float:
    """The factor at `bytes_per_s` on one curve of flat (TB/s, factor) pairs."""
    rates, factors = pairs[::2], pairs[1::2]
    rate = bytes_per_s / TB
    i = bisect.bisect_right(rates, rate)
    if i == len(rates):
        return factors[-1]
    low_rate, low = (rates[i - 1], factors[i - 1]) if i else (0.0, 1.0)
    return low + (factors[i] - low) * (rate - low_rate) / (rates[i] - low_rate)


def latency_factor(gpu: GPU, read_bytes_per_s: float, write_bytes_per_s: float) -> float:
    """A dependent DRAM round trip's latency over the idle one while the launch moves these reads and writes per
    second; 1 where the GPU has no curves or the launch moves nothing."""
    total = read_bytes_per_s + write_bytes_per_s
    if not measured(gpu) or total <= 0:
        return 1.0
    reads = _on_curve(gpu.dram_latency_under_reads, total)
    copies = _on_curve(gpu.dram_latency_under_copies, total)
    writes = _on_curve(gpu.dram_latency_under_writes, total)
    share = write_bytes_per_s / total
    return (reads + (copies - reads) * share / 0.5 if share <= 0.5
            else copies + (writes - copies) * (share - 0.5) / 0.5)
