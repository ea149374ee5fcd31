"""The streaming engine on real safetensors directories: layout, dtypes, determinism, tied and
non-float tensors, and every way bad input must fail before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_fusion_support import leftovers, random_family, read_checkpoint, save_checkpoint, write_family

from longcat_plugins import FusionMethod, hookimpl
from longcat_plugins.fusion import CheckpointError, InputError, MismatchError, OutputError, fuse
from longcat_plugins.fusion.contract import TensorContext
from longcat_plugins.testing import HostFactory


def digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@pytest.fixture
def family(tmp_path: Path) -> tuple[dict, list[dict], Path, list[Path]]:
    base, experts = random_family(n_experts=3, seed=2)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=3)
    return base, experts, base_dir, expert_dirs


def test_output_has_the_base_layout_and_side_files(family: tuple, tmp_path: Path) -> None:
    _, _, base_dir, expert_dirs = family
    out = tmp_path / "out" / "fused"
    report = fuse(base_dir, expert_dirs, out, params={"drop_rate": 0.5}, seed=0)
    names = {p.name for p in out.iterdir()}
    assert names == {p.name for p in base_dir.iterdir()} | {"fusion.json"}
    assert (out / "model.safetensors.index.json").read_text() == (base_dir / "model.safetensors.index.json").read_text()
    for shard in base_dir.glob("*.safetensors"):
        # same header bytes: same tensors, dtypes, shapes, offsets and metadata in every shard
        with open(shard, "rb") as a, open(out / shard.name, "rb") as b:
            n = int.from_bytes(a.read(8), "little")
            assert b.read(8 + n)[8:] == a.read(n)
        assert (out / shard.name).stat().st_size == shard.stat().st_size
    provenance = json.loads((out / "fusion.json").read_text())
    assert provenance["method"] == "longcat" and provenance["params"]["drop_rate"] == 0.5
    assert [e["path"] for e in provenance["experts"]] == [str(p) for p in expert_dirs]
    assert report.tensors_merged == 7 and report.tensors_copied == 0
    assert all(0.4 < e.fractions["dropped"] < 0.6 for e in report.experts)
    assert [round(e.delta_norm, 6) for e in report.experts] == sorted(round(e.delta_norm, 6) for e in report.experts)
    assert leftovers(out.parent) == []


@pytest.mark.parametrize(
    ("method", "params"),
    [("longcat", {"normalize": "global"}), ("longcat", {"normalize": "tensor"}), ("ties", {}), ("elementwise_max", {})],
)
def test_reported_task_vector_norms(
    family: tuple, tmp_path: Path, method: str, params: dict, longcat_host_factory: HostFactory
) -> None:
    """‖θ_i − θ_base‖ over every tensor, whether the method reports Σδ² itself or the engine computes it."""
    base, experts, base_dir, expert_dirs = family
    host = longcat_host_factory(("toy", _ToyPlugin()), builtins=True)
    report = fuse(base_dir, expert_dirs, tmp_path / "out", method=method, params=params, host=host)
    for rep, expert in zip(report.experts, experts, strict=True):
        want = sum(float(((expert[n].double() - b.double()) ** 2).sum()) for n, b in base.items()) ** 0.5
        assert rep.delta_norm == pytest.approx(want, rel=1e-5)


def test_fixed_seed_reproduces_bit_identical_files(family: tuple, tmp_path: Path) -> None:
    _, _, base_dir, expert_dirs = family
    params = {"normalize": "global", "drop_rate": 0.5, "erase": True}
    fuse(base_dir, expert_dirs, tmp_path / "a", params=params, seed=11)
    fuse(base_dir, expert_dirs, tmp_path / "b", params=params, seed=11, prefetch=True)
    fuse(base_dir, expert_dirs, tmp_path / "c", params=params, seed=12)
    a, b, c = (digest(tmp_path / x) for x in "abc")
    assert a == b
    shards = [n for n in a if n.endswith(".safetensors")]
    assert all(a[n] != c[n] for n in shards), "another seed must draw other masks"


ODD_SHAPES: dict[str, tuple[int, ...]] = {
    "model.embed_tokens.weight": (101, 13),
    "model.layers.0.self_attn.q_proj.weight": (37, 29),
    "model.layers.0.mlp.up_proj.weight": (7, 11, 13),
    "model.layers.0.input_layernorm.weight": (1031,),
    "model.norm.weight": (1,),
    "lm_head.weight": (101, 13),
}
STREAMED_METHODS = [
    ("longcat", {}),
    ("longcat", {"normalize": "tensor", "drop_rate": 0.3}),
    ("longcat", {"normalize": "none", "drop_rate": 0.4, "majority": "count"}),
    ("task_arithmetic", {"scale": 0.7}),
    ("ties", {"density": 0.3}),
    ("dare_linear", {"density": 0.7}),
    ("dare_ties", {"density": 0.5, "normalize": True}),
    ("breadcrumbs", {"density": 0.8, "gamma": 0.05}),
    ("sce", {"select_topk": 0.5}),
]


@pytest.mark.parametrize(("method", "params"), STREAMED_METHODS, ids=[f"{m}-{p}" for m, p in STREAMED_METHODS])
def test_chunks_workers_and_read_ahead_change_no_bit(tmp_path: Path, method: str, params: dict) -> None:
    """The streamed path (chunks that do not divide the odd tensor sizes, two workers, read-ahead)
    writes byte-for-byte the files of the plain one (whole tensors, one thread, no read-ahead),
    and reports the same fractions; experts sharded unlike the base."""
    base, experts = random_family(n_experts=3, shapes=ODD_SHAPES, seed=9)
    base_dir, expert_dirs = write_family(
        tmp_path / "in", base, experts, shards=3, expert_shards=2, dtype=torch.bfloat16
    )
    plain = fuse(base_dir, expert_dirs, tmp_path / "plain", method=method, params=params, seed=5,
                 workers=1, chunk_elements=None, prefetch=False)  # fmt: skip
    streamed = fuse(base_dir, expert_dirs, tmp_path / "streamed", method=method, params=params, seed=5,
                    workers=2, chunk_elements=97, prefetch=True)  # fmt: skip
    assert digest(tmp_path / "plain") == digest(tmp_path / "streamed")
    for a, b in zip(plain.experts, streamed.experts, strict=True):
        assert a.fractions == b.fractions
        assert a.delta_norm == pytest.approx(b.delta_norm, rel=1e-6)


def test_draws_do_not_depend_on_sharding(tmp_path: Path) -> None:
    base, experts = random_family(n_experts=2, seed=4)
    one = write_family(tmp_path / "one", base, experts, shards=1)
    many = write_family(tmp_path / "many", base, experts, shards=4, expert_shards=3)
    params = {"drop_rate": 0.5}
    fuse(one[0], one[1], tmp_path / "out1", params=params, seed=3)
    fuse(many[0], many[1], tmp_path / "out4", params=params, seed=3)
    assert (tmp_path / "out1" / "model.safetensors").exists()
    assert len(list((tmp_path / "out4").glob("*.safetensors"))) == 4
    a, b = read_checkpoint(tmp_path / "out1"), read_checkpoint(tmp_path / "out4")
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dtypes_are_computed_in_float32_and_written_back(tmp_path: Path, dtype: torch.dtype) -> None:
    base, experts = random_family(n_experts=2, seed=5)
    base_dir, expert_dirs = write_family(tmp_path, base, experts, shards=2, dtype=dtype)
    fuse(base_dir, [(expert_dirs[0], 0.7), (expert_dirs[1], 0.6)], tmp_path / "out", method="task_arithmetic")
    got = read_checkpoint(tmp_path / "out")
    for name, b in base.items():
        b = b.to(dtype).double()
        want = b + sum(w * (e[name].to(dtype).double() - b) for w, e in zip([0.7, 0.6], experts, strict=True))
        assert got[name].dtype == dtype
        # float32 arithmetic (absolute error ~1e-7 on O(1) values), then one rounding to the output dtype
        ulp = {torch.bfloat16: 2**-7, torch.float16: 2**-10, torch.float32: 2**-22}[dtype]
        torch.testing.assert_close(got[name].double(), want, rtol=ulp, atol=1e-6, msg=name)


def test_non_float_tensors_are_copied_from_the_base(tmp_path: Path) -> None:
    base, experts = random_family(n_experts=2, seed=6)
    base["model.rotary.inv_freq_ids"] = torch.arange(8, dtype=torch.int64)
    experts[0]["model.rotary.inv_freq_ids"] = torch.arange(8, dtype=torch.int64)
    experts[1]["model.rotary.inv_freq_ids"] = torch.arange(8, dtype=torch.int64) * 2
    base_dir, expert_dirs = write_family(tmp_path, base, experts, shards=2)
    report = fuse(base_dir, expert_dirs, tmp_path / "out", params={"drop_rate": 0.3})
    got = read_checkpoint(tmp_path / "out")
    assert torch.equal(got["model.rotary.inv_freq_ids"], base["model.rotary.inv_freq_ids"])
    assert report.tensors_copied == 1
    assert any("model.rotary.inv_freq_ids" in w and "experts[1]" in w for w in report.warnings)


def test_tied_embeddings_stay_tied(tmp_path: Path) -> None:
    base, experts = random_family(n_experts=2, seed=8)
    for d in (base, *experts):
        d["lm_head.weight"] = d["model.embed_tokens.weight"].clone()
    config = {"model_type": "toy", "tie_word_embeddings": True}
    base_dir, expert_dirs = write_family(tmp_path, base, experts, shards=3, config=config)
    fuse(base_dir, expert_dirs, tmp_path / "out", params={"drop_rate": 0.5}, seed=1)
    got = read_checkpoint(tmp_path / "out")
    assert torch.equal(got["lm_head.weight"], got["model.embed_tokens.weight"])
    assert not torch.equal(got["lm_head.weight"], base["lm_head.weight"])


def test_mismatches_are_all_listed_and_nothing_is_written(tmp_path: Path) -> None:
    base, experts = random_family(n_experts=3, seed=9)
    experts[0]["model.norm.weight"] = torch.zeros(17)
    del experts[1]["model.layers.0.mlp.experts.1.up_proj.weight"]
    experts[1]["model.layers.0.mlp.experts.2.up_proj.weight"] = torch.zeros(24, 16)
    experts[2] = {n: t.to(torch.bfloat16) if n == "lm_head.weight" else t for n, t in experts[2].items()}
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    out = tmp_path / "out" / "fused"
    with pytest.raises(MismatchError) as info:
        fuse(base_dir, expert_dirs, out)
    problems = info.value.problems
    assert len(problems) == 4, problems
    text = str(info.value)
    assert "experts[0]" in text and "model.norm.weight has shape [17], the base has [16]" in text
    assert "experts[1]" in text and "model.layers.0.mlp.experts.1.up_proj.weight is missing" in text
    assert "model.layers.0.mlp.experts.2.up_proj.weight is not in the base" in text
    assert "experts[2]" in text and "lm_head.weight has dtype BF16, the base has F32" in text
    assert "nothing was written" in text
    assert not (tmp_path / "out").exists()


def test_missing_shard_and_truncated_file_are_reported_together(family: tuple, tmp_path: Path) -> None:
    _, _, base_dir, expert_dirs = family
    (expert_dirs[0] / "model-00002-of-00003.safetensors").unlink()
    victim = expert_dirs[2] / "model-00003-of-00003.safetensors"
    os.truncate(victim, victim.stat().st_size - 10)
    out = tmp_path / "out"
    with pytest.raises(CheckpointError) as info:
        fuse(base_dir, expert_dirs, out)
    text = str(info.value)
    assert "experts[0]" in text and "shard model-00002-of-00003.safetensors listed in" in text and "is missing" in text
    assert "experts[2]" in text and "model-00003-of-00003.safetensors: truncated" in text and "10 bytes missing" in text
    assert not out.exists()


def test_file_problems_mismatches_and_output_are_listed_in_one_run(tmp_path: Path) -> None:
    """A broken shard in one expert must not hide shape mismatches (in its readable shards and in
    the other experts) nor an existing output: one run lists them all."""
    base, experts = random_family(n_experts=2, seed=3)
    experts[0]["model.norm.weight"] = torch.zeros(17)  # shard 2 of 3, readable
    experts[1]["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(16, 8)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=3)
    (expert_dirs[0] / "model-00003-of-00003.safetensors").unlink()
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InputError) as info:
        fuse(base_dir, expert_dirs, out)
    err = info.value
    assert isinstance(err, CheckpointError) and isinstance(err, MismatchError) and isinstance(err, OutputError)
    text = str(err)
    assert len(err.problems) == 4, err.problems
    assert "experts[0]" in text and "model-00003-of-00003.safetensors listed in" in text
    assert "model.norm.weight has shape [17], the base has [16]" in text
    assert "experts[1]" in text and "q_proj.weight has shape [16, 8], the base has [16, 16]" in text
    assert "already exists" in text and "nothing was written" in text
    assert "is missing (the base has it)" not in text  # lm_head sits in the unreadable shard: not a mismatch
    assert list(out.iterdir()) == []


def test_unusable_checkpoint_directories(tmp_path: Path) -> None:
    base, experts = random_family(n_experts=1, seed=1)
    base_dir, _ = write_family(tmp_path, base, experts, shards=2)
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(CheckpointError) as info:
        fuse(base_dir, [empty, tmp_path / "nope", tmp_path / "garbage"], tmp_path / "out")
    text = str(info.value)
    assert "experts[0]" in text and "no model.safetensors or model.safetensors.index.json" in text
    assert "experts[1]" in text and "no such directory" in text
    assert "experts[2]" in text and "corrupt header" in text
    assert not (tmp_path / "out").exists()


def test_existing_output_is_refused_unless_overwrite(family: tuple, tmp_path: Path) -> None:
    _, _, base_dir, expert_dirs = family
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputError, match="already exists"):
        fuse(base_dir, expert_dirs, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    fuse(base_dir, expert_dirs, out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "fusion.json").exists()
    assert leftovers(tmp_path) == []
    with pytest.raises(OutputError, match="would replace the input"):
        fuse(base_dir, expert_dirs, base_dir, overwrite=True)
    with pytest.raises(OutputError, match="would replace the input"):
        fuse(base_dir, expert_dirs, base_dir.parent, overwrite=True)
    assert (base_dir / "model.safetensors.index.json").exists()


def _failing_method(fail_after: int, exc: type[BaseException]) -> FusionMethod:
    calls = {"n": 0}

    def explode(
        base: torch.Tensor, experts: list[torch.Tensor], weights: list[float], ctx: TensorContext, *, alpha: float = 0.5
    ) -> tuple[torch.Tensor, dict]:
        """Fails mid-way through a merge."""
        if ctx.name != "<probe>":
            calls["n"] += 1
            if calls["n"] > fail_after:
                raise exc("boom in the middle")
        return base, {}

    return FusionMethod("explode", explode)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_interrupted_merge_leaves_no_output(
    family: tuple, tmp_path: Path, exc: type[BaseException], longcat_host_factory: HostFactory
) -> None:
    _, _, base_dir, expert_dirs = family
    plugin = SimpleNamespace(register_fusion_methods=hookimpl(lambda: [_failing_method(3, exc)]))
    plugin.register_fusion_methods.__name__ = "register_fusion_methods"
    host = longcat_host_factory(("exploding", plugin))
    out = tmp_path / "made" / "for" / "out"
    with pytest.raises(exc, match="boom"):
        fuse(base_dir, expert_dirs, out, method="explode", host=host)
    assert not (tmp_path / "made").exists(), "directories created for the output are removed too"
    assert leftovers(tmp_path) == []


def elementwise_max(
    base: torch.Tensor, experts: list[torch.Tensor], weights: list[float], ctx: TensorContext, *, floor: float = -1e9
) -> tuple[torch.Tensor, dict]:
    """Per element, the largest expert value, at least ``floor`` (a toy third-party method)."""
    stacked = torch.stack(experts)
    return torch.maximum(stacked.max(dim=0).values, torch.tensor(floor)), {"chosen": [0.0] * len(experts)}


def real_tensors_only(
    base: torch.Tensor, experts: list[torch.Tensor], weights: list[float], ctx: TensorContext
) -> tuple[torch.Tensor, dict]:
    """Fails on the engine's one-element probe (as a method needing matrices would), fine otherwise."""
    if base.numel() == 1:
        raise RuntimeError("cannot work on a single element")
    return experts[0], {}


class _ToyPlugin:
    @hookimpl
    def register_fusion_methods(self) -> list[FusionMethod]:
        return [FusionMethod("elementwise_max", elementwise_max), FusionMethod("first_expert", real_tensors_only)]


def test_third_party_method_through_the_hook(family: tuple, tmp_path: Path, longcat_host_factory: HostFactory) -> None:
    base, experts, base_dir, expert_dirs = family
    host = longcat_host_factory(("toy", _ToyPlugin()), builtins=True)
    assert {c.name for c in host.components("fusion")} == {
        "longcat",
        "task_arithmetic",
        "ties",
        "dare_linear",
        "dare_ties",
        "breadcrumbs",
        "sce",
        "elementwise_max",
        "first_expert",
    }
    report = fuse(base_dir, expert_dirs, tmp_path / "out", method="elementwise_max", params={"floor": 0.0}, host=host)
    got = read_checkpoint(tmp_path / "out")
    for name in base:
        want = torch.stack([e[name] for e in experts]).max(dim=0).values.clamp(min=0.0)
        assert torch.equal(got[name], want), name
    assert report.method == "elementwise_max" and report.experts[0].fractions == {"chosen": 0.0}
    # a method that cannot run on the parameter probe is not refused for it
    fuse(base_dir, expert_dirs, tmp_path / "first", method="first_expert", host=host)
    first = read_checkpoint(tmp_path / "first")
    assert all(torch.equal(first[n], experts[0][n]) for n in base)


def test_fused_checkpoint_loads_with_transformers(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path / "base", max_shard_size="20KB")
    assert (tmp_path / "base" / "model.safetensors.index.json").exists()
    state = read_checkpoint(tmp_path / "base")
    experts = []
    for i in range(2):
        torch.manual_seed(i + 1)
        tensors = {n: (t.float() + 0.01 * torch.randn(t.shape)).to(t.dtype) for n, t in state.items()}
        experts.append(
            save_checkpoint(
                tmp_path / f"e{i}", tensors, config=json.loads((tmp_path / "base" / "config.json").read_text())
            )
        )
    fuse(tmp_path / "base", experts, tmp_path / "fused", params={"drop_rate": 0.3})
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "fused")
    fused = read_checkpoint(tmp_path / "fused")
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, fused["model.layers.1.mlp.down_proj.weight"])
    out = model(torch.tensor([[1, 2, 3]])).logits
    assert out.shape == (1, 3, 64) and torch.isfinite(out).all()
