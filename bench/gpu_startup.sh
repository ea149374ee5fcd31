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
for m in torch transformers ray verl.trainer.main_ppo; do
  python3 -c "import time; t = time.perf_counter(); import $m; print('import $m: %.1f s' % (time.perf_counter() - t))" 2>/dev/null
done
python3 -X importtime -c "import verl.trainer.main_ppo" 2>"$OUT/importtime.txt" >/dev/null
sort -t'|' -k2 -n -r "$OUT/importtime.txt" | head -n 12
cp bench/results/dora_cpu.json "$OUT/dora_cpu.json"
RAY_preload_python_modules=torch,transformers timeout -k 5 $((budget - (SECONDS - start) - 10)) \
  python3 bench/bench_dora_cpu.py --device cuda --steps 2 --seeds 0 --only sync --tag _fast_start \
  --set +ray_kwargs.ray_init.include_dashboard=false --out "$OUT" --work /tmp/work >"$OUT/dora.log" 2>&1
echo "dora: rc=$?"
(cd /tmp/work && find . -name 'timed.log' | tar czf "$OUT/timed_logs.tgz" -T -)
f=$(find /tmp/work -name timed.log | head -1); [ -n "$f" ] && grep -E "ray init kwargs|Started a local Ray|create worker group|engine initialized|ready to fit|step:1 " "$f" | cut -c1-90
grep -E '^\{"device"' "$OUT/dora.log" | python3 -c 'import json,sys; [print(json.dumps(json.loads(l)["startup"])) for l in sys.stdin]'
