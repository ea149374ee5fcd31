#!/usr/bin/env bash
# What one lent GPU session measures, in one call (the device's time is short: one start, one run).
#
#   bash ../shared/tools/device-pack.sh            # here, after scripts/setup-cpu.sh: writes .device/
#   # device run, carry [".device"]:
#   LONGCAT_PROVENANCE_COMMIT=<sent commit> LONGCAT_PROVENANCE_DIRTY=0|1 bash bench/gpu_session.sh [budget_s]
#
# In order, each cut off by what is left of budget_s (default 560), so what finished comes back:
# 1. bench_losses.py --device cuda -> $OUT/losses_cuda.json (issue 34, goal 1);
# 2. bench_dora_cpu.py --device cuda (sync, then the admission and replay runs, then dora_1; 8 steps, seed 0)
#    -> $OUT/dora_cpu.json, merged into a copy of the committed file (its CPU records kept), with
#    each run's start-up phases; the runs' timed logs -> $OUT/timed_logs.tgz.
# The packed site has no bytecode (device-pack installs with --no-compile); compile it first, as
# a pip install does, so the first process of the first run does not pay for everyone.
set -uo pipefail
budget=${1:-560}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
. .device/setup.sh
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, torch.version.cuda)"
t=$SECONDS; python3 -m compileall -q -j 16 /tmp/site >/dev/null 2>&1; echo "compileall: $((SECONDS - t)) s"
mkdir -p "$OUT" /tmp/work
cp bench/results/dora_cpu.json "$OUT/dora_cpu.json"
t=$SECONDS
timeout -k 5 $(( $(left) < 150 ? $(left) : 150 )) python3 bench/bench_losses.py --device cuda --reps 60 \
  --out "$OUT/losses_cuda.json" >"$OUT/losses.log" 2>&1
echo "losses: rc=$? in $((SECONDS - t)) s"; tail -n 25 "$OUT/losses.log"
t=$SECONDS
timeout -k 10 $(( $(left) - 20 )) python3 bench/bench_dora_cpu.py --device cuda --steps 8 --seeds 0 \
  --only sync dora_1_window dora_1_length dora_1_replay dora_1 --out "$OUT" --work /tmp/work >"$OUT/dora.log" 2>&1
echo "dora: rc=$? in $((SECONDS - t)) s"
grep -E '^\{"device"' "$OUT/dora.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    s = r.get("startup", {})
    print(r["run"], "tok/s %.0f" % (r["tokens_per_s"] or 0), "len %.1f" % (r["trained_len_mean"] or 0),
          "censored %.2f" % r["censored_share"], "process %.0f s" % r["process_s"], "startup", s.get("startup_s"),
          "first_step_extra", s.get("first_step_extra_s"))
    print("   ", json.dumps(s.get("phases_s")))
'
tail -n 8 "$OUT/dora.log"
(cd /tmp/work && find . -name 'timed.log' -o -name 'metrics.jsonl' -o -name 'dora_trace.jsonl' | tar czf "$OUT/timed_logs.tgz" -T -)
ls -la "$OUT"
