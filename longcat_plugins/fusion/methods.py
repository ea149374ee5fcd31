"""The built-in fusion methods: LongCat's normalise → DARE drop → sign erase, task arithmetic, TIES, DARE, breadcrumbs, SCE.

Each is a plain per-tensor function following :mod:`longcat_plugins.fusion.contract`; its
keyword-only parameters are its config. Inputs are float32 copies the method owns, so the
work is done in place (peak ≈ N+1 tensors plus a mask).

Terms used below, for expert i with weight w_i on one tensor:
``δ_i = θ_i − θ_base`` (the task vector), ``c_i`` the contribution added to the base.
The *majority direction* of an element is the sign of Σ_i c_i (``majority="mass"``, as in
TIES and SCE) or of Σ_i sign(c_i) (``"count"``, ties broken by the mass, then +). Zero
contributions never disagree.

This module must keep real (not stringified) annotations on the keyword-only parameters:
they become the config schema and are checked with :func:`typing.get_type_hints`.
"""

import math
from typing import TYPE_CHECKING, Literal, NamedTuple

from longcat_plugins.fusion.contract import (
    DELTA_SQ,
    ParamError,
    TensorContext,
    checks_params,
    elementwise,
    reports_delta_norms,
    uses_global_norms,
)

if TYPE_CHECKING:
    import torch

Majority = Literal["mass", "count"]


def _majority_sign(contribs: "list[torch.Tensor]", majority: str) -> "torch.Tensor":
    """+1.0 where the majority direction of the contributions is +, −1.0 where it is − (float32).

    A float sign, not a bool mask: comparisons and ``torch.where`` on bool tensors are the slow
    kernels of the erase step, float multiplies are vectorised. ``mass`` is never −0.0 (a sum
    started at +0.0), so ``copysign`` gives +1 exactly where ``mass >= 0``; a NaN elects −, as
    ``NaN >= 0`` is false. ``count`` (an integer per element) decides where it is non-zero, the
    mass breaks its ties: the sign of ``count + sign(mass)/2``.
    """
    import torch

    mass = torch.zeros_like(contribs[0])
    for c in contribs:
        mass.add_(c)
    sign = torch.ones_like(mass).copysign_(mass)
    if not math.isfinite(float(mass.sum())):  # rare: NaN or inf somewhere
        sign.masked_fill_(torch.isnan(mass), -1.0)
    if majority == "count":
        count = torch.zeros_like(mass)
        for c in contribs:
            count.add_(torch.sign(c))
        sign = torch.ones_like(mass).copysign_(count.add_(sign, alpha=0.5))
    return sign


def _erase_against(c: "torch.Tensor", sign: "torch.Tensor", scratch: "torch.Tensor | None" = None) -> int:
    """Zero the non-zero entries of ``c`` (in place) pointing against ``sign`` (±1 per element);
    returns how many. ``scratch``: a float32 buffer of ``c``'s size to reuse.

    An entry opposes where ``c · sign < 0`` (exact: ``sign`` is ±1). For finite ``c`` it is
    multiplied by a 0/1 float mask (``c · sign >= 0`` compared into float32, a third of a bool
    mask's cost): an erased entry becomes a zero
    whose sign is ``c``'s, which no sum that reaches an output can tell from +0.0 (an erased entry
    implies a non-zero agreeing one; see ``longcat``). An infinite entry would become NaN that
    way, so any non-finite ``c`` takes ``masked_fill_`` (+0.0, the rule as written).
    """
    import torch

    product = torch.mul(c, sign, out=scratch) if scratch is not None else c * sign
    if math.isfinite(float(c.sum())):
        keep = torch.ge(product, 0.0, out=product)  # 1.0 where c · sign >= 0 (±0 included), else 0.0
        erased = c.numel() - _count_ones(keep)
        c.mul_(keep)
        return erased
    opposite = product < 0
    c.masked_fill_(opposite, 0.0)
    return int(torch.count_nonzero(opposite))


def _erase_minority(contribs: "list[torch.Tensor]", majority: str) -> list[int]:
    """Zero every contribution whose sign opposes the majority direction; counts per expert."""
    import torch

    sign = _majority_sign(contribs, majority)
    scratch = torch.empty_like(sign)
    return [_erase_against(c, sign, scratch) for c in contribs]


def _count_ones(mask: "torch.Tensor") -> int:
    """The number of ones in a float32 0/1 mask: a float32 sum is exact while every partial sum
    fits its 24-bit mantissa (up to 2^24 elements), a float64 one beyond (``count_nonzero`` on
    floats is ten times slower)."""
    import torch

    return int(mask.sum() if mask.numel() <= 1 << 24 else mask.sum(dtype=torch.float64))


def _drop(delta: "torch.Tensor", generator: "torch.Generator", p: float) -> int:
    """Keep each element of ``delta`` (in place) where ``torch.rand(shape, generator, float32) >= p``,
    zero the others (× 0.0); returns how many were zeroed.

    The mask is the comparison r ≥ p written into the float32 draws (1.0 or 0.0), which costs
    a third of a bool compare, count and bool multiply (and of the sign(r − p) + 1 chain used
    before); the product is the same as with the bool mask.
    """
    import torch

    keep = torch.rand(delta.shape, generator=generator, dtype=torch.float32)
    torch.ge(keep, p, out=keep)
    zeroed = delta.numel() - _count_ones(keep)
    delta.mul_(keep)
    return zeroed


def _sub_and_norm(expert: "torch.Tensor", base: "torch.Tensor") -> float:
    """δ = θ_expert − θ_base in place; returns Σ δ² (reported so the engine needs no extra pass)."""
    import torch

    expert.sub_(base)
    return float(torch.linalg.vector_norm(expert)) ** 2


def _check_majority(majority: str) -> None:
    if majority not in ("mass", "count"):
        raise ParamError("majority", f"must be 'mass' or 'count', got {majority!r}")


def _normalisation_scales(
    deltas: "list[torch.Tensor]", ctx: TensorContext, normalize: str, delta_sq: list[float]
) -> list[float]:
    """s_i = mean_j(‖δ_j‖) / ‖δ_i‖ over experts with a non-zero norm (0 for a zero task vector).

    ``global``: ‖·‖ is the L2 norm of the expert's whole task vector (all merged tensors),
    so each expert is rescaled by one scalar and keeps its own layer-to-layer structure.
    ``tensor``: the L2 norm of this tensor's δ_i alone.
    """
    if normalize == "none":
        return [1.0] * len(deltas)
    if normalize == "global":
        if ctx.expert_norms is None:
            raise RuntimeError("normalize='global' needs ctx.expert_norms; the engine did not provide them")
        norms = list(ctx.expert_norms)
    else:
        norms = [sq**0.5 for sq in delta_sq]
    present = [n for n in norms if n > 0]
    if not present:
        return [0.0] * len(deltas)
    target = sum(present) / len(present)
    return [target / n if n > 0 else 0.0 for n in norms]


def _longcat_params(*, drop_rate: float, normalize: str, majority: str, **_: object) -> None:
    """longcat's value rules (the schema checks the types)."""
    if not 0.0 <= drop_rate < 1.0:
        raise ParamError("drop_rate", f"must be in [0, 1), got {drop_rate}")
    if normalize not in ("global", "tensor", "none"):
        raise ParamError("normalize", f"must be 'global', 'tensor' or 'none', got {normalize!r}")
    _check_majority(majority)


@checks_params(_longcat_params)
@reports_delta_norms
@elementwise(lambda settings: settings.normalize != "tensor")  # a tensor's own norm needs all of it
@uses_global_norms(lambda settings: settings.normalize == "global")
def longcat(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    normalize: Literal["global", "tensor", "none"] = "global",
    drop_rate: float = 0.5,
    rescale: bool = True,
    erase: bool = True,
    majority: Majority = "mass",
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """LongCat-Flash-Thinking fusion: normalised task vectors, DARE drop with rescale, SCE-style sign erase.

    1. normalise: c_i = w_i · s_i · δ_i with s_i from ``normalize`` (see ``_normalisation_scales``);
    2. drop (``drop_rate`` p > 0): each element of c_i is kept where
       ``torch.rand(shape, generator=ctx.generator(i), dtype=float32) >= p`` and, with
       ``rescale``, multiplied by 1/(1−p) so the expected contribution is unchanged;
    3. erase: elements of c_i whose sign opposes the majority direction are zeroed;
    4. merged = θ_base + Σ_i c_i.

    With ``normalize="none"``, ``drop_rate=0`` and ``erase=False`` this is weighted task arithmetic.
    """

    _longcat_params(drop_rate=drop_rate, normalize=normalize, majority=majority)
    n = len(experts)
    delta_sq = []
    for e in experts:
        delta_sq.append(_sub_and_norm(e, base))
    scales = _normalisation_scales(experts, ctx, normalize, delta_sq)
    dropped = [0.0] * n
    for i, delta in enumerate(experts):
        factor = weights[i] * scales[i]
        if drop_rate > 0:
            dropped[i] = float(_drop(delta, ctx.generator(i), drop_rate))
            if rescale:
                factor /= 1.0 - drop_rate
        if factor != 1.0:
            delta.mul_(factor)
    # an erased entry may be left as −0.0 where the rule says +0.0 (see _erase_against): the sum
    # cannot tell, as an element with an erased entry also has a non-zero entry of the majority
    # sign, and entries that agree share that sign, so its Σ c_i is non-zero
    erased = [float(x) for x in _erase_minority(experts, majority)] if erase else [0.0] * n
    merged = experts[0]
    for c in experts[1:]:
        merged.add_(c)
    merged.add_(base)
    return merged, {"dropped": dropped, "erased": erased, DELTA_SQ: delta_sq}


@checks_params(lambda **_: None)  # any float scale is meaningful
@reports_delta_norms
@elementwise(lambda settings: True)
def task_arithmetic(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """Task arithmetic: θ_base + scale · Σ_i w_i δ_i."""
    delta_sq = [_sub_and_norm(e, base) for e in experts]
    acc = experts[0].mul_(weights[0])
    for w, e in zip(weights[1:], experts[1:], strict=True):
        acc.add_(e.mul_(w))
    if scale != 1.0:
        acc.mul_(scale)
    return acc.add_(base), {DELTA_SQ: delta_sq}


#: the top 16 bits of +inf's float32 pattern: a finite non-negative float32's are below
_INF_TOP = 0x7F80
#: below this many elements ``kthvalue`` is as fast as the histograms' fixed cost (96k bins)
_RADIX_MIN = 1 << 15


class _Rank(NamedTuple):
    """What :func:`_select` finds for one rank."""

    value: "torch.Tensor"  # the element at that rank (0-dim)
    less: int  # elements smaller than it
    equal: int  # elements equal to it (itself included)
    radix: bool  # found by the radix select: every value is finite and non-negative (no −0.0)
    #: the radix select's: the flat indices of the elements equal to it, ascending (the fall-back: None)
    where: "torch.Tensor | None" = None


def _kth_smallest(values: "torch.Tensor", ranks: "list[int]") -> "list[torch.Tensor]":
    """For each 1-based rank j, the j-th smallest element of ``values`` as a 0-dim float32 tensor:
    exactly ``values.reshape(-1).kthvalue(j).values`` (see :func:`_select`)."""
    return [r.value for r in _select(values, ranks)]


def _select(
    values: "torch.Tensor", ranks: "list[int]", *, unsigned: bool = False, absolute: bool = False
) -> "list[_Rank]":
    """For each 1-based rank j: the j-th smallest element of ``values`` (exactly
    ``values.reshape(-1).kthvalue(j).values``), how many elements are smaller and how many equal
    it, found by a two-level radix select instead of quickselect where that is exact.

    The bit patterns of non-negative finite float32 values order as their int32 views do, so a
    histogram of the top 16 bits (``bincount`` of the int16 half of each value: one pass, no
    shift) names the bucket that holds rank j, and a histogram of the low 16 bits of that
    bucket's elements names the value: about a fifth of ``kthvalue``'s time. The cumulative
    histograms give the counts for free (the callers would otherwise compare the whole tensor
    again), and the bucket's indices give the positions of the elements equal to the value
    (``where``; the callers would otherwise compare and ``nonzero`` the whole tensor). Negative
    values (−0.0 included), NaN and inf take ``kthvalue`` and comparisons, whose order they need.
    ``unsigned``: the caller knows no sign bit is set (``abs()``'s output, NaN included), so the
    histogram's length alone tells whether NaN or inf is present. ``absolute``: rank ``|values|``
    without building it (the top half of each pattern with its sign bit cleared: the patterns of
    ``abs()``'s output); every result is then ``|values|``'s, the fall-back included.
    """
    import sys

    import torch

    flat = values.reshape(-1)
    if flat.dtype != torch.float32 or flat.numel() < _RADIX_MIN:
        return _select_fallback(flat, ranks, absolute)
    bits = flat.view(torch.int32)
    top = flat.view(torch.int16)[1::2] if sys.byteorder == "little" else bits >> 16
    if absolute:
        top = top & 0x7FFF  # |x|'s top half (a fresh contiguous int16, half of what abs() writes)
    elif not unsigned:
        least, most = torch.aminmax(top)
        if int(least) < 0 or int(most) >= _INF_TOP:
            return _select_fallback(flat, ranks, absolute)
    below = torch.bincount(top)
    if below.numel() > _INF_TOP:  # NaN or inf present
        return _select_fallback(flat, ranks, absolute)
    below = below.cumsum_(0)  # below[b]: elements whose top bits are <= b
    buckets: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    out = []
    for j in ranks:
        b = int(torch.searchsorted(below, j))  # the first bucket holding rank j
        before = int(below[b - 1]) if b else 0
        if b not in buckets:
            members = torch.nonzero(top == b).view(-1)  # ascending
            low_bits = bits[members] & 0xFFFF  # the low half is the same for x and |x|
            buckets[b] = (members, low_bits, torch.bincount(low_bits, minlength=1 << 16).cumsum_(0))
        members, low_bits, cum = buckets[b]
        low = int(torch.searchsorted(cum, j - before))
        less = before + (int(cum[low - 1]) if low else 0)
        value = torch.tensor((b << 16) | low, dtype=torch.int32).view(torch.float32)
        out.append(_Rank(value, less, before + int(cum[low]) - less, True, members[low_bits == low]))
    return out


def _select_fallback(flat: "torch.Tensor", ranks: "list[int]", absolute: bool) -> "list[_Rank]":
    """:func:`_select` by ``kthvalue`` (of ``|flat|`` when ``absolute``)."""
    flat = flat.abs() if absolute else flat
    return [_select_by_kthvalue(flat, j) for j in ranks]


def _select_by_kthvalue(flat: "torch.Tensor", rank: int) -> _Rank:
    """:func:`_select` for one rank by ``kthvalue`` and two comparisons (any dtype, NaN, inf, −0.0)."""
    import torch

    value = flat.kthvalue(rank).values
    return _Rank(value, int(torch.count_nonzero(flat < value)), int(torch.count_nonzero(flat == value)), False)


def _trim(delta: "torch.Tensor", density: float, generator: "torch.Generator") -> int:
    """Keep the k = ``max(1, int(density·n))`` largest |δ| (all if density ≥ 1, none if 0); returns how many were cut.

    The k-th largest magnitude is found by selection (:func:`_select`, which also counts the
    entries above it and tied with it). Entries tied exactly at it (common with bf16 deltas,
    which take few distinct values) are chosen uniformly at random with the expert's seeded
    generator: exactly k kept, reproducible, and no bias towards any region of the matrix
    (keeping the lowest indices would favour its first rows).

    The cut is one ``hardshrink`` (zero where |δ| ≤ t, in place) with the chosen tied entries put
    back, where a bool mask costs a compare, a count and a bool multiply. A cut entry becomes
    +0.0 rather than δ·0 (which keeps δ's sign): no sum that reaches an output starts from an
    entry (the disjoint merge's starts at +0.0), so the sign of a zero cannot reach it. Non-finite
    magnitudes (δ·0 is NaN for an infinite δ, and that NaN is the rule's output) and tensors below
    the radix select's size take the bool mask, as the rule is written.
    """
    import torch

    numel = delta.numel()
    if density >= 1.0 or numel == 0:
        return 0
    if density <= 0.0:
        delta.zero_()
        return numel
    k = max(1, int(density * numel))
    flat = delta.view(-1)
    (rank,) = _select(flat, [numel - k + 1], absolute=True)  # of |δ|, without building it
    threshold = rank.value
    if not rank.radix:  # NaN, inf or a small tensor: the bool mask, as the rule is written
        magnitude = flat.abs()
        keep = magnitude > threshold
        short = k - int(torch.count_nonzero(keep))
        tied = torch.nonzero(magnitude == threshold).view(-1)
        del magnitude
        if short >= tied.numel():
            keep[tied] = True
        else:
            keep[tied[torch.randperm(tied.numel(), generator=generator)[:short]]] = True
        del tied
        flat.mul_(keep)
        return numel - k
    short = k - (numel - rank.less - rank.equal)  # how many of the tied entries are kept
    if short >= rank.equal:  # every tied entry stays: cut |δ| < t, i.e. |δ| <= the float32 below t
        below = float(torch.nextafter(threshold, torch.tensor(-math.inf)))
        torch.ops.aten.hardshrink.out(flat, below, out=flat)
        return numel - k
    tied = rank.where  # the indices where |δ| == t, ascending (as nonzero gives them)
    chosen = tied[torch.randperm(tied.numel(), generator=generator)[:short]]
    del tied
    kept = flat[chosen]
    torch.ops.aten.hardshrink.out(flat, float(threshold), out=flat)
    flat[chosen] = kept
    return numel - k


def _ties_params(*, density: float, majority: str, **_: object) -> None:
    """ties' value rules (the schema checks the types)."""
    if not 0.0 <= density <= 1.0:
        raise ParamError("density", f"must be in [0, 1], got {density}")
    _check_majority(majority)


@checks_params(_ties_params)
@reports_delta_norms
def ties(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    density: float = 0.2,
    majority: Majority = "mass",
    normalize: bool = True,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """TIES-merging: trim each δ_i to its top-``density`` magnitudes, elect signs, disjoint (weighted) mean.

    c_i = w_i · trim(δ_i) (see ``_trim``: exactly k entries, ties at the threshold drawn with
    ``ctx.generator(i)``); m = majority direction of the c_i; agreeing entries are those with
    sign(c_i) = m; merged = θ_base + scale · Σ_agree c_i / Σ_agree w_i (``normalize``; a zero
    divisor counts as 1) or θ_base + scale · Σ_agree c_i (not ``normalize``).
    """

    _ties_params(density=density, majority=majority)
    trimmed, delta_sq = [], []
    for i, e in enumerate(experts):
        delta_sq.append(_sub_and_norm(e, base))
        trimmed.append(float(_trim(e, density, ctx.generator(i))))
    merged, erased = _disjoint_merge(experts, weights, majority, normalize, before=weights)  # c_i = w_i · trim(δ_i)
    if scale != 1.0:
        merged.mul_(scale)
    return merged.add_(base), {"trimmed": trimmed, "erased": erased, DELTA_SQ: delta_sq}


def _dare_params(*, density: float, majority: str = "mass", **_: object) -> None:
    """dare_linear's and dare_ties' value rules."""
    if not 0.0 < density <= 1.0:
        raise ParamError("density", f"must be in (0, 1], got {density}")
    _check_majority(majority)


def _dare_drop(deltas: "list[torch.Tensor]", ctx: TensorContext, density: float, rescale: bool) -> list[float]:
    """Keep each element of δ_i where ``torch.rand(..., generator=ctx.generator(i)) >= 1 − density``
    (the documented keep-mask with p = 1 − density), times 1/density with ``rescale``; counts dropped."""

    dropped = []
    for i, delta in enumerate(deltas):
        if density >= 1.0:
            dropped.append(0.0)
            continue
        dropped.append(float(_drop(delta, ctx.generator(i), 1.0 - density)))
        if rescale:
            delta.div_(density)
    return dropped


@checks_params(_dare_params)
@reports_delta_norms
@elementwise(lambda settings: True)
def dare_linear(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    density: float = 0.5,
    rescale: bool = True,
    normalize: bool = False,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """DARE with a weighted sum: drop each δ_i element with probability 1 − density, rescale the rest, add.

    c_i = w_i · m_i ⊙ δ_i / density (``rescale``; m_i the seeded keep-mask, P(keep) = density);
    merged = θ_base + ``scale`` · Σ_i c_i, divided by Σ_i w_i when ``normalize`` (a zero sum counts as 1).
    """
    _dare_params(density=density)
    delta_sq = [_sub_and_norm(e, base) for e in experts]
    dropped = _dare_drop(experts, ctx, density, rescale)
    for w, e in zip(weights, experts, strict=True):
        e.mul_(w)
    return _sum_scaled(experts, weights, normalize, scale).add_(base), {"dropped": dropped, DELTA_SQ: delta_sq}


def _sum_scaled(weighted: "list[torch.Tensor]", weights: list[float], normalize: bool, scale: float) -> "torch.Tensor":
    """Σ_i of the already weighted contributions (summed in place into the first), times ``scale``,
    divided by Σ_i w_i when ``normalize`` (a zero sum counts as 1)."""
    acc = weighted[0]
    for c in weighted[1:]:
        acc.add_(c)
    total = sum(weights) if normalize else 1.0
    factor = scale / (total if total != 0 else 1.0)
    if factor != 1.0:
        acc.mul_(factor)
    return acc


#: elements per block of :func:`_disjoint_merge`: its N+4 float32 blocks stay in the caches, where
#: a pass over a whole 100 MB tensor runs at memory speed (several times slower per element)
_BLOCK = 1 << 16


def _disjoint_merge(
    contribs: "list[torch.Tensor]",
    weights: list[float],
    majority: str,
    normalize: bool,
    *,
    before: "list[float] | None" = None,
    after: "list[float] | None" = None,
) -> "tuple[torch.Tensor, list[float]]":
    """Σ of the contributions that agree with the majority direction, divided elementwise by the
    weights of the agreeing ones when ``normalize`` (a zero divisor counts as 1); counts erased.

    ``before``: factors each contribution is multiplied by first (c_i ← c_i · f_i, as the
    caller would); ``after``: factors applied after the majority direction is elected on the
    c_i (sce's η). Block by block (:data:`_BLOCK` elements, every step elementwise, so the
    output is the whole tensor's), the contributions overwritten.

    An entry c opposes the majority sign s where c · s < 0 (exact: s is ±1); the agreeing part
    is s · max(c · s, 0): c itself where it agrees (NaN too, as NaN < 0 is false), a zero where
    it opposes, ±inf handled alike. The sum starts at +0.0, so the sign of an erased entry's
    zero never reaches it, and s · max(c · s, 0) is added with ``addcmul`` (its product is exact,
    so fused or not it rounds once, as an add does). A zero entry never counts in the divisor.
    """
    import torch

    flat = [c.reshape(-1) for c in contribs]
    n = flat[0].numel()
    merged = torch.empty(n, dtype=flat[0].dtype)
    erased = [0] * len(flat)
    width = min(n, _BLOCK)
    product, mask = torch.empty(width, dtype=merged.dtype), torch.empty(width, dtype=merged.dtype)
    divisor = torch.empty(width, dtype=merged.dtype) if normalize else None
    for a in range(0, n, _BLOCK):
        b = min(n, a + _BLOCK)
        blocks = [f[a:b] for f in flat]
        if before is not None:
            for c, factor in zip(blocks, before, strict=True):
                c.mul_(factor)
        sign = _majority_sign(blocks, majority)
        if after is not None:
            for c, factor in zip(blocks, after, strict=True):
                c.mul_(factor)
        out, p, m = merged[a:b], product[: b - a], mask[: b - a]
        out.zero_()
        d = None if divisor is None else divisor[: b - a].zero_()
        for i, (w, c) in enumerate(zip(weights, blocks, strict=True)):
            torch.mul(c, sign, out=p)
            erased[i] += int(torch.lt(p, 0.0, out=m).sum())
            p.clamp_(min=0.0)
            out.addcmul_(p, sign)
            if d is not None:
                d.add_(torch.ne(p, 0.0, out=m), alpha=w)
        if d is not None:
            d.add_(torch.eq(d, 0.0, out=m))  # a zero divisor counts as 1 (a non-zero one gains + 0.0)
            out.div_(d)
    return merged.view(contribs[0].shape), [float(x) for x in erased]


@checks_params(_dare_params)
@reports_delta_norms
@elementwise(lambda settings: True)
def dare_ties(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    density: float = 0.5,
    rescale: bool = True,
    majority: Majority = "mass",
    normalize: bool = False,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """DARE then TIES' sign election: drop and rescale each δ_i, weight, keep the entries that agree with the majority.

    c_i = w_i · m_i ⊙ δ_i / density (as ``dare_linear``); m = majority direction of the c_i;
    merged = θ_base + ``scale`` · Σ_agree c_i, divided by Σ_agree w_i when ``normalize``.
    """
    _dare_params(density=density, majority=majority)
    delta_sq = [_sub_and_norm(e, base) for e in experts]
    dropped = _dare_drop(experts, ctx, density, rescale)
    merged, erased = _disjoint_merge(experts, weights, majority, normalize, before=weights)
    if scale != 1.0:
        merged.mul_(scale)
    return merged.add_(base), {"dropped": dropped, "erased": erased, DELTA_SQ: delta_sq}


#: elements per slice of :func:`_population_var`'s float64 work (512 KiB per float64 buffer: its
#: four buffers stay in the caches)
_VAR_CHUNK = 1 << 16


def _population_var(contribs: "list[torch.Tensor]") -> "torch.Tensor":
    """Σ_i (c_i − mean)² / N per element (flat, float32): bit for bit what
    ``torch.var(torch.stack(contribs), dim=0, unbiased=False)`` gives on CPU, at a fraction of its
    time and a third of its memory.

    That reduction (over a short, strided dim) runs Welford's update in float64 one element at
    a time, ~100 ns per element; the same update written as float64 tensor ops over slices
    (mean += δ/k; m2 += δ·(x − mean); var = m2 / N, rounded to float32) does the same IEEE
    operations in the same order (a test compares them on many inputs). The float32 inputs enter
    the float64 ops directly (a mixed-dtype op widens them exactly, as ``.double()`` does), into
    four reused float64 buffers: no copies, no fresh memory per slice."""
    import torch

    flat = [c.reshape(-1) for c in contribs]
    numel = flat[0].numel()
    out = torch.empty(numel, dtype=torch.float32)
    width = min(numel, _VAR_CHUNK)
    mean_buf, m2_buf, delta_buf, tmp_buf = (torch.empty(width, dtype=torch.float64) for _ in range(4))
    for a in range(0, numel, _VAR_CHUNK):
        b = min(a + _VAR_CHUNK, numel)
        mean, m2, delta, tmp = mean_buf[: b - a], m2_buf[: b - a], delta_buf[: b - a], tmp_buf[: b - a]
        x = flat[0][a:b]
        torch.add(x, 0.0, out=mean)  # Welford's first update from mean = m2 = 0: mean = 0 + x0 (−0.0 becomes +0.0;
        torch.sub(x, mean, out=tmp).mul_(x)  # x0 + 0.0 is exact in float32 as in float64), m2 = 0 + x0·(x0 − mean)
        m2.zero_().add_(tmp)  # (NaN for an inf)
        for k, c in enumerate(flat[1:], start=2):
            x = c[a:b]
            torch.sub(x, mean, out=delta)
            mean.add_(torch.div(delta, k, out=tmp))
            m2.add_(delta.mul_(torch.sub(x, mean, out=tmp)))
        out[a:b] = m2.div_(len(flat))
    return out


#: Wellons' "lowbias32" odd multipliers: with the xor-shifts between them, a bijection of 32-bit integers
_MIX = (0x7FEB352D, 0x846CA68B)
_LOW32 = 0xFFFFFFFF


def _mul32(x: "torch.Tensor", c: int) -> "torch.Tensor":
    """(x · c) mod 2^32 for int64 ``x`` in [0, 2^32), exactly: multiplied by 16-bit halves so no
    product leaves int64's range (signed overflow would be undefined in the kernels)."""
    low = (x & 0xFFFF) * c
    high = ((x >> 16) * (c & 0xFFFF)) << 16
    return (low + high) & _LOW32


def _mix32(x: "torch.Tensor") -> "torch.Tensor":
    """lowbias32: a well-mixed bijection of [0, 2^32) (int64 in, int64 out)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _MIX[0])
    x = x ^ (x >> 15)
    x = _mul32(x, _MIX[1])
    return x ^ (x >> 16)


def _tie_keys(indices: "torch.Tensor", salt: int) -> "torch.Tensor":
    """The seeded sort keys of flat ``indices`` (int64) that order equal values: a keyed
    bijection of each index's low 32 bits, so distinct indices of a tensor under 2^32 elements
    get distinct keys (beyond it, equal keys fall back to index order)."""
    import torch

    low = indices.to(torch.int64) & _LOW32
    return _mix32(_mix32(low ^ (salt & _LOW32)) ^ ((salt >> 32) & _LOW32))


def _tie_salt(generator: "torch.Generator") -> int:
    """The 62-bit key of a tensor's tie order: one draw from its seeded generator."""
    import torch

    return int(torch.randint(0, 1 << 62, (1,), generator=generator, dtype=torch.int64))


def _ranked_ascending(values: "torch.Tensor", generator: "torch.Generator") -> "torch.Tensor":
    """Indices of ``values`` (flat) in ascending order, equal values ordered by their seeded keys
    (:func:`_tie_keys` under the generator's :func:`_tie_salt`): the definition :func:`_rank_band`
    computes without sorting."""
    import torch

    flat = values.reshape(-1)
    by_key = torch.sort(_tie_keys(torch.arange(flat.numel()), _tie_salt(generator)), stable=True).indices
    return by_key[torch.sort(flat[by_key], stable=True).indices]


def _rank_band(
    values: "torch.Tensor", generator: "torch.Generator", low: int, high: int, *, unsigned: bool = False
) -> "torch.Tensor":
    """Mask of the elements of ``values`` (flat) whose ascending rank is in [low, high), equal
    values in a seeded random order: exactly ``_ranked_ascending(values, generator)[low:high]``,
    found by selection (:func:`_select`, O(n), which counts the elements below and at each edge)
    instead of a full sort.

    Only the elements tied with a band edge whose block of ranks the edge cuts are ordered, by
    their keys (:func:`_tie_keys`, computed for them alone: a keyed hash of the position, so the
    order needs no permutation of the whole tensor, which took most of breadcrumbs' time). The
    salt is drawn only then: nothing else reads the generator, so skipping it changes no output.
    ``unsigned``: as in :func:`_select`."""
    import torch

    n = values.numel()
    low, high = max(0, low), min(n, high)
    if high <= low:
        return torch.zeros(n, dtype=torch.bool)
    flat = values.reshape(-1)
    edges = _select(flat, [low + 1, high], unsigned=unsigned)  # with how many elements lie below and at each edge
    lo, hi = edges[0].value, edges[1].value
    keep = flat > lo
    keep &= flat < hi
    salt = None
    for edge in edges if bool(lo != hi) else edges[:1]:
        first, count = edge.less, edge.equal
        start, stop = max(low, first), min(high, first + count)  # the ranks of the block inside the band
        if stop <= start:
            continue
        tied = edge.where if edge.where is not None else torch.nonzero(flat == edge.value).view(-1)  # ascending
        if (start, stop) != (first, first + count):  # the band cuts the block: rank it by key (index on a tie)
            salt = _tie_salt(generator) if salt is None else salt
            tied = tied[torch.sort(_tie_keys(tied, salt), stable=True).indices[start - first : stop - first]]
        keep[tied] = True
    return keep


def _breadcrumbs_params(*, density: float, gamma: float, **_: object) -> None:
    """breadcrumbs' value rules."""
    if not 0.0 < density <= 1.0:
        raise ParamError("density", f"must be in (0, 1], got {density}")
    if not 0.0 <= gamma < 1.0:
        raise ParamError("gamma", f"must be in [0, 1), got {gamma}")


@checks_params(_breadcrumbs_params)
@reports_delta_norms
def breadcrumbs(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    density: float = 0.9,
    gamma: float = 0.01,
    normalize: bool = False,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """Model Breadcrumbs: drop each δ_i's largest outliers and its smallest entries, keep the band between, add.

    Per expert, with n elements, k = int(density·n) and t = int(gamma·n): rank |δ_i| ascending
    (equal magnitudes in a seeded random order, ``ctx.generator(i)``) and keep the k entries at
    ranks [b, b + k) with b = max(0, n − k − t): the t largest go (fewer when k + t > n) and the
    smallest fill the rest. merged = θ_base + ``scale`` · Σ_i w_i · kept_i, divided by Σ_i w_i
    when ``normalize`` (a zero sum counts as 1).
    """

    _breadcrumbs_params(density=density, gamma=gamma)
    delta_sq, cut = [], []
    for i, (w, e) in enumerate(zip(weights, experts, strict=True)):
        delta_sq.append(_sub_and_norm(e, base))
        n = e.numel()
        k, t = int(density * n), int(gamma * n)
        if density < 1.0 or t > 0:
            low = max(0, n - k - t)
            keep = _rank_band(e.view(-1).abs(), ctx.generator(i), low, low + k, unsigned=True)
            e.view(-1).mul_(keep)
            cut.append(float(n - min(k, n)))
        else:
            cut.append(0.0)
        e.mul_(w)
    return _sum_scaled(experts, weights, normalize, scale).add_(base), {"trimmed": cut, DELTA_SQ: delta_sq}


def _sce_params(*, select_topk: float, majority: str, **_: object) -> None:
    """sce's value rules."""
    if not 0.0 < select_topk <= 1.0:
        raise ParamError("select_topk", f"must be in (0, 1], got {select_topk}")
    _check_majority(majority)


@checks_params(_sce_params)
@reports_delta_norms
def sce(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    select_topk: float = 1.0,
    majority: Majority = "mass",
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """SCE (FuseChat): select the elements where the experts vary most, weight experts by their squared deltas, erase minority signs.

    On c_i = w_i · δ_i: **select**: keep the k = int(select_topk · #nonzero-variance) elements with
    the largest variance across experts (population variance; equal variances at the cut in a
    seeded random order, ``ctx.generator(N)``), zero the rest in every c_i (``select_topk: 1``
    keeps all); **calculate**: η_i = Σ c_i² / Σ_j Σ c_j² over the tensor (1/N each when all are
    zero); **erase**: entries of c_i against the majority direction are zeroed;
    merged = θ_base + Σ_i η_i c_i / Σ_i η_i [c_i ≠ 0] (a zero divisor counts as 1).
    """
    import torch

    _sce_params(select_topk=select_topk, majority=majority)
    n = len(experts)
    delta_sq = []
    for w, e in zip(weights, experts, strict=True):
        delta_sq.append(_sub_and_norm(e, base))
        e.mul_(w)
    unselected = [0.0] * n
    if select_topk < 1.0 and n > 1:
        var = _population_var(experts)
        k = int(int(torch.count_nonzero(var)) * select_topk)
        keep = _rank_band(var, ctx.generator(n), var.numel() - k, var.numel())
        del var
        for i, e in enumerate(experts):
            unselected[i] = float(e.numel() - k)
            e.view(-1).mul_(keep)
    energy = [float(torch.linalg.vector_norm(e)) ** 2 for e in experts]
    total = sum(energy)
    eta = [x / total for x in energy] if total > 0 else [1.0 / n] * n
    # the majority direction is elected on the c_i, before the η weighting
    merged, erased = _disjoint_merge(experts, eta, majority, normalize=True, after=eta)
    return merged.add_(base), {"unselected": unselected, "erased": erased, DELTA_SQ: delta_sq}
