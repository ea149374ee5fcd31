"""The built-in fusion methods: LongCat's normalise → DARE drop → sign erase, task arithmetic, TIES.

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

from typing import TYPE_CHECKING, Literal

from longcat_plugins.fusion.contract import ParamError, TensorContext, uses_global_norms

if TYPE_CHECKING:
    import torch

Majority = Literal["mass", "count"]


def _majority_sign(contribs: "list[torch.Tensor]", majority: str) -> "torch.Tensor":
    """±1 per element: the direction most of the contribution points to."""
    import torch

    mass = torch.zeros_like(contribs[0])
    for c in contribs:
        mass.add_(c)
    if majority == "mass":
        return torch.where(mass >= 0, 1.0, -1.0)
    count = torch.zeros_like(contribs[0])
    for c in contribs:
        count.add_(torch.sign(c))
    tie_break = torch.where(mass >= 0, 1.0, -1.0)
    return torch.where(count > 0, 1.0, torch.where(count < 0, -1.0, tie_break))


def _erase_minority(contribs: "list[torch.Tensor]", majority: str) -> list[int]:
    """Zero every contribution whose sign opposes the majority direction; counts per expert."""
    sign = _majority_sign(contribs, majority)
    erased = []
    for c in contribs:
        opposite = (c * sign) < 0
        erased.append(int(opposite.sum()))
        c.masked_fill_(opposite, 0.0)
    return erased


def _check_majority(majority: str) -> None:
    if majority not in ("mass", "count"):
        raise ParamError("majority", f"must be 'mass' or 'count', got {majority!r}")


def _normalisation_scales(deltas: "list[torch.Tensor]", ctx: TensorContext, normalize: str) -> list[float]:
    """s_i = mean_j(‖δ_j‖) / ‖δ_i‖ over experts with a non-zero norm (0 for a zero task vector).

    ``global``: ‖·‖ is the L2 norm of the expert's whole task vector (all merged tensors),
    so each expert is rescaled by one scalar and keeps its own layer-to-layer structure.
    ``tensor``: the L2 norm of this tensor's δ_i alone.
    """
    import torch

    if normalize == "none":
        return [1.0] * len(deltas)
    if normalize == "global":
        if ctx.expert_norms is None:
            raise RuntimeError("normalize='global' needs ctx.expert_norms; the engine did not provide them")
        norms = list(ctx.expert_norms)
    else:
        norms = [float(torch.linalg.vector_norm(d)) for d in deltas]
    present = [n for n in norms if n > 0]
    if not present:
        return [0.0] * len(deltas)
    target = sum(present) / len(present)
    return [target / n if n > 0 else 0.0 for n in norms]


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
    import torch

    if not 0.0 <= drop_rate < 1.0:
        raise ParamError("drop_rate", f"must be in [0, 1), got {drop_rate}")
    if normalize not in ("global", "tensor", "none"):
        raise ParamError("normalize", f"must be 'global', 'tensor' or 'none', got {normalize!r}")
    _check_majority(majority)
    n = len(experts)
    for e in experts:
        e.sub_(base)
    scales = _normalisation_scales(experts, ctx, normalize)
    dropped = [0.0] * n
    for i, delta in enumerate(experts):
        factor = weights[i] * scales[i]
        if drop_rate > 0:
            keep = torch.rand(delta.shape, generator=ctx.generator(i), dtype=torch.float32) >= drop_rate
            dropped[i] = float(delta.numel() - int(keep.sum()))
            delta.mul_(keep)
            del keep
            if rescale:
                factor /= 1.0 - drop_rate
        if factor != 1.0:
            delta.mul_(factor)
    erased = [float(x) for x in _erase_minority(experts, majority)] if erase else [0.0] * n
    merged = experts[0]
    for c in experts[1:]:
        merged.add_(c)
    merged.add_(base)
    return merged, {"dropped": dropped, "erased": erased}


def task_arithmetic(
    base: "torch.Tensor",
    experts: "list[torch.Tensor]",
    weights: list[float],
    ctx: TensorContext,
    *,
    scale: float = 1.0,
) -> "tuple[torch.Tensor, dict[str, list[float]]]":
    """Task arithmetic: θ_base + scale · Σ_i w_i δ_i."""
    acc = experts[0].sub_(base).mul_(weights[0])
    for w, e in zip(weights[1:], experts[1:], strict=True):
        acc.add_(e.sub_(base).mul_(w))
    if scale != 1.0:
        acc.mul_(scale)
    return acc.add_(base), {}


def _trim(delta: "torch.Tensor", density: float) -> int:
    """Keep the ``max(1, int(density·n))`` largest |δ| (all if density ≥ 1, none if 0); returns how many were cut."""
    import torch

    numel = delta.numel()
    if density >= 1.0 or numel == 0:
        return 0
    if density <= 0.0:
        delta.zero_()
        return numel
    k = max(1, int(density * numel))
    flat = delta.view(-1)
    keep = torch.topk(flat.abs(), k, sorted=False).indices
    kept = flat[keep]
    flat.zero_()
    flat[keep] = kept
    return numel - k


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

    c_i = w_i · trim(δ_i); m = majority direction of the c_i; agreeing entries are those with
    sign(c_i) = m; merged = θ_base + scale · Σ_agree c_i / Σ_agree w_i (``normalize``; a zero
    divisor counts as 1) or θ_base + scale · Σ_agree c_i (not ``normalize``).
    """
    import torch

    if not 0.0 <= density <= 1.0:
        raise ParamError("density", f"must be in [0, 1], got {density}")
    _check_majority(majority)
    trimmed = []
    for w, e in zip(weights, experts, strict=True):
        e.sub_(base)
        trimmed.append(float(_trim(e, density)))
        e.mul_(w)
    sign = _majority_sign(experts, majority)
    merged = torch.zeros_like(base)
    divisor = torch.zeros_like(base) if normalize else None
    erased = []
    for w, c in zip(weights, experts, strict=True):
        direction = c * sign
        agree = direction > 0
        erased.append(float(int((direction < 0).sum())))
        del direction
        merged.add_(c * agree)
        if divisor is not None:
            divisor.add_(agree.to(divisor.dtype), alpha=w)
    if divisor is not None:
        divisor[divisor == 0] = 1.0
        merged.div_(divisor)
    if scale != 1.0:
        merged.mul_(scale)
    return merged.add_(base), {"trimmed": trimmed, "erased": erased}
