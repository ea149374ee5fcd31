"""verl's SFT trainer on the CPU runtime (:mod:`longcat_plugins.learning.sft`): bad input is
refused in the driver, naming the argument, and leaves nothing behind."""

from __future__ import annotations

import socket
from pathlib import Path

import pandas as pd
import pytest

from longcat_plugins.learning import sft
from longcat_plugins.learning.sft import SFTConfig, SFTError, build_command, check_sft_inputs, run_sft


def _messages(path: Path) -> Path:
    rows = [{"messages": [{"role": "user", "content": "1+1?"}, {"role": "assistant", "content": "2"}]}]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _model(path: Path, nbytes: int = 4000) -> Path:
    path.mkdir()
    (path / "config.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"\0" * nbytes)
    return path


def test_not_a_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(SFTError, match=r"base_model: .* \(no config.json\)"):
        run_sft(tmp_path, _messages(tmp_path / "d.parquet"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_no_messages_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    pd.DataFrame([{"prompt": "x"}]).to_parquet(bad)
    with pytest.raises(SFTError, match=r"train_files: .*bad.parquet.* no 'messages' column"):
        check_sft_inputs(_model(tmp_path / "m"), [bad])


def test_missing_parquet(tmp_path: Path) -> None:
    with pytest.raises(SFTError, match=r"train_files: .*nope.parquet.* does not exist"):
        check_sft_inputs(_model(tmp_path / "m"), [tmp_path / "nope.parquet"])


def test_model_too_large_for_free_ram(tmp_path: Path) -> None:
    model = _model(tmp_path / "m", nbytes=4 * 1000)  # 1000 fp32 parameters -> 16 kB for SFT
    check_sft_inputs(model, [_messages(tmp_path / "d.parquet")], available_bytes=16_000)
    with pytest.raises(SFTError, match=r"base_model: SFT of .* needs about .* GiB .* free"):
        check_sft_inputs(model, [_messages(tmp_path / "d.parquet")], available_bytes=15_999)


def test_existing_out_is_never_overwritten(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep").write_text("x")
    with pytest.raises(SFTError, match=r"out: .* already exists"):
        run_sft(_model(tmp_path / "m"), _messages(tmp_path / "d.parquet"), tmp_path / "out")
    assert (tmp_path / "out" / "keep").read_text() == "x"


def test_failed_child_leaves_nothing(tmp_path: Path) -> None:
    """A real verl child that fails (the 'model' is not loadable): a clear error, no output dir,
    no temporary directory left behind."""
    with pytest.raises(SFTError, match=r"verl's SFT trainer failed \(exit [1-9]"):
        run_sft(_model(tmp_path / "m"), _messages(tmp_path / "d.parquet"), tmp_path / "out", SFTConfig(epochs=1))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet", "m"]


def test_command_is_verl_sft_trainer_on_the_cpu(tmp_path: Path) -> None:
    cmd = build_command(tmp_path / "m", [tmp_path / "a.parquet"], tmp_path / "w", SFTConfig(lr=3e-3, epochs=2))
    assert cmd[1:3] == ["-m", "verl.trainer.sft_trainer"]
    assert "engine.strategy=fsdp2" in cmd and "trainer.device=cpu" in cmd
    assert "optim.lr=0.003" in cmd and "trainer.total_epochs=2" in cmd
    assert "checkpoint.save_contents=[hf_model]" in cmd


def test_cached_dataset_gives_the_parents_items(tmp_path: Path) -> None:
    """The SFT command's dataset (each example tokenized once) yields, on every draw, exactly
    the tensors verl's own ``MultiTurnSFTDataset`` does, and copies the caller may change."""
    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    from longcat_plugins.learning.arithmetic_warmstart import split_questions, write_sft_parquet
    from longcat_plugins.learning.assets import build_tokenizer
    from longcat_plugins.learning.sft_dataset import CachedMultiTurnSFTDataset

    build_tokenizer(tmp_path, 0, task="chain")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    data = tmp_path / "sft.parquet"
    write_sft_parquet(data, split_questions(0)[0][:40], seed=0)
    config = OmegaConf.create({"max_length": 48})
    plain = MultiTurnSFTDataset([str(data)], tokenizer, config)
    cached = CachedMultiTurnSFTDataset([str(data)], tokenizer, config)
    assert len(cached) == len(plain) == 40
    for _ in range(2):  # the first pass fills the cache, the second reads it
        for i in range(len(plain)):
            want, got = plain[i], cached[i]
            assert want.keys() == got.keys()
            for key in want:
                assert torch.equal(want[key], got[key]), (i, key)
    first = cached[3]
    first["input_ids"].zero_()
    assert torch.equal(cached[3]["input_ids"], plain[3]["input_ids"])
    cmd = build_command(tmp_path / "m", [data], tmp_path / "w", SFTConfig())
    assert "data.custom_cls.path=pkg://longcat_plugins.learning.sft_dataset" in cmd
    assert "data.custom_cls.name=CachedMultiTurnSFTDataset" in cmd


def test_the_rendezvous_port_is_outside_the_ephemeral_range_and_free() -> None:
    """Ports the kernel hands out for port 0 (Ray's, vLLM's, a parallel run's) come from the
    ephemeral range; the child's rendezvous port is picked below it, where none of them land."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(20):
        port = sft._free_port()
        assert 20000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def _ports_then(monkeypatch: pytest.MonkeyPatch, taken: int, busy_calls: int) -> list[int]:
    """Make the first ``busy_calls`` port choices ``taken`` (a port another process listens on)."""
    real, calls = sft._free_port, []

    def choose() -> int:
        calls.append(1)
        return taken if len(calls) <= busy_calls else real()

    monkeypatch.setattr(sft, "_free_port", choose)
    return calls


@pytest.mark.parametrize("busy_calls", [1, sft.PORT_ATTEMPTS])
def test_a_child_that_loses_its_port_is_started_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, busy_calls: int
) -> None:
    """A real verl child whose rendezvous port another process took between the check and its
    bind (seen in CI: EADDRINUSE) is started again on a new port, up to PORT_ATTEMPTS times;
    then the error is the child's own. Here the model is not loadable, so the run that gets a
    port fails on the model, not on the port."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        calls = _ports_then(monkeypatch, other.getsockname()[1], busy_calls)
        with pytest.raises(SFTError, match=r"verl's SFT trainer failed \(exit [1-9]") as failed:
            run_sft(_model(tmp_path / "m"), _messages(tmp_path / "d.parquet"), tmp_path / "out", SFTConfig(epochs=1))
    if busy_calls < sft.PORT_ATTEMPTS:
        assert len(calls) == busy_calls + 1 and "EADDRINUSE" not in str(failed.value)
    else:
        assert len(calls) == sft.PORT_ATTEMPTS and "EADDRINUSE" in str(failed.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet", "m"]
