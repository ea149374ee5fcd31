#!/usr/bin/env bash
# Set up a CPU-only development environment in .venv (idempotent; re-running only checks).
# torch is pinned to the local CPU build through constraints-cpu.txt: an unpinned torch
# would pull gigabytes of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -m pip install -q -c constraints-cpu.txt -e ".[dev]" 2>&1 | { grep -v "^WARNING: Location" || true; }
.venv/bin/python -c "import torch, verl, longcat_plugins; print(f'longcat-plugins {longcat_plugins.__version__} on verl {verl.__version__}, torch {torch.__version__}')"
