"""Numerics of ``triplet_clip`` and ``longcat_gspo``: against float64 references written here from
the papers' formulas, against stock verl losses they reduce to, and under micro-batching."""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from verl.trainer.ppo.core_algos import compute_policy_loss_gspo, compute_policy_loss_vanilla, get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_weights
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

from longcat_plugins.algorithms.gspo import LongcatGSPOConfig, compute_longcat_gspo_loss
from longcat_plugins.algorithms.triplet_clip import TripletClipConfig, compute_triplet_clip_loss

F64 = torch.float64
SHAPES = [(1, 1), (3, 7), (8, 33), (16, 128)]
ADVANTAGES = ["mixed", "all_negative", "all_positive", "zero"]
MASKS = ["ragged", "full", "empty"]


def actor_config(policy_loss: PolicyLossConfig, **kwargs: Any) -> ActorConfig:
    """The real dataclass verl's workers hand a policy loss, with only the fields the test needs."""
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, policy_loss=policy_loss, **kwargs)


def make_batch(
    shape: tuple[int, int], adv: str = "mixed", mask: str = "ragged", spread: float = 1.5, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Log-probs with ratios far from 1 (log-ratio spread ``spread``), sequence-constant advantages
    (outcome rewards), right-padded masks, and rollout log-probs for the engine-mismatch ratio."""
    g = torch.Generator().manual_seed(seed)
    b, t = shape
    old = -torch.rand(b, t, generator=g, dtype=F64) * 3
    seq_shift = (torch.rand(b, 1, generator=g, dtype=F64) - 0.5) * 2 * spread
    log_prob = old + seq_shift + torch.randn(b, t, generator=g, dtype=F64) * spread / 3
    rollout = old + torch.randn(b, t, generator=g, dtype=F64) * 0.8
    a = torch.randn(b, 1, generator=g, dtype=F64).expand(b, t).clone()
    a = {"mixed": a, "all_negative": -a.abs() - 0.1, "all_positive": a.abs() + 0.1, "zero": torch.zeros_like(a)}[adv]
    if mask == "full":
        m = torch.ones(b, t, dtype=torch.bool)
    elif mask == "empty":
        m = torch.zeros(b, t, dtype=torch.bool)
    else:
        lengths = torch.randint(0, t + 1, (b,), generator=g)
        lengths[0] = t  # at least one full row, so the padded width is the batch's
        m = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)
    return {"old": old, "log_prob": log_prob, "rollout": rollout, "adv": a * m, "mask": m}


def seed_of(*parts: object) -> int:
    """A per-case seed that does not depend on PYTHONHASHSEED."""
    return zlib.crc32(repr(parts).encode()) % 10_000


def assert_rel(actual: torch.Tensor, expected: torch.Tensor, tol: float = 1e-6) -> None:
    """Relative error (in norm) below ``tol``; an all-zero reference must be matched exactly."""
    err = torch.linalg.norm((actual - expected).flatten()).item()
    ref = torch.linalg.norm(expected.flatten()).item()
    assert math.isfinite(err) and err <= tol * ref, f"relative error {err / ref if ref else err:.3e}"


def value_and_grad(
    fn: Callable[[torch.Tensor], torch.Tensor], log_prob: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    lp = log_prob.clone().requires_grad_(True)
    value = fn(lp)
    (grad,) = torch.autograd.grad(value, lp, allow_unused=True)
    return value.detach(), torch.zeros_like(lp) if grad is None else grad


# -- references, straight from the formulas ---------------------------------------------------------


def triplet_reference(
    old, log_prob, adv, mask, r_mu, *, eps_neg_low, eps_neg_high, eps_pos_high, cap, G, T_max
) -> torch.Tensor:
    """-J of the first LongCat-Flash-Thinking report (最终目标), dual clip on negative advantages:
    J = 1/(G·T_max) Σ_i Σ_t min(r_μ, C) · max(min(r·Â, clip(r, 1-ε_nl, 1+ε_ph)·Â), ε_nh·Â)."""
    r = torch.exp(log_prob - old)
    inner = torch.minimum(r * adv, torch.clamp(r, 1 - eps_neg_low, 1 + eps_pos_high) * adv)
    obj = torch.where(adv < 0, torch.maximum(inner, eps_neg_high * adv), inner)
    if r_mu is not None:
        obj = torch.clamp(r_mu, max=cap) * obj
    return -(obj * mask).sum() / (G * T_max)


def gspo_reference(old, log_prob, adv, mask, *, eps_low, eps_high, G) -> torch.Tensor:
    """-J of Eq. 1 (2601 report §3.3.1): J = 1/G Σ_i min(s_i Â_i, clip(s_i, 1-ε, 1+ε) Â_i),
    s_i = exp(mean_t log π_θ/π_old), differentiated through s_i itself."""
    m = mask.to(F64)
    lengths = m.sum(-1)
    s = torch.exp((m * (log_prob - old)).sum(-1) / lengths.clamp(min=1))
    a = (adv * m).sum(-1) / lengths.clamp(min=1)  # the sequence's Â_i
    per_seq = torch.minimum(s * a, torch.clamp(s, 1 - eps_low, 1 + eps_high) * a)
    return -(per_seq * (lengths > 0)).sum() / G


def gspo_token_is_reference(old, log_prob, adv, mask, r_mu, *, eps_low, eps_high, cap, G) -> torch.Tensor:
    """GSPO-token (Zheng et al. 2025, s_it = sg[s_i]·π_θ(y_it)/sg[π_θ(y_it)]) with a per-token
    min(r_μ, C): J = 1/G Σ_i 1/|y_i| Σ_t min(r_μ, C)·min(s_it Â, clip(s_it) Â)."""
    m = mask.to(F64)
    lengths = m.sum(-1, keepdim=True)
    s = torch.exp((m * (log_prob - old)).sum(-1, keepdim=True) / lengths.clamp(min=1))
    s_t = s.detach() * torch.exp(log_prob - log_prob.detach())
    obj = torch.minimum(s_t * adv, torch.clamp(s_t, 1 - eps_low, 1 + eps_high) * adv)
    obj = torch.clamp(r_mu, max=cap) * obj
    return -((obj * m).sum(-1, keepdim=True) / lengths.clamp(min=1)).sum() / G


def verl_is_weights(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """What verl's trainer hands the loss with rollout_is=token (the reuse this package relies on).
    verl computes them over a whole batch, which is never empty; token weights are per token, so
    computing them unmasked and zeroing padding as verl does also covers an empty micro-batch."""
    weights, _ = compute_rollout_correction_weights(
        log_ratio=old - rollout, response_mask=torch.ones_like(old), rollout_is="token", rollout_is_threshold=threshold
    )
    return weights * mask


# -- triplet_clip ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("adv", ADVANTAGES)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("with_is", [False, True])
def test_triplet_matches_paper_formula(shape, adv, mask, with_is) -> None:
    d = make_batch(shape, adv, mask, seed=seed_of(shape, adv, mask))
    knobs = {"eps_neg_low": 0.2, "eps_neg_high": 3.0, "eps_pos_high": 0.28}
    cap, G, T_max = 2.0, shape[0] + 3, shape[1] + 5
    cfg = actor_config(
        TripletClipConfig(**knobs, is_cap=cap), loss_scale_factor=T_max, global_batch_info={"global_batch_size": G}
    )
    # verl's threshold above C: the loss's own cap must still give min(r_μ, C)
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=5.0) if with_is else None
    r_mu = torch.exp(d["old"] - d["rollout"]) if with_is else None

    value, grad = value_and_grad(
        lambda lp: compute_triplet_clip_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, weights)[0],
        d["log_prob"],
    )
    ref_value, ref_grad = value_and_grad(
        lambda lp: triplet_reference(d["old"], lp, d["adv"], d["mask"], r_mu, **knobs, cap=cap, G=G, T_max=T_max),
        d["log_prob"],
    )
    assert_rel(value, ref_value)
    assert_rel(grad, ref_grad)
    if adv != "zero" and mask != "empty" and shape[1] > 1:
        assert ref_grad.abs().sum() > 0  # not vacuous: some tokens are inside their bounds


def test_triplet_bounds_act_where_the_paper_says() -> None:
    """One token per case: which bound stops the gradient, and the metric that counts it."""
    ratios = torch.tensor([[0.5, 1.0, 1.5, 0.5, 1.0, 2.0, 5.0]], dtype=F64)
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0]], dtype=F64)
    old = torch.zeros_like(ratios)
    mask = torch.ones_like(ratios, dtype=torch.bool)
    cfg = actor_config(
        TripletClipConfig(eps_neg_low=0.2, eps_neg_high=3.0, eps_pos_high=0.28),
        loss_scale_factor=7,
        global_batch_info={"global_batch_size": 1},
    )
    lp = ratios.log().requires_grad_(True)
    loss, metrics = compute_triplet_clip_loss(old, lp, adv, mask, "token-mean", cfg, None)
    loss.backward()
    live = (lp.grad != 0).flatten().tolist()
    # Â>0: ratio 1.5 > 1.28 clipped, ratio 0.5 keeps its gradient (no lower bound for positives)
    # Â<0: ratio 0.5 < 0.8 clipped; 2.0 inside [0.8, 3]; 5.0 > ε_neg_high dual-clipped
    assert live == [True, True, False, False, True, True, False]
    assert metrics["longcat/triplet/pos_high_clipfrac"] == pytest.approx(1 / 7)
    assert metrics["longcat/triplet/neg_low_clipfrac"] == pytest.approx(1 / 7)
    assert metrics["longcat/triplet/neg_dual_clipfrac"] == pytest.approx(1 / 7)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(2 / 7)
    assert metrics["longcat/is_truncated_frac"] == 0.0
    # the dual-clipped token is bounded at ε_neg_high·Â, the others at their effective ratio
    expected = -(0.5 + 1.0 + 1.28 - 0.8 - 1.0 - 2.0 - 3.0) / 7
    assert loss.item() == pytest.approx(expected)


def test_triplet_is_truncation_metric_counts_capped_tokens() -> None:
    d = make_batch((4, 50), mask="full", seed=3)
    cfg = actor_config(TripletClipConfig(is_cap=1.5), loss_scale_factor=50, global_batch_info={"global_batch_size": 4})
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=10.0)
    _, metrics = compute_triplet_clip_loss(d["old"], d["log_prob"], d["adv"], d["mask"], "token-mean", cfg, weights)
    expected = (torch.exp(d["old"] - d["rollout"]) >= 1.5).double().mean().item()
    assert metrics["longcat/is_truncated_frac"] == pytest.approx(expected)
    assert 0 < expected < 1


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.35])
@pytest.mark.parametrize("with_is", [False, True])
def test_triplet_reduces_to_vanilla_without_dual_clip(eps, with_is) -> None:
    """ε_neg_low = ε_pos_high = ε, ε_neg_high -> ∞: stock ``vanilla`` with clip ε and the same
    constant-denominator aggregation (seq-mean-token-sum-norm over G and T_max)."""
    d = make_batch((12, 40), seed=7)
    info = {"global_batch_size": 12, "dp_size": 1, "loss_scale_factor": 64}
    ours = actor_config(
        TripletClipConfig(eps_neg_low=eps, eps_pos_high=eps, eps_neg_high=1e9, is_cap=math.inf),
        loss_scale_factor=64,
        global_batch_info=info,
    )
    stock = actor_config(
        PolicyLossConfig(loss_mode="vanilla"),
        clip_ratio=eps,
        clip_ratio_low=eps,
        clip_ratio_high=eps,
        clip_ratio_c=1e9,
        loss_agg_mode="seq-mean-token-sum-norm",
        loss_scale_factor=64,
        global_batch_info=dict(info),
    )
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=2.0) if with_is else None
    vanilla = get_policy_loss_fn("vanilla")
    assert vanilla is compute_policy_loss_vanilla
    v1, g1 = value_and_grad(
        lambda lp: compute_triplet_clip_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", ours, weights)[0],
        d["log_prob"],
    )
    v2, g2 = value_and_grad(
        lambda lp: vanilla(d["old"], lp, d["adv"], d["mask"], "seq-mean-token-sum-norm", stock, weights)[0],
        d["log_prob"],
    )
    assert_rel(v1, v2, 1e-12)
    assert_rel(g1, g2, 1e-12)


def test_triplet_is_vanilla_decoupled_dual_clip_under_the_key_mapping() -> None:
    """In general: clip_ratio_low = ε_neg_low, clip_ratio_high = ε_pos_high, clip_ratio_c = ε_neg_high."""
    d = make_batch((10, 30), spread=3.0, seed=11)
    info = {"global_batch_size": 10, "loss_scale_factor": 30}
    ours = actor_config(
        TripletClipConfig(eps_neg_low=0.15, eps_pos_high=0.3, eps_neg_high=2.5),
        loss_scale_factor=30,
        global_batch_info=info,
    )
    stock = actor_config(
        PolicyLossConfig(),
        clip_ratio_low=0.15,
        clip_ratio_high=0.3,
        clip_ratio_c=2.5,
        loss_scale_factor=30,
        global_batch_info=dict(info),
    )
    l1, m1 = compute_triplet_clip_loss(d["old"], d["log_prob"], d["adv"], d["mask"], "token-mean", ours, None)
    l2, m2 = compute_policy_loss_vanilla(d["old"], d["log_prob"], d["adv"], d["mask"], "seq-mean-token-sum-norm", stock)
    assert_rel(l1, l2, 1e-12)
    assert m1["actor/pg_clipfrac"] == pytest.approx(m2["actor/pg_clipfrac"])
    assert m1["actor/pg_clipfrac_lower"] == pytest.approx(m2["actor/pg_clipfrac_lower"])
    assert m1["actor/ppo_kl"] == pytest.approx(m2["actor/ppo_kl"])
    assert m1["longcat/triplet/neg_dual_clipfrac"] > 0


# -- longcat_gspo ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("adv", ADVANTAGES)
@pytest.mark.parametrize("mask", MASKS)
def test_longcat_gspo_matches_eq1(shape, adv, mask) -> None:
    """No engine-mismatch weight: value and gradient of the report's Eq. 1 (sequence-level)."""
    d = make_batch(shape, adv, mask, spread=2.0, seed=seed_of(shape, adv, mask, "gspo"))
    G = shape[0] + 2
    cfg = actor_config(
        LongcatGSPOConfig(), clip_ratio_low=0.2, clip_ratio_high=0.27, global_batch_info={"global_batch_size": G}
    )
    value, grad = value_and_grad(
        lambda lp: compute_longcat_gspo_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, None)[0],
        d["log_prob"],
    )
    ref_value, ref_grad = value_and_grad(
        lambda lp: gspo_reference(d["old"], lp, d["adv"], d["mask"], eps_low=0.2, eps_high=0.27, G=G), d["log_prob"]
    )
    assert_rel(value, ref_value)
    assert_rel(grad, ref_grad)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("adv", ADVANTAGES)
@pytest.mark.parametrize("mask", MASKS)
def test_longcat_gspo_with_truncated_is_matches_formula(shape, adv, mask) -> None:
    d = make_batch(shape, adv, mask, spread=2.0, seed=seed_of(shape, adv, mask, "gspo-is"))
    G, cap = shape[0], 1.7
    cfg = actor_config(
        LongcatGSPOConfig(is_cap=cap),
        clip_ratio_low=0.1,
        clip_ratio_high=0.1,
        global_batch_info={"global_batch_size": G},
    )
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=4.0)
    r_mu = torch.exp(d["old"] - d["rollout"])
    value, grad = value_and_grad(
        lambda lp: compute_longcat_gspo_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, weights)[0],
        d["log_prob"],
    )
    ref_value, ref_grad = value_and_grad(
        lambda lp: gspo_token_is_reference(
            d["old"], lp, d["adv"], d["mask"], r_mu, eps_low=0.1, eps_high=0.1, cap=cap, G=G
        ),
        d["log_prob"],
    )
    assert_rel(value, ref_value)
    assert_rel(grad, ref_grad)


@pytest.mark.parametrize("with_is", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("past_clamp", [False, True])
def test_longcat_gspo_is_stock_gspo_with_sequence_aggregation(with_is, dtype, past_clamp) -> None:
    """Correction off (no weights, or C = ∞): verl's ``gspo`` with seq-mean-token-mean, called as
    verl's worker calls it (bool mask): the same value, gradient and verl metrics to float rounding
    (the written-out gradient sums in another order; in float64 agg_loss's ``+ 1e-8`` in the
    per-sequence denominator is a 1e-8/|y_i| relative difference). ``past_clamp`` puts a sequence
    of each advantage sign past verl's log-ratio clamp at 10, where the gradient must vanish."""
    d = {k: v.to(dtype) if v.is_floating_point() else v for k, v in make_batch((9, 25), spread=2.0, seed=5).items()}
    if past_clamp:
        d["log_prob"][:2] = d["old"][:2] + 12.0
        d["adv"][0], d["adv"][1] = d["adv"][0].abs() + 0.5, -d["adv"][1].abs() - 0.5
        d["adv"] = d["adv"] * d["mask"]
    info = {"global_batch_size": 9, "dp_size": 1}
    ours = actor_config(LongcatGSPOConfig(is_cap=math.inf), clip_ratio=0.2, global_batch_info=info)
    stock = actor_config(PolicyLossConfig(loss_mode="gspo"), clip_ratio=0.2, global_batch_info=dict(info))
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=2.0).to(dtype) if with_is else None
    gspo = get_policy_loss_fn("gspo")
    assert gspo is compute_policy_loss_gspo
    metrics = []

    def ours_fn(lp: torch.Tensor) -> torch.Tensor:
        loss, m = compute_longcat_gspo_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", ours, weights)
        metrics.append(m)
        return loss

    def stock_fn(lp: torch.Tensor) -> torch.Tensor:
        loss, m = gspo(d["old"], lp, d["adv"], d["mask"], "seq-mean-token-mean", stock, weights)
        metrics.append(m)
        return loss

    v1, g1 = value_and_grad(ours_fn, d["log_prob"])
    v2, g2 = value_and_grad(stock_fn, d["log_prob"])
    tol = 1e-6 if dtype == torch.float32 else 1e-8
    assert_rel(v1, v2, tol)
    assert_rel(g1, g2, tol)
    if past_clamp:
        assert bool(g2[:2].eq(0).all()) and bool(g1[:2].eq(0).all())
        assert bool(g1[2:].ne(0).any())
    for key in ("actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"):  # verl's are float32 means
        assert metrics[0][key] == pytest.approx(metrics[1][key], rel=1e-6, abs=1e-7), key


@pytest.mark.parametrize("with_is", [False, True])
def test_longcat_gspo_mask_dtypes_agree(with_is) -> None:
    """verl's worker hands a bool mask, older paths a float or int one: the same loss, gradient
    and metrics whichever it is, bit for bit."""
    d = {k: v.float() if v.is_floating_point() else v for k, v in make_batch((9, 25), spread=2.0, seed=11).items()}
    info = {"global_batch_size": 9, "dp_size": 1}
    cfg = actor_config(LongcatGSPOConfig(is_cap=1.5), clip_ratio=0.2, global_batch_info=info)
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=2.0) if with_is else None
    results = []
    for mask in (d["mask"], d["mask"].float(), d["mask"].long()):
        lp = d["log_prob"].detach().requires_grad_(True)
        loss, metrics = compute_longcat_gspo_loss(d["old"], lp, d["adv"], mask, "token-mean", cfg, weights)
        loss.backward()
        results.append((loss.detach(), lp.grad, {k: float(v) for k, v in metrics.items()}))
    (v1, g1, m1), *others = results
    for v2, g2, m2 in others:
        assert torch.equal(v1, v2) and torch.equal(g1, g2)
        assert m1 == m2


def test_longcat_gspo_sequence_clip_metrics() -> None:
    old = torch.zeros(4, 3, dtype=F64)
    # sequence ratios e^0.5 (high), e^-0.5 (low), 1, e^0.5 with a negative advantage (not clipped)
    log_prob = torch.tensor([[0.5] * 3, [-0.5] * 3, [0.0] * 3, [0.5] * 3], dtype=F64)
    adv = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]], dtype=F64).expand(4, 3)
    mask = torch.ones(4, 3, dtype=torch.bool)
    cfg = actor_config(LongcatGSPOConfig(), clip_ratio=0.2, global_batch_info={"global_batch_size": 4})
    _, metrics = compute_longcat_gspo_loss(old, log_prob, adv, mask, "token-mean", cfg, None)
    assert metrics["longcat/gspo/high_clipfrac"] == pytest.approx(0.25)
    assert metrics["longcat/gspo/low_clipfrac"] == pytest.approx(0.25)
    assert "actor/pg_clipfrac" in metrics


# -- gradient accumulation ---------------------------------------------------------------------------

LOSSES = {
    "triplet_clip": (compute_triplet_clip_loss, lambda: TripletClipConfig(eps_neg_high=2.0), {"loss_scale_factor": 48}),
    "longcat_gspo": (compute_longcat_gspo_loss, LongcatGSPOConfig, {"clip_ratio": 0.2}),
}


def split_rows(d: dict[str, torch.Tensor], weights: torch.Tensor, sizes: list[int]):
    """Micro-batches as verl's engine builds them: rows split, each padded only to its own longest response."""
    start = 0
    for size in sizes:
        rows = slice(start, start + size)
        width = max(int(d["mask"][rows].sum(-1).max()), 1)
        yield rows, width, {k: v[rows, :width] for k, v in d.items()}, weights[rows, :width]
        start += size


@pytest.mark.parametrize("name", list(LOSSES))
def test_micro_batches_sum_to_the_mini_batch_gradient(name) -> None:
    fn, make_knobs, extra = LOSSES[name]
    d = make_batch((12, 40), spread=2.0, seed=21)
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=3.0)
    info = {"global_batch_size": 12, "dp_size": 1, "loss_scale_factor": extra.get("loss_scale_factor")}
    cfg = actor_config(make_knobs(), global_batch_info=info, **extra)

    whole_value, whole_grad = value_and_grad(
        lambda lp: fn(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, weights)[0], d["log_prob"]
    )
    total = torch.zeros(())
    accumulated = torch.zeros_like(d["log_prob"])
    for rows, width, mb, mb_weights in split_rows(d, weights, [5, 4, 2, 1]):
        value, grad = value_and_grad(
            lambda lp, mb=mb, w=mb_weights: fn(mb["old"], lp, mb["adv"], mb["mask"], "token-mean", cfg, w)[0],
            mb["log_prob"],
        )
        total = total + value
        accumulated[rows, :width] += grad
    scale = max(1.0, whole_grad.abs().max().item())
    assert (accumulated - whole_grad).abs().max().item() <= 1e-12 * scale
    assert abs(total.item() - whole_value.item()) <= 1e-12 * max(1.0, abs(whole_value.item()))


@pytest.mark.parametrize("name", list(LOSSES))
def test_data_parallel_ranks_average_to_the_mini_batch_gradient(name) -> None:
    """FSDP averages rank gradients; dp_size in global_batch_info compensates exactly."""
    fn, make_knobs, extra = LOSSES[name]
    d = make_batch((8, 30), spread=2.0, seed=22)
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=3.0)
    whole_cfg = actor_config(make_knobs(), global_batch_info={"global_batch_size": 8, "dp_size": 1}, **extra)
    rank_cfg = actor_config(make_knobs(), global_batch_info={"global_batch_size": 8, "dp_size": 2}, **extra)
    _, whole_grad = value_and_grad(
        lambda lp: fn(d["old"], lp, d["adv"], d["mask"], "token-mean", whole_cfg, weights)[0], d["log_prob"]
    )
    averaged = torch.zeros_like(whole_grad)
    for rows, width, mb, mb_weights in split_rows(d, weights, [4, 4]):
        _, grad = value_and_grad(
            lambda lp, mb=mb, w=mb_weights: fn(mb["old"], lp, mb["adv"], mb["mask"], "token-mean", rank_cfg, w)[0],
            mb["log_prob"],
        )
        averaged[rows, :width] += grad / 2
    assert (averaged - whole_grad).abs().max().item() <= 1e-12 * max(1.0, whole_grad.abs().max().item())


def test_accumulation_check_catches_a_batch_dependent_denominator() -> None:
    """The harness is sensitive: stock gspo without global_batch_size divides by the micro-batch's count."""
    d = make_batch((12, 40), spread=2.0, seed=21)
    cfg = actor_config(PolicyLossConfig(loss_mode="gspo"), clip_ratio=0.2)
    _, whole = value_and_grad(
        lambda lp: compute_policy_loss_gspo(d["old"], lp, d["adv"], d["mask"], "seq-mean-token-mean", cfg)[0],
        d["log_prob"],
    )
    acc = torch.zeros_like(whole)
    for rows, width, mb, _ in split_rows(d, torch.ones_like(d["old"]), [5, 4, 2, 1]):
        _, grad = value_and_grad(
            lambda lp, mb=mb: compute_policy_loss_gspo(
                mb["old"], lp, mb["adv"], mb["mask"], "seq-mean-token-mean", cfg
            )[0],
            mb["log_prob"],
        )
        acc[rows, :width] += grad
    assert (acc - whole).abs().max().item() > 1e-6


@pytest.mark.parametrize("name", list(LOSSES))
def test_verl_worker_loss_path_accumulates_exactly(name, longcat_host) -> None:
    """Through verl's own ``workers.utils.losses.ppo_loss`` (the function the actor's engine calls per
    micro-batch): it fills ``config.global_batch_info`` from the batch, and our loss makes the
    micro-batch gradients sum to the mini-batch one."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.utils.losses import ppo_loss

    from longcat_plugins import builtins

    longcat_host(("longcat.algorithms", builtins.algorithms), activate=True)  # ppo_loss looks the loss up by name
    _, make_knobs, extra = LOSSES[name]
    d = make_batch((6, 20), spread=2.0, seed=31)
    d["mask"][:, 0] = True  # verl's padding helpers expect non-empty responses
    d["adv"] = d["adv"] + 0.5 * d["mask"]
    weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=3.0)
    prompt_len = 3

    def run(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        mask = d["mask"][rows]
        width = int(mask.sum(-1).max())
        lengths = mask.sum(-1)
        n = mask.shape[0]
        attention = torch.cat([torch.ones(n, prompt_len, dtype=torch.long), mask[:, :width].long()], dim=1)
        data = TensorDict(
            {
                "prompts": torch.ones(n, prompt_len, dtype=torch.long),
                "responses": torch.ones(n, width, dtype=torch.long),
                "attention_mask": attention,
                "response_mask": mask[:, :width].float(),
                "old_log_probs": d["old"][rows, :width],
                "advantages": d["adv"][rows, :width],
                "rollout_is_weights": weights[rows, :width],
            },
            batch_size=[n],
        )
        tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(d["mask"].sum()), global_batch_size=6)
        lp = d["log_prob"][rows, :width].clone().requires_grad_(True)
        # the model's flat log-probs over prompt+response tokens, shifted by one as verl expects
        flat = torch.cat(
            [
                torch.cat([torch.zeros(prompt_len - 1, dtype=F64), lp[i, : int(lengths[i])], torch.zeros(1, dtype=F64)])
                for i in range(n)
            ]
        )
        cfg = actor_config(make_knobs(), **extra)
        assert cfg.policy_loss.loss_mode == name
        loss, _ = ppo_loss(cfg, {"log_probs": flat}, data)
        (grad,) = torch.autograd.grad(loss, lp)
        full = torch.zeros_like(d["log_prob"][rows])
        full[:, :width] = grad
        return loss.detach(), full

    whole_loss, whole_grad = run(slice(0, 6))
    parts = [run(slice(0, 2)), run(slice(2, 5)), run(slice(5, 6))]
    assert abs(sum(p[0].item() for p in parts) - whole_loss.item()) <= 1e-12
    assert (torch.cat([p[1] for p in parts]) - whole_grad).abs().max().item() <= 1e-12
    assert whole_grad.abs().sum() > 0


# -- configuration -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"eps_neg_high": 1.0}, "eps_neg_high"),
        ({"eps_neg_high": 0.5}, "eps_neg_high"),
        ({"eps_neg_high": math.nan}, "eps_neg_high"),
        ({"eps_neg_low": -0.1}, "eps_neg_low"),
        ({"eps_neg_low": 1.5}, "eps_neg_low"),
        ({"eps_pos_high": -0.01}, "eps_pos_high"),
        ({"is_cap": 0.0}, "is_cap"),
        ({"is_cap": -1.0}, "is_cap"),
    ],
)
def test_triplet_config_rejects_bad_bounds_naming_the_key(kwargs, key) -> None:
    with pytest.raises(ValueError, match=rf"actor_rollout_ref\.actor\.policy_loss\.{key}\b"):
        TripletClipConfig(**kwargs)


def test_configs_accept_valid_edges() -> None:
    TripletClipConfig(eps_neg_low=0.0, eps_pos_high=0.0, eps_neg_high=1.0001, is_cap=math.inf)
    TripletClipConfig(eps_neg_low=1.0, eps_neg_high=1e9)
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.policy_loss\.is_cap"):
        LongcatGSPOConfig(is_cap=0)


def test_triplet_requires_t_max() -> None:
    d = make_batch((2, 4))
    cfg = actor_config(TripletClipConfig(), global_batch_info={"global_batch_size": 2})
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.loss_scale_factor"):
        compute_triplet_clip_loss(d["old"], d["log_prob"], d["adv"], d["mask"], "token-mean", cfg, None)


@pytest.mark.parametrize("fn", [compute_triplet_clip_loss, compute_longcat_gspo_loss])
def test_losses_name_the_config_target_they_need(fn) -> None:
    d = make_batch((2, 4))
    cfg = actor_config(PolicyLossConfig(), loss_scale_factor=4, global_batch_info={"global_batch_size": 2})
    with pytest.raises(ValueError, match=r"policy_loss\._target_: longcat_plugins\.algorithms\."):
        fn(d["old"], d["log_prob"], d["adv"], d["mask"], "token-mean", cfg, None)


# -- IcePop ------------------------------------------------------------------------------------------

ICEPOP = {"icepop": True, "icepop_low": 0.5, "icepop_high": 2.0}


def icepop_reference_weight(old: torch.Tensor, rollout: torch.Tensor, *, low: float, high: float, cap: float):
    """IcePop (Ring-1T) composed with truncated IS, from the rollout log-probs themselves:
    M(r) = min(r, C)·1[α ≤ r ≤ β], r = π_train/π_inference = exp(old_log_prob − rollout_log_prob)."""
    r = torch.exp(old - rollout)
    return torch.clamp(r, max=cap) * ((r >= low) & (r <= high)).to(r.dtype)


def verl_icepop_weights(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor, spec: str) -> torch.Tensor:
    """What verl's trainer hands the loss with rollout_is: token and an IcePop threshold ``"lower_upper"``."""
    weights, _ = compute_rollout_correction_weights(
        log_ratio=old - rollout, response_mask=torch.ones_like(old), rollout_is="token", rollout_is_threshold=spec
    )
    return weights * mask


def icepop_case(name: str, shape: tuple[int, int], verl_threshold: str | float, cap: float, seed: int):
    """(loss as a function of log_prob, -J of the reference, the batch, the reference weights)."""
    d = make_batch(shape, "mixed", "ragged", spread=1.0, seed=seed)
    d["rollout"] = d["old"] + torch.randn(shape, generator=torch.Generator().manual_seed(seed + 1), dtype=F64) * 0.9
    if isinstance(verl_threshold, str):
        weights = verl_icepop_weights(d["old"], d["rollout"], d["mask"], verl_threshold)
    else:
        weights = verl_is_weights(d["old"], d["rollout"], d["mask"], threshold=verl_threshold)
    ref_w = icepop_reference_weight(d["old"], d["rollout"], low=0.5, high=2.0, cap=cap)
    G = shape[0]
    if name == "triplet_clip":
        knobs = TripletClipConfig(eps_neg_low=0.2, eps_neg_high=3.0, eps_pos_high=0.28, is_cap=cap, **ICEPOP)
        cfg = actor_config(knobs, loss_scale_factor=shape[1], global_batch_info={"global_batch_size": G})

        def ours(lp):
            return compute_triplet_clip_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, weights)

        def ref(lp):
            return triplet_reference(
                d["old"], lp, d["adv"], d["mask"], ref_w,
                eps_neg_low=0.2, eps_neg_high=3.0, eps_pos_high=0.28, cap=math.inf, G=G, T_max=shape[1],
            )  # fmt: skip
    else:
        cfg = actor_config(
            LongcatGSPOConfig(is_cap=cap, **ICEPOP),
            clip_ratio_low=0.1,
            clip_ratio_high=0.1,
            global_batch_info={"global_batch_size": G},
        )

        def ours(lp):
            return compute_longcat_gspo_loss(d["old"], lp, d["adv"], d["mask"], "token-mean", cfg, weights)

        def ref(lp):
            return gspo_token_is_reference(
                d["old"], lp, d["adv"], d["mask"], ref_w, eps_low=0.1, eps_high=0.1, cap=math.inf, G=G
            )

    return ours, ref, d, ref_w


@pytest.mark.parametrize("name", ["triplet_clip", "longcat_gspo"])
@pytest.mark.parametrize("verl_threshold", ["0.5_2.0", "0.25_8.0", 3.0])  # verl's IcePop, wider, TIS above β
@pytest.mark.parametrize("cap", [1.5, math.inf])  # C inside [α, β] (truncation bites), or no cap
@pytest.mark.parametrize("shape", [(3, 7), (8, 33), (16, 128)])
def test_icepop_matches_formula_and_masked_tokens_get_no_gradient(name, verl_threshold, cap, shape) -> None:
    ours, ref, d, ref_w = icepop_case(name, shape, verl_threshold, cap, seed_of(name, verl_threshold, cap, shape))
    value, grad = value_and_grad(lambda lp: ours(lp)[0], d["log_prob"])
    ref_value, ref_grad = value_and_grad(ref, d["log_prob"])
    assert_rel(value, ref_value)
    assert_rel(grad, ref_grad)
    r = torch.exp(d["old"] - d["rollout"])
    masked = d["mask"] & ((r < 0.5) | (r > 2.0))
    assert bool(grad[masked].eq(0).all())
    _, metrics = ours(d["log_prob"])
    valid = int(d["mask"].sum())
    assert metrics["longcat/icepop_masked_frac"] == pytest.approx(int(masked.sum()) / max(valid, 1))
    if shape[0] >= 8:  # the case exercises both sides of the band and tokens that still train
        assert bool((d["mask"] & (r < 0.5)).any()) and bool((d["mask"] & (r > 2.0)).any())
        assert bool(grad[d["mask"] & ~masked].ne(0).any())


@pytest.mark.parametrize("name", ["triplet_clip", "longcat_gspo"])
def test_icepop_masked_token_changes_nothing(name) -> None:
    """A token IcePop masks adds nothing: flipping its advantage (and, for the token-level
    triplet_clip, moving its log-prob) leaves the loss and every gradient exactly as they were.
    (GSPO's sequence ratio s_i is a mean over all of the sequence's tokens, masked or not: the
    "zero" variant masks a token's term, not its share of s_i.)"""
    ours, _, d, _ = icepop_case(name, (8, 33), "0.5_2.0", 1.5, seed=7)
    r = torch.exp(d["old"] - d["rollout"])
    masked = d["mask"] & ((r < 0.5) | (r > 2.0))
    i, t = (int(x) for x in masked.nonzero()[0])
    before_value, before_grad = value_and_grad(lambda lp: ours(lp)[0], d["log_prob"])
    d["adv"][i, t] = -5.0 * d["adv"][i, t] - 1.0
    if name == "triplet_clip":
        d["log_prob"][i, t] += 0.7
    after_value, after_grad = value_and_grad(lambda lp: ours(lp)[0], d["log_prob"])
    assert torch.equal(before_value, after_value) and torch.equal(before_grad, after_grad)


def test_icepop_without_rollout_weights_fails_naming_what_to_set() -> None:
    d = make_batch((3, 7))
    cfg = actor_config(LongcatGSPOConfig(**ICEPOP), clip_ratio=0.2, global_batch_info={"global_batch_size": 3})
    with pytest.raises(ValueError, match=r"policy_loss\.icepop.*rollout_is: token"):
        compute_longcat_gspo_loss(d["old"], d["log_prob"], d["adv"], d["mask"], "token-mean", cfg, None)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"icepop_low": 0.0}, "icepop_low"),
        ({"icepop_high": math.inf}, "icepop_high"),
        ({"icepop_low": 1.2}, "icepop_low < 1"),
        ({"icepop_high": 0.9}, "icepop_high"),
        ({"icepop": "yes"}, "icepop must be true or false"),
    ],
)
def test_icepop_knobs_are_validated_naming_the_key(kwargs, key) -> None:
    for cls in (TripletClipConfig, LongcatGSPOConfig):
        with pytest.raises(ValueError, match=rf"actor_rollout_ref\.actor\.policy_loss\.{key}"):
            cls(**kwargs)


@pytest.mark.parametrize(
    ("rollout_correction", "problem"),
    [
        ({"rollout_is": "token", "rollout_is_threshold": "0.5_2.0", "bypass_mode": False}, None),
        ({"rollout_is": "token", "rollout_is_threshold": "0.4_6", "bypass_mode": False}, None),
        ({"rollout_is": "token", "rollout_is_threshold": 2.5, "bypass_mode": False}, None),
        ({"rollout_is": "token", "rollout_is_threshold": 2.0, "bypass_mode": False}, "rollout_is_threshold"),
        ({"rollout_is": "token", "rollout_is_threshold": "0.6_2.0", "bypass_mode": False}, "narrower"),
        ({"rollout_is": "token", "rollout_is_threshold": "0.5_2.0", "bypass_mode": True}, "bypass_mode"),
        ({"rollout_is": "sequence", "rollout_is_threshold": "0.5_2.0"}, "rollout_is"),
        (None, "rollout_is"),
    ],
)
def test_icepop_config_check_before_ray(rollout_correction, problem) -> None:
    cfg = {
        "algorithm": {"rollout_correction": rollout_correction},
        "actor_rollout_ref": {"actor": {"policy_loss": {"loss_mode": "longcat_gspo", **ICEPOP}}},
    }
    for fn in (compute_longcat_gspo_loss, compute_triplet_clip_loss):
        problems = fn.check_config(cfg)
        if problem is None:
            assert problems == []
        else:
            assert len(problems) == 1 and problem in problems[0] and problems[0].startswith("algorithm.")
    cfg["actor_rollout_ref"]["actor"]["policy_loss"]["icepop"] = False
    assert compute_longcat_gspo_loss.check_config(cfg) == []
