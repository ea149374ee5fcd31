"""A tool-use warm start that also writes A6 verdicts: the tool system recipe's starting policy.

Self-verification (A6) asks the policy to judge its own recent tool episodes; a verification
group only carries signal when the policy writes one of the two verdicts and not always the same
one. The tool warm starts (:mod:`.tool_warmstart`) never saw a verdict, so every verification
sample would score -1 and every verification group would be dropped for having no signal. As the
arithmetic system recipe's warm start does (``arithmetic_warmstart``, ``verdicts=0.5``), this
continues the SFT of a built tool warm start on its own golden trajectories plus verification
conversations about trajectories of its environments:

- a *correct* candidate is a golden trajectory (the rubric's 1.0);
- an *incorrect* one is the same trajectory stopped after the first tool result (what the rubric
  never credits: the task's change is not made), or with the first call's copied value replaced
  by another of the same shape (the call acts on a record the user did not name).

The candidate is shown as the verification phase shows a rollout: the episode's response tokens
(the model's turns and the tool results, as the agent loop's chat template renders them) decoded
without special tokens, after the task's last user message, in :data:`VERIFY_PROMPT`.

Built once per (warm start, share, steps, seed) next to the warm start, atomically; the RL
parquets and environments stay the warm start's own.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from longcat_plugins.learning.assets import building
from longcat_plugins.learning.sft import SFTConfig, run_sft
from longcat_plugins.learning.warmstart import SFT_SCHEDULE, WarmStart

#: the tool system recipe's verification prompt and verdicts (configs/system/longcat_tool.yaml)
VERIFY_PROMPT = "{problem}\n{solution}\nRight?"
VERDICT_CORRECT, VERDICT_INCORRECT = "Verdict: correct.", "Verdict: incorrect."


@dataclass(frozen=True)
class VerdictPlan:
    """What to build on a tool warm start: the share of its trajectories that also appear as a
    verification conversation, and the continued SFT's updates and learning rate."""

    verdicts: float = 0.5
    sft_steps: int = 150
    lr: float = 1e-3
    batch_size: int = 8
    max_length: int = 352
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.verdicts <= 1.0:
            raise ValueError(f"verdicts: must be a share in (0, 1], got {self.verdicts!r}")
        if self.sft_steps < 1:
            raise ValueError(f"sft_steps: must be >= 1, got {self.sft_steps}")

    def key(self) -> str:
        return f"vd{self.verdicts:g}-t{self.sft_steps}-lr{self.lr:g}-b{self.batch_size}-s{self.seed}"


def response_text(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The part of a rendered trajectory after its opening (system + user) as the verification
    phase reads a rollout: the response tokens decoded without special tokens."""
    opening = [m for m in messages[:2]]
    head = tokenizer.apply_chat_template(opening, add_generation_prompt=True, tokenize=True, return_dict=False)
    whole = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False)
    if list(whole[: len(head)]) != list(head):
        raise ValueError("the chat template does not render the opening as a prefix of the trajectory")
    return tokenizer.decode(whole[len(head) :], skip_special_tokens=True).strip()


def _copy_error(messages: list[dict[str, str]], rng: random.Random) -> list[dict[str, str]] | None:
    """The trajectory with one value of its first call that the user's message states replaced by
    a fresh value of the same shape (in that call only); None when the call copies no such value."""
    from longcat_plugins.learning.tool_warmstart import REVALUE_MIN_CHARS, _fresh

    question = messages[1]["content"]
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), None)
    if first is None or not messages[first]["content"].startswith("<tool_call>"):
        return None
    body = messages[first]["content"][len("<tool_call>") : -len("</tool_call>")]
    call = json.loads(body)
    values = [
        v
        for v in call.get("arguments", {}).values()
        if isinstance(v, str) and sum(c.isalnum() for c in v) >= REVALUE_MIN_CHARS and v in question
    ]
    if not values:
        return None
    value = rng.choice(values)
    wrong = _fresh(value, rng)
    if wrong == value:
        return None
    out = [dict(m) for m in messages]
    out[first]["content"] = out[first]["content"].replace(json.dumps(value), json.dumps(wrong))
    return out


def _stopped_early(messages: list[dict[str, str]]) -> list[dict[str, str]] | None:
    """The trajectory cut after its first tool result and closed as if done (never credited)."""
    from longcat_plugins.learning.tool_warmstart import SHORTCUT_ANSWER

    calls = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m["content"].startswith("<tool_call>")]
    if len(calls) < 2 or messages[calls[0] + 1]["role"] != "tool":
        return None
    return [dict(m) for m in messages[: calls[0] + 2]] + [{"role": "assistant", "content": SHORTCUT_ANSWER}]


def verdict_rows(rows: list[dict[str, Any]], tokenizer: Any, share: float, seed: int) -> list[dict[str, Any]]:
    """Verification conversations for ``share`` of the golden ``rows``: each picked trajectory is
    shown right (-> :data:`VERDICT_CORRECT`) or, as often, wrong (stopped early or with a copy
    error, -> :data:`VERDICT_INCORRECT`)."""
    from longcat_plugins.data.selfverify import fill_prompt

    rng = random.Random(f"tool-verdicts-{seed}")
    picked = rng.sample(rows, round(share * len(rows)))
    out = []
    for i, row in enumerate(picked):
        messages = [dict(m) for m in row["messages"]]
        candidate, verdict = messages, VERDICT_CORRECT
        if i % 2:
            wrong = _stopped_early(messages) if rng.random() < 0.5 else _copy_error(messages, rng)
            wrong = wrong or _copy_error(messages, rng) or _stopped_early(messages)
            if wrong is None:
                continue
            candidate, verdict = wrong, VERDICT_INCORRECT
        prompt = fill_prompt(VERIFY_PROMPT, messages[1]["content"], response_text(tokenizer, candidate))
        out.append(
            {
                **{k: v for k, v in row.items() if k != "messages"},
                "messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": verdict}],
            }
        )
    return out


def ensure_verdict_warm_start(warm: WarmStart, plan: VerdictPlan | None = None) -> WarmStart:
    """Build (once) ``warm`` + verdicts (see the module doc); its RL data stay ``warm``'s."""
    import pandas as pd
    from transformers import AutoTokenizer

    from longcat_plugins.learning.tool_warmstart import fitting_rows

    plan = plan or VerdictPlan()
    root = warm.root.parent / f"{warm.root.name}-{plan.key()}"
    built = WarmStart(root, root / "model", warm.train, warm.val, base=warm.model, sft=root / "sft.parquet")
    if (root / "model").exists():
        return built
    if not warm.exists():
        raise FileNotFoundError(f"warm: the tool warm start {str(warm.root)!r} is not built")
    with building(root) as tmp:
        rows = pd.read_parquet(warm.sft).to_dict("records")
        rows = [{**r, "messages": [dict(m) for m in r["messages"]]} for r in rows]
        tokenizer = AutoTokenizer.from_pretrained(warm.model)
        judged = fitting_rows(verdict_rows(rows, tokenizer, plan.verdicts, plan.seed), warm.model, plan.max_length)
        data = rows + judged
        random.Random(f"order-{plan.seed}").shuffle(data)
        pd.DataFrame(data).to_parquet(tmp / "sft.parquet")
        config = SFTConfig.for_steps(len(data), plan.sft_steps, plan.batch_size, plan.lr, plan.max_length, plan.seed)
        run_sft(warm.model, tmp / "sft.parquet", tmp / "model", config, overrides=SFT_SCHEDULE)
        meta = {"warm_start": str(warm.root), **plan.__dict__, "sft_rows": len(data), "verdict_rows": len(judged)}
        (tmp / "warmstart.json").write_text(json.dumps(meta, indent=2))
    return built


__all__ = [
    "VERDICT_CORRECT",
    "VERDICT_INCORRECT",
    "VERIFY_PROMPT",
    "VerdictPlan",
    "ensure_verdict_warm_start",
    "response_text",
    "verdict_rows",
]
