"""A number field's allowed range declared beside its default, and one check that enforces it.

Settings dataclasses used to repeat ``if self.x < 0: raise ValueError(f"x must be >= 0, got ...")``
once per field in their ``__post_init__``. With :func:`bounded` the range stands on the field it
constrains (``workers: int = bounded(2, ge=1)``), and :func:`check_bounds` (called first in
``__post_init__``) raises the same message for every such field. Checks between fields
(``discard_turns_max >= discard_turns``) and choices among strings stay in ``__post_init__``.

It imports nothing of the package, so any module may use it without an import circle.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

__all__ = ["Bounds", "bounded", "check_bounds", "out_of_bounds"]

#: the key of a field's :class:`Bounds` in its ``metadata``
_KEY = "longcat_bounds"


@dataclass(frozen=True)
class Bounds:
    """The range a number must lie in; ``None`` leaves that side open."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        """``> 0``, ``>= 1``, ``in [0, 1]``, ``in (0, 1)``, ... as the error messages say it."""
        low = self.gt if self.gt is not None else self.ge
        high = self.lt if self.lt is not None else self.le
        if low is not None and high is not None:
            return f"in {'(' if self.gt is not None else '['}{low:g}, {high:g}{')' if self.lt is not None else ']'}"
        if low is not None:
            return f"{'>' if self.gt is not None else '>='} {low:g}"
        if high is not None:
            return f"{'<' if self.lt is not None else '<='} {high:g}"
        return "a number"

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is a number inside the range."""
        if not isinstance(value, int | float):
            return False
        return not (
            (self.ge is not None and not value >= self.ge)
            or (self.gt is not None and not value > self.gt)
            or (self.le is not None and not value <= self.le)
            or (self.lt is not None and not value < self.lt)
        )


def bounded(
    default: float,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
) -> Any:
    """A dataclass field with ``default`` whose value :func:`check_bounds` holds to the given range."""
    if ge is not None and gt is not None or le is not None and lt is not None:
        raise TypeError("bounded: give at most one lower bound (ge or gt) and one upper bound (le or lt)")
    return dataclasses.field(default=default, metadata={_KEY: Bounds(ge=ge, gt=gt, le=le, lt=lt)})


def out_of_bounds(obj: Any) -> list[tuple[str, str, Any]]:
    """``(field, what it must be, value)`` for every field of the dataclass instance ``obj`` outside
    the range :func:`bounded` declared for it (for checks that report all problems at once)."""
    declared = _declared(type(obj))
    out = []
    for f in dataclasses.fields(obj):
        bounds = declared.get(f.name)
        value = getattr(obj, f.name)
        if bounds is not None and not bounds.admits(value):
            kind = "" if isinstance(value, int | float) else "a number "
            out.append((f.name, kind + bounds.describe(), value))
    return out


@functools.cache
def _declared(cls: type) -> dict[str, Bounds]:
    """Each field's range as the class hierarchy declares it: a subclass that only gives a field
    another default (``max_turn_tokens: int = 1024``) keeps its base's range; one that declares
    a range of its own replaces it."""
    found: dict[str, Bounds] = {}
    for klass in reversed(cls.__mro__):
        for f in getattr(klass, "__dataclass_fields__", {}).values():
            if _KEY in f.metadata:
                found[f.name] = f.metadata[_KEY]
    return found


def check_bounds(obj: Any, prefix: str = "") -> None:
    """ValueError ``{prefix}{field} must be {range}, got {value!r}`` for the first field of the
    dataclass instance ``obj`` outside the range :func:`bounded` declared for it."""
    for name, must, value in out_of_bounds(obj)[:1]:
        raise ValueError(f"{prefix}{name} must be {must}, got {value!r}")
