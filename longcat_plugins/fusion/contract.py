"""The contract between the fusion engine and a fusion method.

A fusion method is a plain function the engine calls once per floating-point tensor::

    def my_method(base, experts, weights, ctx, *, alpha: float = 0.5) -> tuple[Tensor, dict]:
        ...
        return merged, {"dropped": [n0, n1]}

- ``base``: the base checkpoint's tensor, ``experts``: the experts' tensors (same shape), all
  float32 copies the method owns (it may work in place, which keeps peak memory at about
  N+1 tensors);
- ``weights``: one float per expert, from the fuse config;
- ``ctx``: a :class:`TensorContext` (tensor name, seeded per-expert random generators, the
  experts' global task-vector norms when the method asked for them);
- keyword-only parameters, typed and with defaults, are the method's config schema
  (:func:`longcat_plugins.components.schema_from_signature`): the fuse YAML's ``params``.
  Keep their annotations evaluable (no ``from __future__ import annotations`` in that
  module): the schema is checked with :func:`typing.get_type_hints`.

It returns the merged tensor (float32, the base's shape) and per-expert element counts,
summed by the engine over all tensors and reported as fractions (``dropped``, ``erased``).
A method decorated with :func:`reports_delta_norms` also returns ``stats["delta_sq"]``
(Σ (θ_i − θ_base)² of this tensor, per expert), sparing the engine the pass over the
inputs it otherwise makes for the summary's task-vector norms.
A method raises :class:`ParamError` for a bad parameter value: the engine calls it once on a
one-element probe before anything is read or written, so bad settings fail first (or, for a
method marked with :func:`checks_params`, calls its tensor-free check instead).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: per-expert element counts a method reports for one tensor, e.g. ``{"dropped": [12, 30]}``
MethodStats = Mapping[str, Sequence[float]]

#: the stats key of a method's per-expert Σ δ² (see :func:`reports_delta_norms`)
DELTA_SQ = "delta_sq"

_GLOBAL_NORMS_ATTR = "__fusion_global_norms__"
_DELTA_SQ_ATTR = "__fusion_reports_delta_sq__"
_PARAMS_CHECK_ATTR = "__fusion_params_check__"
_ELEMENTWISE_ATTR = "__fusion_elementwise__"


class ParamError(ValueError):
    """A method parameter with a value the method cannot use; ``key`` names the parameter."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


def seed_for(seed: int, key: str, expert: int) -> int:
    """The 63-bit seed of expert ``expert``'s generator for tensor ``key``.

    Derived by hashing, not by drawing from one stream, so a tensor's random draws do not
    depend on the order tensors are visited, on how the checkpoint is sharded, or on how
    many experts there are: ``int.from_bytes(sha256(f"{seed}/{key}/{expert}")[:8], "little") >> 1``.
    """
    digest = hashlib.sha256(f"{seed}/{key}/{expert}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass(frozen=True)
class TensorContext:
    """What a method knows about the tensor it merges besides the values."""

    #: the tensor's name in the checkpoint
    name: str
    #: the fuse config's seed
    seed: int = 0
    #: the name random draws are keyed by: ``name``, or the canonical name of a tied tensor
    #: (so an embedding stored twice gets the same draws and stays tied)
    rng_key: str = ""
    #: L2 norm of each expert's whole task vector (every merged tensor), when requested
    expert_norms: tuple[float, ...] | None = None
    #: set by the engine when it calls an :func:`elementwise` method on consecutive slices of one
    #: tensor: ``generator(i)`` then returns the same generator on every call, so the slices'
    #: draws continue one stream and equal the whole tensor's
    streams: dict[int, Any] | None = field(default=None, compare=False, repr=False)

    def generator(self, expert: int) -> torch.Generator:
        """A CPU generator for expert ``expert``, seeded by :func:`seed_for`."""
        import torch

        if self.streams is not None and expert in self.streams:
            return self.streams[expert]
        gen = torch.Generator(device="cpu")
        gen.manual_seed(seed_for(self.seed, self.rng_key or self.name, expert))
        if self.streams is not None:
            self.streams[expert] = gen
        return gen


def _marking(attr: str, value: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator that marks a method with ``value`` under ``attr`` (read back by the engine)."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        setattr(fn, attr, value)
        return fn

    return mark


def _declared_for(fn: Callable[..., Any], attr: str, settings: Any) -> bool:
    """Whether the predicate ``fn`` was marked with under ``attr`` holds for ``settings`` (unmarked: no)."""
    predicate = getattr(fn, attr, None)
    return bool(predicate(settings)) if predicate is not None else False


def uses_global_norms(predicate: Callable[[Any], bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method that needs the experts' global task-vector norms when ``predicate(settings)``
    is true. The engine then makes a first pass over every tensor to compute them (one extra
    read of all checkpoints) and passes them as ``ctx.expert_norms``."""
    return _marking(_GLOBAL_NORMS_ATTR, predicate)


def needs_global_norms(fn: Callable[..., Any], settings: Any) -> bool:
    """Whether ``fn`` asked for global norms with these settings."""
    return _declared_for(fn, _GLOBAL_NORMS_ATTR, settings)


def checks_params(check: Callable[..., None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method whose parameter values ``check(**params)`` validates without tensors
    (raising :class:`ParamError`). The engine then calls ``check`` instead of probing the
    method on one-element tensors, so ``fuse --dry-run`` need not import torch."""
    return _marking(_PARAMS_CHECK_ATTR, check)


def params_check(fn: Callable[..., Any]) -> Callable[..., None] | None:
    """The tensor-free parameter check a method declared with :func:`checks_params`, if any."""
    return getattr(fn, _PARAMS_CHECK_ATTR, None)


def elementwise(predicate: Callable[[Any], bool]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a method that, when ``predicate(settings)``, works element by element: called on
    consecutive flat slices of a tensor (same ``ctx``, its generators continuing from slice to
    slice) it returns exactly the slices of what it returns for the whole tensor, and its
    stats add up over slices. The engine then streams such a tensor in chunks (bounded memory,
    reading overlapped with merging) instead of holding N+1 float32 copies of it."""
    return _marking(_ELEMENTWISE_ATTR, predicate)


def is_elementwise(fn: Callable[..., Any], settings: Any) -> bool:
    """Whether ``fn`` declared itself element-wise for these settings."""
    return _declared_for(fn, _ELEMENTWISE_ATTR, settings)


def reports_delta_norms(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method whose stats include ``delta_sq`` (per-expert Σ δ² of the tensor it merged)."""
    setattr(fn, _DELTA_SQ_ATTR, True)
    return fn


def has_delta_norms(fn: Callable[..., Any]) -> bool:
    return bool(getattr(fn, _DELTA_SQ_ATTR, False))
