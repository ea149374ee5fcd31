#!/usr/bin/env bash
# Set up a CPU-only development environment in .venv (idempotent; re-running only checks).
# torch is pinned to the local CPU build through constraints-cpu.txt: an unpinned torch
# would pull gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
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
