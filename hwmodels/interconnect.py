"""Links between GPUs (and to the host) as a directed graph, and the time of concurrent transfers on it.

A transfer costs its route's latency (alpha) plus its bytes over the bandwidth it gets. Transfers that
share a link share its bandwidth max-min fairly: the most contended link is filled first, its flows
fixed at their equal share, and the rest re-shared (progressive filling). When a flow finishes, the
survivors are re-shared, so the result is exact for piecewise-constant fair sharing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hwmodels.spec import GPU, Platform, Topology

SWITCH = "switch"
# PCIe achieves ~80% of its line rate for large DMA copies: assumption (TLP headers and flow control
# of PCIe Gen5 cost ~15-20%; no measurement yet).
PCIE_EFFICIENCY = 0.8


def gpu_node(rank: int) -> str:
    return f"gpu{rank}"


def host_node(rank: int) -> str:
    return f"host{rank}"


@dataclass(frozen=True)
class Link:
    """One direction of a connection: usable bandwidth and one-hop latency."""

    src: str
    dst: str
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True)
class Transfer:
    """`size_bytes` from `src` to `dst`, ready at `start_s`."""

    src: str
    dst: str
    size_bytes: float
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if self.size_bytes < 0 or self.start_s < 0:
            raise ValueError(f"transfer size and start must not be negative: {self}")


@dataclass(frozen=True)
class Fabric:
    """The links of one platform, keyed by (src, dst)."""

    name: str
    gpus: int
    topology: Topology
    links: dict[tuple[str, str], Link]
    link_efficiency: float = 1.0  # usable share of the line rate already applied to every GPU link
    peer_load_latency_s: float = 0.0  # an SM's load from a peer GPU's memory, round trip (0: not modelled)

    def line_rate_bytes_per_s(self, ranks: int) -> float:
        """Raw bandwidth out of rank 0 to the other members of a group of `ranks` (one direction)."""
        if self.topology is Topology.FULL_MESH:
            usable = sum(self.links[(gpu_node(0), gpu_node(r))].bandwidth_bytes_per_s for r in range(1, ranks))
        else:
            usable = self.gpu_bandwidth_bytes_per_s
        return usable / self.link_efficiency

    def route(self, src: str, dst: str) -> tuple[Link, ...]:
        """The links a transfer crosses: one hop on a mesh or pair, two through a switch."""
        if (src, dst) in self.links:
            return (self.links[(src, dst)],)
        if (src, SWITCH) in self.links and (SWITCH, dst) in self.links:
            return (self.links[(src, SWITCH)], self.links[(SWITCH, dst)])
        raise ValueError(f"{self.name}: no route from {src} to {dst}")

    @property
    def gpu_bandwidth_bytes_per_s(self) -> float:
        """Usable bandwidth out of one GPU to all its peers together."""
        return sum(link.bandwidth_bytes_per_s for (src, dst), link in self.links.items()
                   if src == gpu_node(0) and not dst.startswith("host"))


def build_fabric(platform: Platform, gpu: GPU) -> Fabric:
    """The link graph of a platform: full mesh (xGMI), switch (NVSwitch) or a direct pair (NVLink bridge)."""
    links: dict[tuple[str, str], Link] = {}
    per_link = platform.link_bandwidth_bytes_per_s * platform.link_efficiency
    alpha = platform.link_latency_s
    n = platform.gpus

    def add(src: str, dst: str, bandwidth: float, latency: float) -> None:
        links[(src, dst)] = Link(src, dst, bandwidth, latency)

    if platform.topology is Topology.FULL_MESH:
        # the links of a GPU are spread evenly over its peers (7 links, 7 peers on an 8-GPU mesh)
        share = platform.links_per_gpu / (n - 1)
        for i in range(n):
            for j in range(n):
                if i != j:
                    add(gpu_node(i), gpu_node(j), per_link * share, alpha)
    elif platform.topology is Topology.SWITCH:
        for i in range(n):
            add(gpu_node(i), SWITCH, platform.gpu_link_bytes_per_s, alpha / 2)
            add(SWITCH, gpu_node(i), platform.gpu_link_bytes_per_s, alpha / 2)
    else:
        add(gpu_node(0), gpu_node(1), platform.gpu_link_bytes_per_s, alpha)
        add(gpu_node(1), gpu_node(0), platform.gpu_link_bytes_per_s, alpha)
    for i in range(n):
        add(gpu_node(i), host_node(i), gpu.host_link_bytes_per_s * PCIE_EFFICIENCY, 0.0)
        add(host_node(i), gpu_node(i), gpu.host_link_bytes_per_s * PCIE_EFFICIENCY, 0.0)
    return Fabric(platform.name, n, platform.topology, links, platform.link_efficiency, platform.peer_load_latency_s)


def fair_rates(routes: Sequence[tuple[Link, ...]]) -> list[float]:
    """Max-min fair rates (bytes/s) of flows along `routes` sharing their links.

    Progressive filling: the links with the smallest equal share saturate together; their flows are
    fixed at that share and the rest re-shared. Symmetric collectives finish in one round.
    """
    rates = [0.0] * len(routes)
    unfixed = set(range(len(routes)))
    remaining: dict[tuple[str, str], float] = {}
    for route in routes:
        for link in route:
            remaining[(link.src, link.dst)] = link.bandwidth_bytes_per_s
    while unfixed:
        users: dict[tuple[str, str], list[int]] = {}
        for i in unfixed:
            for link in routes[i]:
                users.setdefault((link.src, link.dst), []).append(i)
        shares = {key: remaining[key] / len(flows) for key, flows in users.items()}
        share = min(shares.values())
        fixed = {i for key, flows in users.items() if shares[key] <= share * (1 + 1e-12) for i in flows}
        for i in fixed:
            rates[i] = share
            for link in routes[i]:
                remaining[(link.src, link.dst)] -= share
        unfixed -= fixed
    return rates


def transfer_finish_s(fabric: Fabric, transfers: Sequence[Transfer]) -> list[float]:
    """When each transfer completes: its start, its route's latency, then its bytes at the fair rate."""
    routes = [fabric.route(t.src, t.dst) for t in transfers]
    # a flow streams from start + latency; zero-byte flows finish then
    ready = [t.start_s + sum(link.latency_s for link in r) for t, r in zip(transfers, routes, strict=True)]
    left = [float(t.size_bytes) for t in transfers]
    finish = [ready[i] if left[i] == 0 else float("inf") for i in range(len(transfers))]
    now = min(ready, default=0.0)
    while any(f == float("inf") for f in finish):
        active = [i for i, f in enumerate(finish) if f == float("inf") and ready[i] <= now]
        if not active:
            now = min(ready[i] for i, f in enumerate(finish) if f == float("inf"))
            continue
        rates = fair_rates([routes[i] for i in active])
        upcoming = [ready[i] for i, f in enumerate(finish) if f == float("inf") and ready[i] > now]
        step = min(left[i] / r for i, r in zip(active, rates, strict=True))
        if upcoming:
            step = min(step, min(upcoming) - now)
        for i, r in zip(active, rates, strict=True):
            left[i] -= r * step
            if left[i] <= 1e-9 * max(1.0, transfers[i].size_bytes):
                left[i] = 0.0
                finish[i] = now + step
        now += step
    return finish
