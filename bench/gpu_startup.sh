#!/usr/bin/env bash
# A lent GPU's short second call: where a process's start goes, and one `sync` run's start-up
# with the dashboard off (the packed Ray has no dashboard build: its start times out after 60 s)
# and Ray's worker pool preloading torch and transformers (RAY_preload_python_modules).
#   LONGCAT_PROVENANCE_COMMIT=<sent commit> LONGCAT_PROVENANCE_DIRTY=0|1 bash bench/gpu_startup.sh [budget_s]
set -uo pipefail
budget=${1:-170}
start=$SECONDS
. .device/setup.sh
python3 -m compileall -q -j 16 /tmp/site >/dev/null 2>&1
mkdir -p "$OUT" /tmp/work
python3 - <<'PY'
import json, os, subprocess, sys
sys.path.insert(0, "bench")
from provenance import provenance
record = provenance(seeds=[], command=["bash", "bench/gpu_startup.sh"])
imports = {}
for m in ("torch", "transformers", "ray", "verl.trainer.main_ppo"):
    code = f"import time; t = time.perf_counter(); import {m}; print(time.perf_counter() - t)"
    imports[m] = round(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()[-1]), 2)
    print(f"import {m}: {imports[m]} s")
prof = subprocess.run([sys.executable, "-X", "importtime", "-c", "import verl.trainer.main_ppo"], capture_output=True, text=True).stderr
rows = [l.split("|") for l in prof.splitlines() if l.startswith("import time:") and "self [us]" not in l]
top = sorted(((int(c), n.rstrip()) for _, c, n in rows), reverse=True)[:40]
out = {"provenance": record, "what": "import seconds in a fresh process (each module alone), and the largest cumulative -X importtime entries of verl.trainer.main_ppo",
       "import_s": imports, "importtime_cumulative_us": [[n, c] for c, n in top]}
open(os.path.join(os.environ["OUT"], "gpu_startup.json"), "w").write(json.dumps(out, indent=2))
PY
cp bench/results/dora_cpu.json "$OUT/dora_cpu.json"
RAY_preload_python_modules=torch,transformers timeout -k 5 $((budget - (SECONDS - start) - 10)) \
  python3 bench/bench_dora_cpu.py --device cuda --steps 2 --seeds 0 --only sync --tag _fast_start \
  --set +ray_kwargs.ray_init.include_dashboard=false --out "$OUT" --work /tmp/work >"$OUT/dora.log" 2>&1
echo "dora: rc=$?"
(cd /tmp/work && find . -name 'timed.log' | tar czf "$OUT/timed_logs.tgz" -T -)
f=$(find /tmp/work -name timed.log | head -1); [ -n "$f" ] && grep -E "ray init kwargs|Started a local Ray|create worker group|engine initialized|ready to fit|step:1 " "$f" | cut -c1-90
grep -E '^\{"device"' "$OUT/dora.log" | python3 -c 'import json,sys; [print(json.dumps(json.loads(l)["startup"])) for l in sys.stdin]'
