"""Numerics of the built-in fusion methods against independent float64 references.

The references below are written from the method descriptions (LongCat-Flash-Thinking's
fusion: normalise task vectors, DARE drop with rescale, SCE-style sign erase; TIES: trim,
elect, disjoint mean) and from the documented random-draw contract (docs/fusion.md: expert
i's keep-mask for tensor ``name`` is ``torch.rand(shape, dtype=float32) >= p`` from a
generator seeded with ``sha256(f"{seed}/{name}/{i}")[:8]`` little-endian, shifted right by
one). They call nothing from ``longcat_plugins.fusion`` except through the engine under test.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from test_fusion_support import random_family, read_checkpoint, write_family

from longcat_plugins.fusion import fuse

WEIGHTS = [1.0, 0.5, 0.8]
SEED = 7


def keep_mask(seed: int, name: str, expert: int, shape: tuple[int, ...], p: float) -> torch.Tensor:
    digest = hashlib.sha256(f"{seed}/{name}/{expert}".encode()).digest()
    gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.rand(shape, generator=gen, dtype=torch.float32) >= p


def majority_sign(contribs: list[torch.Tensor], majority: str) -> torch.Tensor:
    mass = sum(contribs)
    mass_sign = torch.where(mass >= 0, 1.0, -1.0).double()
    if majority == "mass":
        return mass_sign
    count = sum(torch.sign(c) for c in contribs)
    return torch.where(count > 0, 1.0, torch.where(count < 0, -1.0, mass_sign)).double()


def ref_elect_and_merge(contribs: list[torch.Tensor], weights: list[float], normalize: bool) -> torch.Tensor:
    """TIES' elect + disjoint merge (float64): the sign of the summed contributions is elected, the
    contributions that agree with it are summed and, with ``normalize``, divided by the weights of
    the agreeing experts (a zero divisor counts as 1). Both TIES and dare_ties end with it."""
    elected = majority_sign(contribs, "mass")
    agree = [(torch.sign(c) == elected).double() for c in contribs]
    num = sum(c * a for c, a in zip(contribs, agree, strict=True))
    if not normalize:
        return num
    den = sum(w * a for w, a in zip(weights, agree, strict=True))
    return num / torch.where(den == 0, 1.0, den)


def ref_longcat(
    base: dict[str, torch.Tensor],
    experts: list[dict[str, torch.Tensor]],
    weights: list[float],
    *,
    seed: int,
    normalize: str,
    drop_rate: float,
    rescale: bool = True,
    erase: bool,
    majority: str = "mass",
) -> dict[str, torch.Tensor]:
    """θ_base + Σ_i c_i with c_i = w_i · s_i · δ_i, dropped and rescaled, minority signs erased."""
    deltas = [{n: e[n].double() - base[n].double() for n in base} for e in experts]
    if normalize == "global":  # one scalar per expert: the whole task vector's L2 norm
        norms = [sum(float((d[n] ** 2).sum()) for n in d) ** 0.5 for d in deltas]
    out = {}
    for name, b in base.items():
        d = [delta[name] for delta in deltas]
        if normalize == "tensor":
            norms = [float(x.norm()) for x in d]
        if normalize == "none":
            s = [1.0] * len(d)
        else:
            nonzero = [x for x in norms if x > 0]
            target = sum(nonzero) / len(nonzero)
            s = [target / x if x > 0 else 0.0 for x in norms]
        c = [w * si * di for w, si, di in zip(weights, s, d, strict=True)]
        if drop_rate > 0:
            for i in range(len(c)):
                keep = keep_mask(seed, name, i, tuple(b.shape), drop_rate).double()
                c[i] = c[i] * keep / ((1 - drop_rate) if rescale else 1.0)
        if erase:
            m = majority_sign(c, majority)
            c = [torch.where(ci * m < 0, 0.0, ci) for ci in c]
        out[name] = b.double() + sum(c)
    return out


def ref_ties(
    base: dict[str, torch.Tensor],
    experts: list[dict[str, torch.Tensor]],
    weights: list[float],
    *,
    density: float,
    normalize: bool = True,
    scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """TIES (Yadav et al. 2023): keep the top-k |δ_i| (k = max(1, ⌊density·n⌋)), weight, elect the
    sign of the weighted sum, average the agreeing entries weighted by w (a zero divisor counts as 1)."""
    out = {}
    for name, b in base.items():
        trimmed = []
        for e in experts:
            d = (e[name].double() - b.double()).flatten()
            k = max(1, int(density * d.numel())) if density < 1 else d.numel()
            kept = torch.zeros_like(d)
            top = torch.argsort(d.abs(), descending=True)[:k]
            kept[top] = d[top]
            trimmed.append(kept.reshape(b.shape))
        c = [w * t for w, t in zip(weights, trimmed, strict=True)]
        out[name] = b.double() + scale * ref_elect_and_merge(c, weights, normalize)
    return out


def ref_dare(
    base: dict[str, torch.Tensor],
    experts: list[dict[str, torch.Tensor]],
    weights: list[float],
    *,
    seed: int,
    density: float,
    ties: bool,
    rescale: bool = True,
    normalize: bool = False,
    scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """DARE (Yu et al. 2024): keep each δ_i element with probability ``density`` (the documented
    keep-mask with p = 1 − density), divide the kept ones by ``density``, weight; then a plain sum
    (dare_linear) or TIES' elect + disjoint sum (dare_ties), optionally divided by the weights."""
    out = {}
    for name, b in base.items():
        c = []
        for i, (w, e) in enumerate(zip(weights, experts, strict=True)):
            d = e[name].double() - b.double()
            if density < 1:
                d = d * keep_mask(seed, name, i, tuple(b.shape), 1.0 - density).double()
                d = d / density if rescale else d
            c.append(w * d)
        if ties:
            merged = ref_elect_and_merge(c, weights, normalize)
        else:
            merged = sum(c) / (sum(weights) if normalize else 1.0)
        out[name] = b.double() + scale * merged
    return out


def ref_breadcrumbs(
    base: dict[str, torch.Tensor],
    experts: list[dict[str, torch.Tensor]],
    weights: list[float],
    *,
    density: float,
    gamma: float,
    normalize: bool = False,
) -> dict[str, torch.Tensor]:
    """Model Breadcrumbs (Davari & Belilovsky 2023): per task vector, mask out the largest
    ``gamma`` fraction of magnitudes (outliers) and the smallest ones, keeping ``density``·n
    entries; θ_base + Σ w_i · masked δ_i."""
    out = {}
    for name, b in base.items():
        total = torch.zeros_like(b, dtype=torch.float64)
        for w, e in zip(weights, experts, strict=True):
            d = (e[name].double() - b.double()).flatten()
            n = d.numel()
            k, t = int(density * n), int(gamma * n)
            low = max(0, n - k - t)
            order = torch.argsort(d.abs())  # ascending
            kept = torch.zeros_like(d)
            kept[order[low : low + k]] = d[order[low : low + k]]
            total += w * kept.reshape(b.shape)
        out[name] = b.double() + total / (sum(weights) if normalize else 1.0)
    return out


def ref_sce(
    base: dict[str, torch.Tensor], experts: list[dict[str, torch.Tensor]], weights: list[float], *, select_topk: float
) -> dict[str, torch.Tensor]:
    """SCE (Wan et al. 2024, FuseChat): Select the top-k elements by variance across the (weighted)
    task vectors, Calculate per-expert weights η_i ∝ Σ c_i² over the tensor, Erase entries against
    the sign of Σ c_i; θ_base + Σ η_i c_i / Σ η_i over the agreeing entries."""
    out = {}
    for name, b in base.items():
        c = [w * (e[name].double() - b.double()) for w, e in zip(weights, experts, strict=True)]
        if select_topk < 1:
            var = torch.stack(c).var(dim=0, unbiased=False).flatten()
            k = int(int((var != 0).sum()) * select_topk)
            keep = torch.zeros_like(var)
            keep[torch.argsort(var, descending=True)[:k]] = 1.0
            c = [ci * keep.reshape(b.shape) for ci in c]
        energy = [float((ci**2).sum()) for ci in c]
        eta = [x / sum(energy) for x in energy]
        elected = majority_sign(c, "mass")
        agree = [(torch.sign(ci) == elected).double() for ci in c]
        num = sum(h * ci * a for h, ci, a in zip(eta, c, agree, strict=True))
        den = sum(h * a for h, a in zip(eta, agree, strict=True))
        out[name] = b.double() + num / torch.where(den == 0, 1.0, den)
    return out


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, list[dict], Path, list[Path]]:
    base, experts = random_family(n_experts=3, seed=1)
    root = tmp_path_factory.mktemp("family")
    base_dir, expert_dirs = write_family(root, base, experts, shards=3, expert_shards=2)
    return base, experts, base_dir, expert_dirs


def run(family: tuple, tmp_path: Path, method: str, params: dict, seed: int = SEED) -> dict[str, torch.Tensor]:
    _, _, base_dir, expert_dirs = family
    out = tmp_path / f"out-{method}"
    fuse(base_dir, list(zip(expert_dirs, WEIGHTS, strict=True)), out, method=method, params=params, seed=seed)
    return read_checkpoint(out)


def assert_matches(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name in want:
        # float32 arithmetic against a float64 reference on O(1) values: a few float32 ulps
        torch.testing.assert_close(got[name].double(), want[name], rtol=1e-5, atol=1e-5, msg=name)


#: each method's float64 reference, with the arguments the engine's run fixes (the seed, the variant)
REFERENCES: dict[str, Callable[..., dict[str, torch.Tensor]]] = {
    "longcat": functools.partial(ref_longcat, seed=SEED),
    "ties": ref_ties,
    "dare_linear": functools.partial(ref_dare, seed=SEED, ties=False),
    "dare_ties": functools.partial(ref_dare, seed=SEED, ties=True),
    "breadcrumbs": ref_breadcrumbs,
    "sce": ref_sce,
}
#: (method, params): every step combination of ``longcat``, then each method's settings
REFERENCE_CASES: list[tuple[str, dict[str, Any]]] = [
    *(
        ("longcat", {"normalize": n, "drop_rate": p, "erase": e})
        for n, p, e in itertools.product(["none", "tensor", "global"], [0.0, 0.4], [False, True])
    ),
    *(
        ("longcat", {"normalize": "global", "drop_rate": 0.3, "rescale": False, "erase": True, "majority": m})
        for m in ("mass", "count")
    ),
    *(("ties", {"density": d, "normalize": n}) for d, n in [(0.3, True), (1.0, True), (0.5, False)]),
    ("dare_linear", {"density": 0.6}),
    ("dare_linear", {"density": 0.3, "rescale": False, "normalize": True, "scale": 0.5}),
    ("dare_linear", {"density": 1.0}),
    ("dare_ties", {"density": 0.6}),
    ("dare_ties", {"density": 0.4, "normalize": True, "scale": 2.0}),
    *(
        ("breadcrumbs", {"density": d, "gamma": g, "normalize": n})
        for d, g, n in [(0.8, 0.05, False), (0.5, 0.0, True), (0.97, 0.1, False), (1.0, 0.0, False)]
    ),
    *(("sce", {"select_topk": k}) for k in (1.0, 0.5, 0.1)),
]


@pytest.mark.parametrize(("method", "params"), REFERENCE_CASES, ids=[f"{m}-{p}" for m, p in REFERENCE_CASES])
def test_method_matches_its_float64_reference(family: tuple, tmp_path: Path, method: str, params: dict) -> None:
    base, experts, _, _ = family
    got = run(family, tmp_path, method, params)
    assert_matches(got, REFERENCES[method](base, experts, WEIGHTS, **params))


def test_no_drop_no_erase_is_weighted_task_arithmetic(family: tuple, tmp_path: Path) -> None:
    base, experts, _, _ = family
    longcat = run(family, tmp_path, "longcat", {"normalize": "none", "drop_rate": 0.0, "erase": False})
    arithmetic = run(family, tmp_path, "task_arithmetic", {})
    want = {
        n: b.double() + sum(w * (e[n].double() - b.double()) for w, e in zip(WEIGHTS, experts, strict=True))
        for n, b in base.items()
    }
    assert_matches(arithmetic, want)
    for name in base:  # same arithmetic in the same order: bit-identical, not just close
        assert torch.equal(longcat[name], arithmetic[name]), name


def test_task_arithmetic_scale(family: tuple, tmp_path: Path) -> None:
    base, experts, _, _ = family
    got = run(family, tmp_path, "task_arithmetic", {"scale": 0.3})
    want = {
        n: b.double() + 0.3 * sum(w * (e[n].double() - b.double()) for w, e in zip(WEIGHTS, experts, strict=True))
        for n, b in base.items()
    }
    assert_matches(got, want)


def test_dare_rescale_keeps_the_expected_delta() -> None:
    """E[mask·δ/(1−p)] = δ. Over K seeds on a fixed tensor the mean merged delta of each element
    is δ_j·(1/K)Σ keep/(1−p), whose standard deviation is |δ_j|·sqrt(p/((1−p)K)). Every element
    must lie within 5 standard deviations (a false alarm per element has probability 6e-7,
    so about 1e-4 for the 200 elements; the draws are seeded, so the test is deterministic),
    the pooled z-score over all elements within 5 as well, and without rescale the same
    statistic must detect the shrinkage to (1−p)·δ."""
    from longcat_plugins.fusion.contract import TensorContext
    from longcat_plugins.fusion.methods import longcat

    p, k = 0.6, 400
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(200, generator=gen)
    delta = 0.1 * torch.randn(200, generator=gen)
    sums = {True: torch.zeros(200, dtype=torch.float64), False: torch.zeros(200, dtype=torch.float64)}
    dropped = 0.0
    for rescale in (True, False):
        for seed in range(k):
            ctx = TensorContext("w", seed, "w")
            merged, stats = longcat(
                base.clone(), [(base + delta)], [1.0], ctx, normalize="none", drop_rate=p, rescale=rescale, erase=False
            )
            sums[rescale] += merged.double() - base.double()
            dropped += stats["dropped"][0] if rescale else 0.0
    sd = delta.double().abs() * (p / ((1 - p) * k)) ** 0.5
    z = (sums[True] / k - delta.double()) / sd
    assert z.abs().max() < 5, z.abs().max()
    assert abs(float(z.sum()) / len(z) ** 0.5) < 5
    # without rescale every element shrinks towards 0 by p·δ_j: about 10 standard deviations each
    shrink = -torch.sign(delta.double()) * (sums[False] / k - delta.double()) / sd
    assert float(shrink.min()) > 5 and float(shrink.sum()) / len(shrink) ** 0.5 > 20
    # the dropped count is Binomial(n=200·k, p): within 5 standard deviations of its mean
    n = 200 * k
    assert abs(dropped - p * n) < 5 * (n * p * (1 - p)) ** 0.5


def test_bad_parameters_fail_before_anything_is_written(family: tuple, tmp_path: Path) -> None:
    from longcat_plugins.config import ConfigError

    _, _, base_dir, expert_dirs = family
    out = tmp_path / "never"
    cases = [
        ("longcat", {"drop_rate": 1.0}, "params.drop_rate", "must be in [0, 1)"),
        ("longcat", {"dropp_rate": 0.1}, "params.dropp_rate", "did you mean 'drop_rate'"),
        ("longcat", {"normalize": "layer"}, "params.normalize", "expected one of"),
        ("longcat", {"erase": "yes"}, "params.erase", "expected bool"),
        ("ties", {"density": 1.5}, "params.density", "must be in [0, 1]"),
        ("dare_linear", {"density": 0.0}, "params.density", "must be in (0, 1]"),
        ("dare_ties", {"density": 1.2}, "params.density", "must be in (0, 1]"),
        ("dare_ties", {"majority": "most"}, "params.majority", "expected one of"),
        ("breadcrumbs", {"density": -0.1}, "params.density", "must be in (0, 1]"),
        ("breadcrumbs", {"gamma": 1.0}, "params.gamma", "must be in [0, 1)"),
        ("sce", {"select_topk": 0.0}, "params.select_topk", "must be in (0, 1]"),
    ]
    for method, params, path, text in cases:
        with pytest.raises(ConfigError) as info:
            fuse(base_dir, expert_dirs, out, method=method, params=params)
        assert any(p.path == path and text in p.message for p in info.value.problems), (params, info.value)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == []


def test_ties_breaks_magnitude_ties_at_random_but_reproducibly() -> None:
    """bf16 deltas take few distinct values, so many entries can tie at the k-th magnitude:
    exactly k are kept, the tied ones drawn with the seeded generator (not the first rows)."""
    from longcat_plugins.fusion.contract import TensorContext
    from longcat_plugins.fusion.methods import ties

    delta = torch.ones(64, 64)
    delta.view(-1)[torch.randperm(4096, generator=torch.Generator().manual_seed(0))[:100]] = 2.0
    k = 1024  # density 0.25: the 100 twos and 924 of the 3996 tied ones

    def kept(seed: int) -> torch.Tensor:
        merged, stats = ties(torch.zeros(64, 64), [delta.clone()], [1.0], TensorContext("w", seed, "w"), density=0.25)
        assert stats["trimmed"] == [4096.0 - k]
        return merged != 0

    first, again, other = kept(1), kept(1), kept(2)
    assert int(first.sum()) == k and torch.equal(first, again) and not torch.equal(first, other)
    assert bool(first[delta == 2.0].all())
    lower_half = int(first[32:].sum()) / k  # ~0.5 when the tied ones are drawn uniformly
    assert 0.4 < lower_half < 0.6, lower_half


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "many-ties"])
def test_rank_band_selects_exactly_the_sorted_ranking(ties: bool) -> None:
    """breadcrumbs' and sce's selection (two selections, ties ordered by their seeded keys)
    equals the definition by a full stable sort, band for band, seed for seed."""
    from longcat_plugins.fusion.methods import _rank_band, _ranked_ascending

    for case in range(200):
        g = torch.Generator().manual_seed(case)
        n = int(torch.randint(1, 80, (1,), generator=g))
        values = torch.randint(0, 4, (n,), generator=g).float() if ties else torch.rand(n, generator=g)
        low = int(torch.randint(0, n + 1, (1,), generator=g))
        high = int(torch.randint(low, n + 1, (1,), generator=g))
        want = torch.zeros(n, dtype=torch.bool)
        want[_ranked_ascending(values, torch.Generator().manual_seed(case))[low:high]] = True
        got = _rank_band(values, torch.Generator().manual_seed(case), low, high)
        assert torch.equal(got, want), (case, n, low, high)


def _adversarial(seed: int, nonfinite: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """bf16-valued base and 3 experts with what float fast paths get wrong: ±0.0 in the base,
    zero deltas, exact cancellations between experts (a zero mass), and optionally NaN and ±inf."""
    g = torch.Generator().manual_seed(seed)
    n = 4099
    base = torch.randn(n, generator=g).to(torch.bfloat16).float()
    base[::7], base[1::11] = -0.0, 0.0
    experts = []
    for i in range(3):
        e = (base + 0.01 * torch.randn(n, generator=g)).to(torch.bfloat16).float()
        e[i::5] = base[i::5]
        experts.append(e)
    experts[1][::13] = 2 * base[::13] - experts[0][::13]
    if nonfinite:
        experts[0][3], experts[1][17], experts[2][17] = float("inf"), float("nan"), float("-inf")
        experts[2][40], experts[1][40], base[50] = float("inf"), float("-inf"), float("nan")
    return base, experts


def _rule_sum(contribs: list[torch.Tensor], weights: list[float], normalize: bool = True) -> torch.Tensor:
    """The disjoint merge as written: the sum of the kept contributions, divided (``normalize``) by
    the weights of those non-zero at each entry (1 where none is)."""
    want, divisor = torch.zeros_like(contribs[0]), torch.zeros_like(contribs[0])
    for w, c in zip(weights, contribs, strict=True):
        want.add_(c)
        divisor.add_(c != 0, alpha=w)
    return want.div_(divisor.masked_fill_(divisor == 0, 1.0)) if normalize else want


def _rule_erase(
    contribs: list[torch.Tensor], majority: str, elected_on: list[torch.Tensor] | None = None
) -> list[float]:
    """The erase rule as written (float32, bool masks): zero c_i where its sign opposes the majority
    of ``elected_on`` (the contributions themselves unless given)."""
    voters = contribs if elected_on is None else elected_on
    mass = torch.zeros_like(voters[0])
    for c in voters:
        mass.add_(c)
    positive = mass >= 0
    if majority == "count":
        count = sum(torch.sign(c) for c in voters)
        positive = torch.where(count == 0, positive, count > 0)
    erased = []
    for c in contribs:
        opposite = torch.where(positive, c < 0, c > 0)
        erased.append(float(torch.count_nonzero(opposite)))
        c.masked_fill_(opposite, 0.0)
    return erased


def _rule_longcat(base, experts, weights, ctx, *, normalize, drop_rate, rescale, erase, majority):  # noqa: ANN001, ANN202
    """longcat's documented steps in float32 with the bool keep-mask and the bool erase rule, in
    the method's order of operations: the output the float-mask fast paths must reproduce bit for bit."""
    deltas = [e - base for e in experts]
    norms = [float(torch.linalg.vector_norm(d)) for d in deltas]
    present = [x for x in norms if x > 0]
    target = sum(present) / len(present) if present else 0.0
    scales = [1.0] * len(deltas) if normalize == "none" else [target / x if x > 0 else 0.0 for x in norms]
    dropped = []
    for i, d in enumerate(deltas):
        factor = weights[i] * scales[i]
        if drop_rate > 0:
            keep = torch.rand(d.shape, generator=ctx.generator(i), dtype=torch.float32) >= drop_rate
            dropped.append(float(d.numel() - int(torch.count_nonzero(keep))))
            d.mul_(keep)
            factor = factor / (1.0 - drop_rate) if rescale else factor
        else:
            dropped.append(0.0)
        if factor != 1.0:
            d.mul_(factor)
    erased = _rule_erase(deltas, majority) if erase else [0.0] * len(deltas)
    merged = deltas[0]
    for c in deltas[1:]:
        merged.add_(c)
    return merged.add_(base), dropped, erased


LONGCAT_GRID = list(itertools.product(["tensor", "none"], [0.0, 0.3, 0.5], [True, False], ["mass", "count"]))


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "nan-inf"])
def test_float_mask_fast_paths_equal_the_bool_rule_bit_for_bit(nonfinite: bool) -> None:
    """The drop and erase steps build float 0/1 masks and a ±1 majority sign instead of bool masks
    (5-8x cheaper on CPU); an erased entry may become −0.0 instead of +0.0. The outputs must not
    change a bit: longcat over its settings, and the disjoint merge of ties/dare_ties/sce, against
    the rule with bool masks, on inputs with signed zeros, cancellations, NaN and inf."""
    from longcat_plugins.fusion.contract import TensorContext
    from longcat_plugins.fusion.methods import _disjoint_merge, longcat

    def bits(t: torch.Tensor) -> list[int]:
        return t.contiguous().view(torch.int32).tolist()

    for seed, weights in itertools.product(range(3), ([1.0, 0.5, 0.8], [1.0, -1.0, 1.0])):
        for normalize, p, erase, majority in LONGCAT_GRID:
            settings = {"normalize": normalize, "drop_rate": p, "erase": erase, "majority": majority}
            base, experts = _adversarial(seed, nonfinite)
            want, dropped, erased = _rule_longcat(
                base, [e.clone() for e in experts], weights, TensorContext("w", seed, "w"), rescale=True, **settings
            )
            got, stats = longcat(base.clone(), experts, weights, TensorContext("w", seed, "w"), **settings)
            assert bits(got) == bits(want), (seed, weights, settings)
            assert (stats["dropped"], stats["erased"]) == (dropped, erased), (seed, settings)
        for majority, normalize in itertools.product(["mass", "count"], [True, False]):
            base, experts = _adversarial(seed, nonfinite)
            contribs = [w * (e - base) for w, e in zip(weights, experts, strict=True)]
            rule = [c.clone() for c in contribs]
            erased = _rule_erase(rule, majority)
            want = torch.zeros_like(base)
            divisor = torch.zeros_like(base)
            for w, c in zip(weights, rule, strict=True):
                want.add_(c)
                divisor.add_(c != 0, alpha=w)
            if normalize:
                want.div_(divisor.masked_fill_(divisor == 0, 1.0))
            got, got_erased = _disjoint_merge(contribs, weights, majority, normalize)
            assert bits(got) == bits(want) and got_erased == erased, (seed, weights, majority, normalize)


def _bf16_deltas(seed: int, n: int, experts: int) -> list[torch.Tensor]:
    """Task vectors as the fusion engine sees them: differences of bf16 weights (few distinct
    magnitudes, so large blocks of exact ties), scaled by a weight."""
    g = torch.Generator().manual_seed(seed)
    base = (0.02 * torch.randn(n, generator=g)).to(torch.bfloat16).float()
    out = []
    for _ in range(experts):
        expert = (base + 0.01 * torch.randn(n, generator=g)).to(torch.bfloat16).float()
        out.append((expert - base) * float(torch.rand(1, generator=g) * 2 - 0.5))
    return out


def _with_edge_values(values: list[torch.Tensor], case: int) -> list[torch.Tensor]:
    """Signed zeros, NaN, ±inf and huge magnitudes in some cases (the fast paths' fall-backs)."""
    if case % 4 == 1:
        values[0][::7], values[-1][::5] = -0.0, 0.0
    if case % 4 == 2:
        values[0][3], values[1][9], values[-1][11] = float("inf"), float("nan"), float("-inf")
    if case % 4 == 3:
        values = [v * 1e30 for v in values]
    return values


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int32)


@pytest.mark.parametrize("case", range(8))
def test_kth_smallest_is_kthvalue_bit_for_bit(case: int) -> None:
    """The radix selection that replaced ``kthvalue`` in ties' trim and the rank band returns the
    very element ``kthvalue`` returns, at every rank tried, on magnitudes of bf16 deltas (heavy
    ties), on sce's variances, and on inputs with −0.0, NaN and inf (where it falls back)."""
    from longcat_plugins.fusion.methods import _kth_smallest, _population_var

    g = torch.Generator().manual_seed(case)
    n = (
        int(torch.randint(1 << 15, 200_000, (1,), generator=g))
        if case < 4
        else int(torch.randint(1, 200, (1,), generator=g))
    )
    deltas = _with_edge_values(_bf16_deltas(case, n, 3), case)
    for values in (deltas[0].abs(), deltas[1], _population_var(deltas), torch.zeros(n)):
        ranks = [1, n, *(int(r) for r in torch.randint(1, n + 1, (20,), generator=g))]
        got = _kth_smallest(values, ranks)
        for rank, value in zip(ranks, got, strict=True):
            want = values.kthvalue(rank).values
            assert torch.equal(_bits(value), _bits(want)), (case, rank, float(value), float(want))


@pytest.mark.parametrize("experts", [2, 3, 5])
def test_population_var_is_torch_var_bit_for_bit(experts: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """sce's variance across experts, written as float64 Welford updates over slices, equals
    ``torch.var(stack, dim=0, unbiased=False)`` (what it replaced) bit for bit, with slices that
    cut the tensor unevenly, on bf16 deltas and with signed zeros, NaN, inf and huge values."""
    import longcat_plugins.fusion.methods as methods

    monkeypatch.setattr(methods, "_VAR_CHUNK", 4099)
    for case in range(8):
        contribs = _with_edge_values(_bf16_deltas(case, 50_000 + case, experts), case)
        want = torch.var(torch.stack(contribs), dim=0, unbiased=False)
        assert torch.equal(_bits(methods._population_var(contribs)), _bits(want)), (experts, case)


def test_rank_band_on_bf16_magnitudes_is_the_sorted_ranking() -> None:
    """The band of breadcrumbs' settings (and sce's top band) on 100k bf16-delta magnitudes,
    where tie blocks of thousands of elements straddle the edges, equals the stable-sort
    definition."""
    from longcat_plugins.fusion.methods import _rank_band, _ranked_ascending

    for case, (density, gamma) in enumerate([(0.9, 0.01), (0.5, 0.0), (0.3, 0.2), (1.0, 0.0)]):
        values = _bf16_deltas(case, 100_003, 1)[0].abs()
        n = values.numel()
        k, t = int(density * n), int(gamma * n)
        low = max(0, n - k - t)
        want = torch.zeros(n, dtype=torch.bool)
        want[_ranked_ascending(values, torch.Generator().manual_seed(case))[low : low + k]] = True
        assert torch.equal(_rank_band(values, torch.Generator().manual_seed(case), low, low + k), want), case


def _rule_trim(delta: torch.Tensor, density: float, generator: torch.Generator) -> None:
    """ties' trim as the rule is written: ``kthvalue``'s threshold, a bool keep-mask, the tied
    entries drawn by ``randperm`` over their index order, δ multiplied by the mask (in place)."""
    flat = delta.view(-1)
    n = flat.numel()
    k = max(1, int(density * n))
    magnitude = flat.abs()
    threshold = magnitude.kthvalue(n - k + 1).values
    keep = magnitude > threshold
    short = k - int(torch.count_nonzero(keep))
    tied = torch.nonzero(magnitude == threshold).view(-1)
    if short >= tied.numel():
        keep[tied] = True
    else:
        keep[tied[torch.randperm(tied.numel(), generator=generator)[:short]]] = True
    flat.mul_(keep)


@pytest.mark.parametrize("case", range(4))
def test_ties_fast_trim_and_blocked_merge_equal_the_rule_bit_for_bit(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ties on tensors large enough for the radix select (the cut by ``hardshrink`` with the
    chosen tied entries put back, the disjoint merge in blocks that cut the tensor unevenly)
    equals the rule with ``kthvalue``, bool masks and one whole-tensor merge, bit for bit, with
    its stats; on bf16 deltas (heavy ties at the threshold), signed zeros, NaN, inf and huge values."""
    import longcat_plugins.fusion.methods as methods
    from longcat_plugins.fusion.contract import TensorContext

    monkeypatch.setattr(methods, "_BLOCK", 10_007)
    g = torch.Generator().manual_seed(case)
    n = int(torch.randint(1 << 15, 50_000, (1,), generator=g))
    base = (0.02 * torch.randn(n, generator=g)).to(torch.bfloat16).float()
    experts = [(base + 0.01 * torch.randn(n, generator=g)).to(torch.bfloat16).float() for _ in range(3)]
    experts = [base + d for d in _with_edge_values([e - base for e in experts], case)]
    weights = [0.5, -0.3, 0.2] if case % 2 else [0.5, 0.3, 0.2]
    for density, majority, normalize in [
        (0.5, "mass", True),
        (0.2, "count", False),
        (0.97, "mass", True),
        (1e-5, "mass", True),
    ]:
        ctx = TensorContext("w", case, "w")
        deltas = [e - base for e in experts]
        trimmed = []
        for i, d in enumerate(deltas):
            _rule_trim(d, density, ctx.generator(i))
            trimmed.append(float(n - max(1, int(density * n))))
        contribs = [w * d for w, d in zip(weights, deltas, strict=True)]
        erased = _rule_erase(contribs, majority)
        want = _rule_sum(contribs, weights, normalize).add_(base)
        got, stats = methods.ties(
            base.clone(),
            [e.clone() for e in experts],
            weights,
            ctx,
            density=density,
            majority=majority,
            normalize=normalize,
        )
        assert torch.equal(_bits(got), _bits(want)), (case, density, majority)
        assert (stats["trimmed"], stats["erased"]) == (trimmed, erased), (case, density)


def test_select_counts_and_unsigned_fast_path() -> None:
    """``_select`` returns ``kthvalue``'s element with the exact counts below and at it, through
    the radix histograms and through the fall-back; ``unsigned`` (magnitudes) gives the same."""
    from longcat_plugins.fusion.methods import _select

    for case in range(6):
        g = torch.Generator().manual_seed(case)
        n = 40_000 + case
        values = _with_edge_values(_bf16_deltas(case, n, 2), case)[0].abs()
        ranks = [1, n, *(int(r) for r in torch.randint(1, n + 1, (10,), generator=g))]
        for unsigned in (False, True):
            for rank, got in zip(ranks, _select(values, ranks, unsigned=unsigned), strict=True):
                want = values.kthvalue(rank).values
                assert torch.equal(_bits(got.value), _bits(want)), (case, rank)
                assert got.less == int(torch.count_nonzero(values < want)), (case, rank)
                assert got.equal == int(torch.count_nonzero(values == want)), (case, rank)
                assert got.radix == (case % 4 != 2), case  # NaN and inf take the fall-back


@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "nan-inf"])
def test_disjoint_merge_weights_before_and_after_the_election(nonfinite: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``before`` (ties' and dare_ties' weights) multiplies the contributions ahead of the sign
    election, ``after`` (sce's η) once the sign is elected on the unscaled ones: both equal the
    rule written out with whole tensors and bool masks, bit for bit, in uneven blocks."""
    import longcat_plugins.fusion.methods as methods

    monkeypatch.setattr(methods, "_BLOCK", 997)
    for seed, majority in itertools.product(range(3), ["mass", "count"]):
        base, experts = _adversarial(seed, nonfinite)
        deltas = [e - base for e in experts]
        weights, eta = [0.5, -1.0, 0.7], [0.2, 0.5, 0.3]
        rule = [w * d for w, d in zip(weights, deltas, strict=True)]
        erased = _rule_erase(rule, majority)
        want = _rule_sum(rule, weights)
        got, got_erased = methods._disjoint_merge([d.clone() for d in deltas], weights, majority, True, before=weights)
        assert torch.equal(_bits(got), _bits(want)) and got_erased == erased, (seed, majority, "before")

        rule = [h * d for h, d in zip(eta, deltas, strict=True)]
        erased = _rule_erase(rule, majority, elected_on=deltas)
        want = _rule_sum(rule, eta)
        got, got_erased = methods._disjoint_merge([d.clone() for d in deltas], eta, majority, True, after=eta)
        assert torch.equal(_bits(got), _bits(want)) and got_erased == erased, (seed, majority, "after")


def test_select_positions_of_the_value_and_absolute_ranks() -> None:
    """``_select``'s ``where`` (radix only) is exactly ``nonzero(values == value)``, ascending, and
    ``absolute`` ranks ``|values|`` without building it: the same elements, counts and positions
    as ranking ``values.abs()``, through the radix select and through the fall-back (NaN, inf)."""
    from longcat_plugins.fusion.methods import _select

    for case in range(6):
        g = torch.Generator().manual_seed(case)
        n = 40_000 + case
        signed = _with_edge_values(_bf16_deltas(case, n, 2), case)[0]
        magnitude = signed.abs()
        ranks = [1, n, *(int(r) for r in torch.randint(1, n + 1, (10,), generator=g))]
        for rank, got, plain in zip(
            ranks, _select(signed, ranks, absolute=True), _select(magnitude, ranks, unsigned=True), strict=True
        ):
            want = magnitude.kthvalue(rank).values
            assert torch.equal(_bits(got.value), _bits(want)), (case, rank)
            assert (got.less, got.equal, got.radix) == (plain.less, plain.equal, plain.radix), (case, rank)
            if got.radix:
                at = torch.nonzero(magnitude == want).view(-1)
                assert torch.equal(got.where, at) and torch.equal(plain.where, at), (case, rank)
            else:
                assert got.where is None and case % 4 == 2, case  # NaN and inf take the fall-back


def _lowbias32(x: int) -> int:
    """Wellons' lowbias32 in Python integers, written from its definition (32-bit wrap-around)."""
    mask = (1 << 32) - 1
    x ^= x >> 16
    x = (x * 0x7FEB352D) & mask
    x ^= x >> 15
    x = (x * 0x846CA68B) & mask
    return x ^ (x >> 16)


def test_tie_keys_are_the_keyed_hash_and_a_bijection() -> None:
    """The tie keys equal an independent Python-integer hash, are distinct for distinct indices
    (a keyed bijection of the position), and change with the salt."""
    import longcat_plugins.fusion.methods as methods

    g = torch.Generator().manual_seed(3)
    idx = torch.cat(
        [torch.tensor([0, 1, (1 << 31) - 1, (1 << 32) - 1]), torch.randint(0, 1 << 32, (500,), generator=g)]
    )
    for salt in (0, 12345, (1 << 62) - 1, 0x3A5F_0C1E_77D2_9B41):
        got = methods._tie_keys(idx, salt).tolist()
        want = [_lowbias32(_lowbias32(i ^ (salt & 0xFFFFFFFF)) ^ (salt >> 32)) for i in idx.tolist()]
        assert got == want, salt
    keys = methods._tie_keys(torch.arange(1 << 20), 987654321)
    assert torch.unique(keys).numel() == 1 << 20
    assert not torch.equal(keys, methods._tie_keys(torch.arange(1 << 20), 987654322))


def test_rank_band_draws_tied_elements_without_regional_bias() -> None:
    """A band cutting one block of equal values keeps members spread over the whole tensor (no
    preference for low or high positions), different members for different seeds."""
    from longcat_plugins.fusion.methods import _rank_band

    n = 1 << 16
    values = torch.ones(n)
    kept = [_rank_band(values, torch.Generator().manual_seed(seed), 0, n // 4) for seed in range(3)]
    for mask in kept:
        assert int(mask.sum()) == n // 4
        for quarter in mask.view(4, -1):  # each quarter of the positions holds about a quarter of the kept
            assert 0.22 < int(quarter.sum()) / (n // 4) < 0.28
    assert not torch.equal(kept[0], kept[1]) and not torch.equal(kept[1], kept[2])
