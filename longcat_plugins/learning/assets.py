"""Tiny, locally built assets for the CPU runtime: nothing is downloaded.

- a byte-level BPE tokenizer trained with ``tokenizers`` on the task's own strings, with a
  chat template (``"\\n"`` is one token, so verl's agent loop never loses it);
- a Llama-architecture model with random weights, saved as safetensors;
- a verl-format parquet dataset of a verifiable task (integer arithmetic).

Everything lands under one cache directory keyed by size and seed; building is idempotent.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

DATA_SOURCE = "longcat/arithmetic"
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@dataclass(frozen=True)
class ModelSize:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int

    @property
    def approx_params(self) -> int:
        h, i, n = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        return n * (4 * h * h + 3 * h * i)


SIZES: dict[str, ModelSize] = {
    "tiny": ModelSize(64, 128, 2, 4),
    # tiny's parameters in 2 heads of 32: CPU vLLM's attention kernels need a head size >= 32
    "tiny32": ModelSize(64, 128, 2, 2),
    "small": ModelSize(256, 688, 4, 4),
    "base": ModelSize(512, 1376, 8, 8),
}


def check_size(size: str) -> None:
    """Refuse a model size :data:`SIZES` does not define, naming the choices."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choices: {', '.join(SIZES)}")


@dataclass(frozen=True)
class Assets:
    root: Path
    model: Path
    train: Path
    val: Path

    def exists(self) -> bool:
        return (self.model / "config.json").exists() and self.train.exists() and self.val.exists()


@contextmanager
def building(root: Path) -> Iterator[Path]:
    """A temporary sibling directory to build ``root`` in, renamed to ``root`` only when the block
    completes: an interrupted or failed build leaves nothing half-written behind."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent)).resolve()
    try:
        yield tmp
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def default_cache_dir() -> Path:
    base = os.environ.get("LONGCAT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "longcat-plugins"
    )
    return Path(base).expanduser()


def arithmetic_problem(rng: random.Random, max_operand: int, ops: str = "+-") -> tuple[str, int]:
    """One question and its answer; ``ops`` are the operators to draw from ("+" alone: a domain of additions)."""
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    op = rng.choice(ops)
    return f"What is {a}{op}{b}? Answer with a number.", a + b if op == "+" else a - b


#: operands of the ``chain`` task are 0..CHAIN_MAX (1000 distinct questions at 9)
CHAIN_MAX = 9


def chain_problem(a: int, b: int, c: int) -> tuple[str, int]:
    """The two-step variant warm starts train on: ``a+b-c`` (harder than one operation for a
    tiny model, and every held-out question shares its structure with the training ones)."""
    return f"What is {a}+{b}-{c}? Answer with a number.", a + b - c


def answer_text(answer: int) -> str:
    """The one answer form the model is taught and the exact-match reward accepts."""
    return f"The answer is {answer}."


def task_corpus(seed: int = 0, n: int = 2000, max_operand: int = 50, task: str = "add") -> list[str]:
    """The strings the tokenizer is trained on: prompts and answers as the model will see them."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        if task == "chain":
            question, answer = chain_problem(*(rng.randint(0, CHAIN_MAX) for _ in range(3)))
        else:
            question, answer = arithmetic_problem(rng, max_operand)
        lines.append(f"<|user|>{question}</s>\n<|assistant|>{answer_text(answer)}</s>\n")
    return lines


def build_tokenizer(
    out_dir: Path,
    seed: int = 0,
    vocab_size: int = 320,
    task: str = "add",
    corpus: list[str] | None = None,
    chat_template: str = CHAT_TEMPLATE,
    space_tokens: bool = False,
) -> None:
    """Train the tokenizer on ``corpus`` (default: the strings of arithmetic ``task``) and save it with ``chat_template``.

    ``space_tokens``: a space is a token of its own, never merged into the word after it, so a
    word is the same tokens after a space as after a quote (what copying a value needs).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if space_tokens:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(" ", "isolated"), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(task_corpus(seed, task=task) if corpus is None else corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        chat_template=chat_template,
        model_max_length=1024,
    )
    fast.save_pretrained(out_dir)


def build_model(out_dir: Path, size: str, seed: int = 0, tie_embeddings: bool = False, hidden_size: int = 0) -> None:
    """A random ``size`` Llama of the tokenizer in ``out_dir``'s vocabulary, saved there.

    ``tie_embeddings``: the output layer is the input embedding (a token's logit is its embedding's
    dot product with the last hidden state), so an attention head that moves a token's embedding
    forward raises that same token's logit for every token alike: copying need not be learned per token.
    ``hidden_size`` > 0: that width instead of the size's (the MLP twice as wide, the same heads and layers).
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    spec = SIZES[size]
    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size or spec.hidden_size,
        intermediate_size=2 * hidden_size if hidden_size else spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_attention_heads,
        # the tool-agent recipe's prompts reach ~4.6K tokens: vLLM refuses a request past the
        # model's positions (transformers' RoPE runs on silently), and plain RoPE does not depend
        # on this number, so a larger one changes no weight and no output
        max_position_embeddings=8192,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie_embeddings,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)


def write_rl_rows(path: Path, problems: list[tuple[str, int]], split: str) -> None:
    """verl's RL dataset format (prompt, reward_model.ground_truth) for (question, answer) pairs."""
    import pandas as pd

    rows = [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": i},
        }
        for i, (question, answer) in enumerate(problems)
    ]
    pd.DataFrame(rows).to_parquet(path)


def build_dataset(path: Path, n: int, seed: int, split: str, max_operand: int = 50, ops: str = "+-") -> None:
    if not ops or set(ops) - set("+-"):
        raise ValueError(f"ops must be a non-empty string of '+' and '-', got {ops!r}")
    rng = random.Random(seed)
    write_rl_rows(path, [arithmetic_problem(rng, max_operand, ops) for _ in range(n)], split)


def ensure_assets(
    cache_dir: Path | None = None, size: str = "tiny", seed: int = 0, n_train: int = 256, n_val: int = 32
) -> Assets:
    """Build (once) and return the model, tokenizer and dataset for ``size``.

    Written into a temporary directory and renamed when complete, so an interrupted build
    never leaves a half-written asset set behind.
    """
    check_size(size)
    root = (cache_dir or default_cache_dir()) / f"arithmetic-{size}-seed{seed}"
    assets = Assets(root, root / "model", root / "train.parquet", root / "val.parquet")
    if assets.exists():
        return assets
    with building(root) as tmp:
        (tmp / "model").mkdir()
        build_tokenizer(tmp / "model", seed)
        build_model(tmp / "model", size, seed)
        build_dataset(tmp / "train.parquet", n_train, seed, "train")
        build_dataset(tmp / "val.parquet", n_val, seed + 1, "test")
        (tmp / "assets.json").write_text(json.dumps({"size": size, "seed": seed, **asdict(SIZES[size])}, indent=2))
    return assets
