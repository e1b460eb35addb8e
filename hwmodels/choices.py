"""Closed choices: read a name into an Enum member, or fail with the list of valid names."""

from __future__ import annotations

from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


def parse_choice(cls: type[E], text: object, what: str) -> E:
    """The member of `cls` whose value is `text` (case-insensitive); the error lists the valid values."""
    try:
        return cls(str(text).lower())
    except ValueError:
        choices = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"unknown {what} {text!r} (valid: {choices})") from None
