"""The CLI's codec and collective queries, and the collective sweep chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hwmodels.calibration import load_calibration
from hwmodels.choices import parse_choice
from hwmodels.interconnect import build_fabric
from hwmodels.library import load_library
from hwmodels.roofline import LaunchMode
from hwmodels.spec import load_gpu, load_platform, spec_names
from infersim import flags
from simulator.cost.collective_algorithms import Algorithm
from simulator.cost.collective_policy import collective_time, select_allreduce
from workloads.codecs import Codec
from workloads.collectives import Collective, CollectiveOp


def codec_query(name: str) -> dict[str, Any]:
    """A codec's wire format: bits per value, block and tile sizes, bytes per tile."""
    codec = Codec.parse(name)
    return {
        "codec": codec.value,
        "bits_per_value": codec.bits_per_value,
        "block_values": codec.block_values,
        "tile_values": codec.tile_values,
        "tile_bytes": codec.tile_bytes,
        "scale_bytes_per_block": codec.scale_bytes_per_block,
        "compression_vs_fp16": codec.tile_values * 2 / codec.tile_bytes,
        "effective_bits_per_value": codec.tile_bytes * 8 / codec.tile_values,
    }


def platform_for(hw: str, tp: int) -> str:
    """The platform a GPU name or platform name means: `h200` is `h200-8`; a platform name stays."""
    if hw.lower() in spec_names("platforms"):
        return hw.lower()
    candidate = f"{hw.lower()}-8"
    if candidate not in spec_names("platforms"):
        valid = ", ".join(spec_names("platforms"))
        raise ValueError(f"no platform for {hw!r} (valid: {valid})")
    return candidate


def _enum(cls: Any, text: str | None, what: str) -> Any:
    return None if text is None else parse_choice(cls, text, what)


def collective_query(hw: str, *, tp: int, op: str, size: str, algo: str | None = None, codec: str | None = None,
                     launch: str = "graph") -> dict[str, Any]:
    """Time of one collective of `size` bytes over `tp` ranks of a platform."""
    platform = load_platform(platform_for(hw, tp))
    gpu = load_gpu(platform.gpu)
    if not 2 <= tp <= platform.gpus:
        raise ValueError(f"--tp must be in 2..{platform.gpus} on {platform.name}, got {tp}")
    operation = _enum(CollectiveOp, op, "op")
    algorithm = _enum(Algorithm, algo, "algorithm")
    codec_value = Codec.parse(codec) if codec else None
    if algorithm is Algorithm.QUICKREDUCE and codec_value is None:
        raise ValueError("--algo quickreduce needs --codec (fp, int8, int6, int4, int3, fp4)")
    size_bytes = flags.size(size, "--bytes")
    if size_bytes < 2:
        raise ValueError(f"--bytes must be at least 2 (one bf16 value), got {size_bytes}")
    fabric = build_fabric(platform, gpu)
    calib = load_calibration(gpu.name)
    collective = Collective(operation, size_bytes, tp, "query")
    result = collective_time(collective, fabric, gpu, calib, mode=LaunchMode(launch), algorithm=algorithm,
                             codec=codec_value)
    chosen = select_allreduce(size_bytes, tp, gpu, fabric, codec_value) if algorithm is None else None
    return {
        "platform": platform.name,
        "op": operation.value,
        "tp": tp,
        "bytes": size_bytes,
        "algorithm": result.algorithm.value,
        "codec": (codec_value or Codec.FP).value if result.algorithm is Algorithm.QUICKREDUCE else None,
        "selected_because": chosen.reason if chosen else "given by --algo",
        # the collective-library protocols a ring is priced with: the defaults, a platform's fit, or a borrowed one
        "library": load_library(platform.name, tp).name if result.algorithm is Algorithm.RING else None,
        "launch_mode": launch,
        "time_s": result.time_s,
        "launch_s": result.launch_s,
        "wire_bytes_per_rank": result.wire_bytes_per_rank,
        "algbw_bytes_per_s": size_bytes / result.time_s,
        "busbw_bytes_per_s": size_bytes / result.time_s * operation.bus_factor(tp),
        "phases": [{"phase": name, "time_s": t} for name, t in result.phases],
    }


def sweep_sizes(spec: str) -> list[int]:
    """'4KiB:1GiB' -> every power of two from 4 KiB to 1 GiB."""
    low_text, sep, high_text = spec.partition(":")
    if not sep:
        raise ValueError(f"--sweep {spec!r}: expected LOW:HIGH, e.g. 4KiB:1GiB")
    low, high = flags.size(low_text, "--sweep LOW"), flags.size(high_text, "--sweep HIGH")
    if low < 2 or high < low:
        raise ValueError(f"--sweep {spec!r}: need 2 <= LOW <= HIGH")
    sizes, size = [], 1 << (low - 1).bit_length()
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes


def collective_sweep(hw: str, *, tp: int, op: str, sizes: list[int], launch: str = "graph") -> dict[str, Any]:
    """Every algorithm (and QuickReduce codec) over `sizes`, with the speedup over the ring baseline."""
    variants: list[tuple[str, str | None, str | None]] = [("ring", "ring", None)]
    if op == CollectiveOp.ALL_REDUCE.value:
        variants += [("oneshot", "oneshot", None), ("twoshot", "twoshot", None)]
        variants += [(f"quickreduce-{c.value}", "quickreduce", c.value) for c in Codec
                     if c is not Codec.INT3 or tp == 2]
        variants.append(("selected", None, None))
    rows = []
    for size in sizes:
        row: dict[str, Any] = {"bytes": size}
        base = None
        for label, algo, codec in variants:
            t = collective_query(hw, tp=tp, op=op, size=str(size), algo=algo, codec=codec, launch=launch)["time_s"]
            base = base if base is not None else t
            row[f"{label}_time_s"] = t
            row[f"{label}_speedup"] = base / t
        rows.append(row)
    return {"platform": platform_for(hw, tp), "op": op, "tp": tp, "launch_mode": launch,
            "variants": [v[0] for v in variants], "rows": rows}


def binary_size(size: int) -> str:
    """Bytes in the largest binary unit that keeps a whole number or one decimal: 4 KiB, 1 MiB, 1.5 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            value = size / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size} B"


def sweep_figure(sweep: dict[str, Any]) -> Any:
    """Speedup over the ring against message size, one line per variant, the sizes labelled in binary units."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    figure = go.Figure()
    sizes = [row["bytes"] for row in sweep["rows"]]
    for i, variant in enumerate(sweep["variants"]):
        colour = qualitative.Dark24[i % len(qualitative.Dark24)]
        figure.add_trace(go.Scatter(x=sizes, y=[row[f"{variant}_speedup"] for row in sweep["rows"]],
                                    mode="lines+markers", name=variant, line={"color": colour},
                                    marker={"color": colour, "symbol": i // len(qualitative.Dark24)}))
    step = max(1, len(sizes) // 12)  # at most about a dozen labels
    ticks = sizes[::step]
    figure.update_layout(
        title=f"{sweep['op']} on {sweep['platform']}, TP{sweep['tp']}: speedup over the ring ({sweep['launch_mode']})",
        xaxis={"title": "message size (bytes, binary units)", "type": "log", "tickvals": ticks,
               "ticktext": [binary_size(s) for s in ticks]},
        yaxis={"title": "speedup over ring (x)"},
    )
    return figure


def write_sweep_chart(sweep: dict[str, Any], out_dir: str) -> Path:
    """A plotly chart of speedup over the ring for each variant (`sweep_figure`), written atomically as HTML."""
    from infersim.output_paths import atomic_write, check_folder

    figure = sweep_figure(sweep)
    out = check_folder(out_dir, "--out")
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"collective-{sweep['platform']}-tp{sweep['tp']}-{sweep['op']}.html"
    return atomic_write(target, lambda tmp: figure.write_html(tmp, include_plotlyjs=True), "--out")
