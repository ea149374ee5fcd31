"""The warm-start base: what every warm start is, and the steps they share.

A warm start is a tiny model supervised-fine-tuned (with verl's SFT trainer) until it is *partly*
right on a task, so GRPO has signal to learn from. Each task specialises this base:
:mod:`.arithmetic_warmstart` (the ``a+b-c`` questions), :mod:`.tool_warmstart` (golden tool-call
trajectories of generated environments) and :mod:`.code_warmstart` (golden fixes of generated
repository tasks). They share

- :class:`WarmStart`: where a built one lives (the SFT'd ``model``, the random-init ``base`` it
  started from, its SFT rows, its RL train/validation parquets);
- :class:`AgentPlan` and :func:`plan_digest`: the fields every agent warm start's plan has, and the
  cache key of a plan (a changed plan builds into its own directory);
- :func:`build_trajectory_tokenizer`: a BPE tokenizer trained on rendered agent trajectories,
  with the recurring lines as single tokens;
- :func:`train_warm_start`: verl's SFT of the base into ``model`` with the shared schedule;
- :func:`rl_overrides`: the recipe overrides that train a warm start on its own task rows;
- :func:`held_out`: the first and last held-out validation of a run.

Every build happens in a temporary sibling directory renamed into place when complete
(:func:`~.assets.building`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from longcat_plugins.learning.assets import Assets
from longcat_plugins.learning.sft import SFTConfig, run_sft

#: chat template of the agent warm starts' tokenizers: no newline after an assistant turn, because
#: the model's own turn ends at its EOS and the agent loop appends the next message right after it;
#: with this template the SFT token stream is the one the loop builds at rollout time.
TOOL_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>"
    "{% if message['role'] != 'assistant' %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
#: warm-up then cosine decay (verl's default is a constant learning rate)
SFT_SCHEDULE = ("optim.lr_scheduler_type=cosine", "optim.lr_warmup_steps=10")


@dataclass(frozen=True)
class WarmStart(Assets):
    """A built warm start: :class:`~.assets.Assets` whose ``model`` is the SFT checkpoint, plus the
    random-init ``base`` it was trained from and the ``sft`` rows it was trained on."""

    base: Path
    sft: Path


@dataclass(frozen=True)
class AgentPlan:
    """What every agent warm start's plan fixes: the model size and seed, the vocabulary of its
    trajectory tokenizer and the SFT run's learning rate, batch and sample length. A task's plan
    adds its data knobs; its :meth:`key` names its cache directory."""

    size: str = "tiny"
    seed: int = 0
    vocab_size: int = 1024
    sft_lr: float = 5e-3
    sft_batch_size: int = 8
    #: verl pads every sample to this length (longer trajectories do not fit)
    sft_max_length: int = 256

    def key(self) -> str:
        """A short digest of every field: a changed plan builds into its own cache directory."""
        return plan_digest(asdict(self))


def plan_digest(fields: dict[str, Any]) -> str:
    """A short digest of a plan's fields: its cache directory's key (stable across releases: a
    changed digest rebuilds the warm start)."""
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def static_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Lines of the system prompts that recur across environments (the policy and tool signatures).

    They become single tokens: a model reads them as symbols, and the prompt shrinks ~30x.
    """
    counts: dict[str, int] = {}
    for row in rows:
        for line in {ln for ln in row["messages"][0]["content"].split("\n") if len(ln) > 8}:
            counts[line] = counts.get(line, 0) + 1
    return sorted(line for line, n in counts.items() if n >= 2)


def build_trajectory_tokenizer(
    out: Path,
    rows: list[dict[str, Any]],
    seed: int,
    vocab_size: int,
    token_groups: Iterable[Sequence[str]] = (),
    space_tokens: bool = False,
) -> None:
    """A BPE tokenizer trained on ``rows`` rendered with :data:`TOOL_CHAT_TEMPLATE`, then each of
    ``token_groups`` added as whole tokens (in order, one ``add_tokens`` call a group)."""
    from jinja2 import Template
    from transformers import AutoTokenizer

    from longcat_plugins.learning.assets import build_tokenizer

    template = Template(TOOL_CHAT_TEMPLATE)
    corpus = [template.render(messages=r["messages"], add_generation_prompt=False) for r in rows]
    build_tokenizer(out, seed, vocab_size, corpus=corpus, chat_template=TOOL_CHAT_TEMPLATE, space_tokens=space_tokens)
    tok = AutoTokenizer.from_pretrained(out)
    for group in token_groups:
        tok.add_tokens(list(group))
    tok.save_pretrained(out)


def train_warm_start(tmp: Path, base: Path, sft: Path, config: SFTConfig, meta: dict[str, Any]) -> None:
    """verl's SFT of ``base`` on ``sft`` into ``tmp/model`` with :data:`SFT_SCHEDULE`, and the
    plan that made it in ``tmp/warmstart.json``."""
    run_sft(base, sft, tmp / "model", config, overrides=SFT_SCHEDULE)
    (tmp / "warmstart.json").write_text(json.dumps(meta, indent=2))


def rl_overrides(
    warm: Assets,
    *,
    prompt_length: int,
    response_length: int,
    batch: int,
    micro_batch: int,
    lr: float,
    test_freq: int,
    n: int = 4,
) -> list[str]:
    """Overrides that train ``warm`` on its own task rows: ``batch`` tasks a step in one
    mini-batch (one update a step), ``n`` samples a task, and a greedy validation on the held-out
    rows before training and every ``test_freq`` steps."""
    return [
        f"actor_rollout_ref.model.path={warm.model}",
        f"data.train_files={warm.train}",
        f"data.val_files={warm.val}",
        f"data.max_prompt_length={prompt_length}",
        f"data.max_response_length={response_length}",
        f"data.train_batch_size={batch}",
        f"actor_rollout_ref.rollout.n={n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro_batch}",
        f"actor_rollout_ref.actor.optim.lr={lr:g}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={test_freq}",
    ]


def held_out(steps: list[dict[str, Any]], metric: str) -> tuple[float, float] | None:
    """(first, last) held-out value of ``metric`` from a run's per-step metrics; None without two validations."""
    values = [s[metric] for s in steps if metric in s]
    return (float(values[0]), float(values[-1])) if len(values) >= 2 else None
