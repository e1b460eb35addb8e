"""The base of every kernel kind, and the checks and conversions of their fields."""

from __future__ import annotations

import numbers
from enum import Enum
from typing import TYPE_CHECKING

from hwmodels.work import Work

if TYPE_CHECKING:
    from hwmodels.spec import GPU


def cdiv(a: int, b: int) -> int:
    """Ceiling of a / b in exact integer arithmetic (tiles and grids of any size)."""
    return -(-a // b)


def check_ints(kernel: object, positive: tuple[str, ...] = (), nonnegative: tuple[str, ...] = ()) -> None:
    """Raise ValueError naming the first size field that is not an integer of the allowed sign (the positive ones
    first; every kernel made runs this)."""
    for name in positive:
        value = getattr(kernel, name)
        if type(value) is not int:
            _check_integer(name, value)
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    for name in nonnegative:
        value = getattr(kernel, name)
        if type(value) is not int:
            _check_integer(name, value)
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")


def _check_integer(name: str, value: object) -> None:
    """Raise ValueError unless `value` is an integer (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")


def coerce(kernel: object, name: str, enum: type[Enum]) -> None:
    """Accept a dtype or codec name (as the CLI passes it) and store the enum member instead."""
    value = getattr(kernel, name)
    if isinstance(value, str):
        try:
            object.__setattr__(kernel, name, enum.parse(value))  # type: ignore[attr-defined]
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    elif not isinstance(value, enum):
        raise ValueError(f"{name} must be a {enum.__name__}, got {value!r}")


def check_bool(kernel: object, name: str) -> None:
    """Reject a non-bool option, so that a stray string such as 'false' is not read as true."""
    if not isinstance(getattr(kernel, name), bool):
        raise ValueError(f"{name} must be a bool, got {getattr(kernel, name)!r}")


def full_block_figures(flop: float, size_bytes: float, items: int, items_per_block: int) -> dict[str, float]:
    """Work of one full block of a grid over `items` cut into blocks; the last block may be short."""
    share = min(items, items_per_block) / items if items else 0.0
    return {"flop_per_workgroup": flop * share, "bytes_per_workgroup": size_bytes * share}


class KernelKind:
    """A kernel kind: a frozen dataclass of shapes whose `launches()` are counted one Work per launch."""

    kind: str  # the CLI name, set by each subclass as a ClassVar

    def launches(self) -> tuple[Work, ...]:
        raise NotImplementedError

    def check_gpu(self, gpu: GPU) -> None:
        """Raise ValueError, naming the GPUs it does model, when this kind does not model `gpu` (most model all)."""

    def work(self) -> Work:
        """All launches summed, for counting (time each launch on its own grid)."""
        return sum(self.launches(), Work.nothing())
