"""Plausible typed values for generated database records (names, emails, dates, money ...)."""

from __future__ import annotations

import datetime as _dt
import functools
import random
import string
from typing import Any

from longcat_plugins.environments.spec import FieldSpec

FIRST = (
    "Ava Liam Maya Noah Zoe Omar Lena Ivan Nora Raj Mila Theo Sara Hugo Iris Kai Lucia Mateo Yuki Amir Chloe Diego "
    "Elena Felix Grace Hana Ines Jonas Kira Leo Mina Nina Oscar Priya Quinn Rosa Sami Tara Uma Victor Wen Ximena"
).split()
LAST = (
    "Lopez Chen Patel Novak Silva Kim Rossi Dubois Okafor Meyer Tanaka Cohen Haddad Larsen Moreau Ivanova Santos "
    "Nguyen Walsh Kowalski Fischer Alvarez Berg Costa Duarte Ebert Farah Gupta Horvat Ito Jensen Kaur"
).split()
CITIES = (
    "Lisbon Denver Osaka Austin Milan Dublin Seattle Porto Boston Lyon Kyoto Vienna Oslo Zurich Madrid Prague Toronto "
    "Chicago Berlin Munich Sydney Nairobi Lima Seoul"
).split()
ADJ = (
    "Aurora Cobalt Summit Willow Ember Harbor Nimbus Cedar Quartz Velvet Atlas Birch Coral Delta Echo Falcon Granite "
    "Juniper Lunar Maple Nova Orchid Pioneer Radiant Sable Tidal Umber Vista Zephyr Alpine Crimson Golden"
).split()
NOUN = (
    "Lamp Kettle Backpack Blender Chair Jacket Speaker Journal Mug Tent Drone Watch Scarf Pillow Grill Router "
    "Bistro Garden Kitchen Grill House Table Lounge Palace Diner Tavern Express Plaza Court Inn Suites"
).split()
STREETS = "Oak Pine Elm Maple Cedar Birch Harbor Lake Hill River Park Mill Church Market".split()
WORDS = "late broken missing wrong quick fragile urgent spare extra blue quiet early weekly noisy bright small".split()


#: field types whose values a pooled :class:`ValueMaker` draws from :func:`value_pool`: the strings a
#: task states for the agent to copy; enums, numbers, dates and references are drawn as always
POOLED_TYPES = ("code", "email", "phone", "name", "word", "text", "city")


def pool_kind(f: FieldSpec) -> str:
    """Which pool a field draws from: its type, with street addresses apart from other text."""
    return "street" if f.type == "text" and ("street" in f.name or "address" in f.name) else f.type


POOL_KINDS = ("code", "email", "phone", "name", "word", "text", "street", "city")


@functools.lru_cache(maxsize=64)
def value_pool(kind: str, size: int) -> tuple[str, ...]:
    """``size`` distinct values of ``kind`` (all 24 for ``city``), the same for every generator seed:
    held-out environments draw from the pool the training ones did, so a model can be given each
    value as one token while which value a task states stays a draw from hundreds."""
    if kind not in POOL_KINDS:
        raise ValueError(f"no value pool of kind {kind!r}; kinds: {', '.join(POOL_KINDS)}")
    if kind == "city":
        return tuple(CITIES)
    field = FieldSpec(name="street" if kind == "street" else kind, type="text" if kind == "street" else kind)
    maker = ValueMaker(random.Random(f"value-pool:{kind}"))
    out: dict[str, None] = {}
    for _ in range(size * 50):
        out[maker._raw(field, 0)] = None
        if len(out) == size:
            return tuple(out)
    raise ValueError(f"value_pool: fewer than {size} distinct {kind} values")


class ValueMaker:
    """Random field values from one RNG, unique where the field (or the entity label) demands it.

    ``pool``: draw the :data:`POOLED_TYPES` from :func:`value_pool` of that size (0: from their
    whole space)."""

    def __init__(self, rng: random.Random, pool: int = 0) -> None:
        self.rng = rng
        self.pool = pool
        self.used: dict[tuple[str, str], set[Any]] = {}

    def make(self, entity: str, f: FieldSpec, unique: bool = False) -> Any:
        used = self.used.setdefault((entity, f.name), set()) if (unique or f.unique) else None
        for attempt in range(200):
            v = self._raw(f, attempt)
            if used is None:
                return v
            if v not in used:
                used.add(v)
                return v
        raise RuntimeError(f"cannot make a unique {entity}.{f.name} value")

    def claim(self, entity: str, f: FieldSpec, value: Any) -> None:
        self.used.setdefault((entity, f.name), set()).add(value)

    def different(self, entity: str, f: FieldSpec, current: Any) -> Any:
        """A value of ``f`` other than ``current`` (for updates)."""
        if f.type == "bool":
            return not current
        if f.type == "enum":
            others = [v for v in f.values if v != current]
            return self.rng.choice(others) if others else current
        for _ in range(50):
            v = self.make(entity, f)
            if v != current:
                return v
        return current

    def _raw(self, f: FieldSpec, attempt: int) -> Any:
        r = self.rng
        t = f.type
        if self.pool and t in POOLED_TYPES:
            return r.choice(value_pool(pool_kind(f), self.pool))
        if t == "name":
            return f"{r.choice(FIRST)} {r.choice(LAST)}"
        if t == "email":
            return f"{r.choice(FIRST).lower()}.{r.choice(LAST).lower()}{r.randint(1, 999)}@example.com"
        if t == "phone":
            return f"555-{r.randint(100, 999)}-{r.randint(1000, 9999)}"
        if t == "city":
            return r.choice(CITIES)
        if t == "word":
            return f"{r.choice(ADJ)} {r.choice(NOUN)}" + (f" {r.randint(2, 99)}" if attempt > 20 else "")
        if t == "text":
            if "street" in f.name or "address" in f.name:
                return f"{r.randint(1, 999)} {r.choice(STREETS)} Street"
            return " ".join(r.choice(WORDS) for _ in range(3)) + f" {r.choice(NOUN).lower()}"
        if t == "code":
            return "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(6))
        if t == "date":
            return (_dt.date(2025, 1, 1) + _dt.timedelta(days=r.randint(0, 540))).isoformat()
        if t == "time":
            return f"{r.randint(6, 22):02d}:{r.choice((0, 15, 30, 45)):02d}"
        if t == "int":
            return r.randint(int(f.min), int(f.max))
        if t == "money":
            return round(r.uniform(f.min, f.max), 2)
        if t == "bool":
            return r.random() < 0.5
        if t == "enum":
            return r.choice(f.values)
        raise ValueError(f"no generator for field type {t!r}")
