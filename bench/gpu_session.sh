#!/usr/bin/env bash
# What one lent GPU session measures: two calls on one warm machine (the device's time is short).
#
#   bash ../shared/tools/device-pack.sh            # here, after scripts/setup-cpu.sh: writes .device/
#   # device run, carry [".device"]:
#   LONGCAT_PROVENANCE_COMMIT=<sent commit, full hash> LONGCAT_PROVENANCE_DIRTY=0|1 bash bench/gpu_session.sh dora [budget_s]
#   LONGCAT_PROVENANCE_COMMIT=<sent commit> LONGCAT_PROVENANCE_DIRTY=0|1 bash bench/gpu_session.sh startup [budget_s]
#
# dora (issue 31, item 4): bench_dora_cpu.py --device cuda --steps 8 --seeds 0,1 --overlap 6:
#   sync, then the report's hold-back rule with one engine and two, one batch in flight beyond the
#   trained one (dora_1_window_w1, dora_2_window_w1: no evictions on the CPU), trained seed by seed.
#   All six runs start up at once and each is held before its first step until all are up and
#   the runs before it have ended (bench/overlap.py): the start-ups are spent side by side and no
#   run trains beside another run's training or start-up, so two seeds should fit where one did.
#   Then, with what is left (at least 170 s), `alone`: sync, seed 0, one after another, tagged
#   _alone: the same run without five others idle beside it, which says what they cost on the
#   GPU host. The replay buffer polls every 50 ms (the bench's default; every run before d90aeec
#   kept verl's 2 s). Results are written after every run; what budget_s (default 540) cuts off
#   is lost. If the overlapped bench fails before any run trained, the rest of the budget runs
#   seed 0 one after another (--overlap 1) instead.
# alone: only that reference run (a second call).
# dora_serial: the previous plan, one run after another, seed 0, with Ray's prestarted workers
#   preloading verl (--preload 1): sync, dora_2_window_w1, dora_1_window_w1, dora_2_window, dora_1_window.
# startup (issue 34, goal 3): 2 steps each of dora_1 (standalone replicas prestarted beside the
#   trainer's engines, the default), dora_1_serial (verl's serial order) and sync, with the preload,
#   into dora_startup_cpu.json (--name; its CPU records kept): the prestart A/B on the GPU host.
# taskrunner (issue 34, goal 3): 2 steps each of sync and dora_1 with verl's TaskRunner in its own
#   actor (--task-runner actor, tagged _actor), then the same in the driver process (the default),
#   into taskrunner_cpu.json (its CPU records kept): runtime/in_driver.py's A/B on the GPU host.
# ahead (issue 34, goal 3): 2 steps of sync in verl's start-up order (--agent-loops verl --hf-servers
#   verl, tagged _verl_order), then with its hf server started beside the engines and its agent-loop
#   workers beside the replica (the defaults), into start_ahead.json: runtime/servers_ahead.py's and
#   schedulers/agent_loops_ahead.py's A/B on the GPU host (their CPU A/Bs: hf_servers_cpu.json,
#   agent_loops_cpu.json).
# Each merges into a copy of the committed results file (other records kept; the second call's
# copy is the first call's output when it is brought back in place) and bring the runs' timed logs
# back ($OUT/timed_logs_<what>.tgz).
# The packed site has no bytecode (device-pack installs with --no-compile); compile it first, as
# a pip install does, so the first process of the first run does not pay for everyone.
set -uo pipefail
what=${1:?dora, alone, dora_serial, startup, taskrunner or ahead}
budget=${2:-540}
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
. .device/setup.sh
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
t=$SECONDS; python3 -m compileall -q -j 16 /tmp/site >/dev/null 2>&1; echo "compileall: $((SECONDS - t)) s"
mkdir -p "$OUT" /tmp/work
cp bench/results/dora_cpu.json bench/results/dora_startup_cpu.json bench/results/taskrunner_cpu.json "$OUT/"
case "$what" in
  dora) args=(--steps 8 --seeds 0,1 --overlap 6 --only sync dora_1_window_w1 dora_2_window_w1) ;;
  alone) args=(--steps 8 --seeds 0 --only sync --tag _alone) ;;
  dora_serial) args=(--steps 8 --seeds 0 --preload 1 --only sync dora_2_window_w1 dora_1_window_w1 dora_2_window dora_1_window) ;;
  startup) args=(--steps 2 --seeds 0 --preload 1 --name dora_startup_cpu --only dora_1 dora_1_serial sync) ;;
  taskrunner) args=(--steps 2 --seeds 0 --name taskrunner_cpu --task-runner actor --tag _actor --only sync dora_1) ;;
  ahead) args=(--steps 2 --seeds 0 --name start_ahead --agent-loops verl --hf-servers verl --tag _verl_order --only sync) ;;
  *) echo "unknown: $what (dora, alone, dora_serial, startup, taskrunner or ahead)"; exit 2 ;;
esac
t=$SECONDS
timeout -k 20 $(( $(left) - 25 )) python3 bench/bench_dora_cpu.py --device cuda "${args[@]}" \
  --out "$OUT" --work /tmp/work >"$OUT/dora_$what.log" 2>&1
rc=$?
echo "dora $what: rc=$rc in $((SECONDS - t)) s"
if [ "$what" = dora ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && ! grep -q '^{"device"' "$OUT/dora_$what.log" \
  && [ "$(left)" -gt 240 ]; then
  tail -n 20 "$OUT/dora_$what.log"
  echo "the overlapped runs failed: seed 0 one after another with the $(left) s left"
  t=$SECONDS
  timeout -k 20 $(( $(left) - 25 )) python3 bench/bench_dora_cpu.py --device cuda --steps 8 --seeds 0 \
    --only sync dora_1_window_w1 dora_2_window_w1 --out "$OUT" --work /tmp/work >"$OUT/dora_fallback.log" 2>&1
  echo "dora fallback: rc=$? in $((SECONDS - t)) s"
elif [ "$what" = dora ] && [ "$(left)" -gt 170 ]; then
  t=$SECONDS
  timeout -k 20 $(( $(left) - 25 )) python3 bench/bench_dora_cpu.py --device cuda --steps 8 --seeds 0 --only sync \
    --tag _alone --out "$OUT" --work /tmp/work >"$OUT/dora_alone_ref.log" 2>&1
  echo "alone: rc=$? in $((SECONDS - t)) s"
elif [ "$what" = ahead ] && [ "$(left)" -gt 150 ]; then
  t=$SECONDS
  timeout -k 20 $(( $(left) - 25 )) python3 bench/bench_dora_cpu.py --device cuda --steps 2 --seeds 0 \
    --name start_ahead --only sync --out "$OUT" --work /tmp/work >"$OUT/dora_ahead_defaults.log" 2>&1
  echo "started ahead: rc=$? in $((SECONDS - t)) s"
elif [ "$what" = taskrunner ] && [ "$(left)" -gt 150 ]; then
  t=$SECONDS
  timeout -k 20 $(( $(left) - 25 )) python3 bench/bench_dora_cpu.py --device cuda --steps 2 --seeds 0 \
    --name taskrunner_cpu --only sync dora_1 --out "$OUT" --work /tmp/work >"$OUT/dora_taskrunner_driver.log" 2>&1
  echo "taskrunner in the driver: rc=$? in $((SECONDS - t)) s"
fi
cat "$OUT"/dora_*.log | grep -E '^\{"device"' | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    s = r.get("startup", {})
    print(r["run"], "tok/s %.0f" % (r["tokens_per_s"] or 0), "len %.1f" % (r["trained_len_mean"] or 0),
          "censored %.2f" % r["censored_share"], "process %.0f s" % r["process_s"], "startup", s.get("startup_s"),
          "preload", s.get("ray_preload"), "task runner", s.get("task_runner"), "held", s.get("gate_wait_s"), "beside", r.get("overlap", {}).get("others_alive"))
    print("   ", json.dumps(s.get("phases_s")))
'
tail -n 6 "$OUT/dora_$what.log"
(cd /tmp/work && find . -name 'timed.log' -o -name 'metrics.jsonl' -o -name 'dora_trace.jsonl' | tar czf "$OUT/timed_logs_$what.tgz" -T -)
ls -la "$OUT"
