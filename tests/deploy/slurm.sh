#!/usr/bin/env bash
# The workers on Slurm (deploy/slurm/): a real one-node Slurm cluster
# (scripts/slurm-local), a coordinator with a short lease on loopback, and a
# fleet of three workers submitted through deploy/slurm/forktrial-slurm as a
# job array. A first batch runs to completion; in the middle of a second, one
# array task is cancelled (scancel: SIGTERM to the worker and its trials'
# children): its worker says goodbye, so the coordinator shows it lost before
# its lease could have lapsed, and the batch still ends with every trial
# reconciled exactly once, the lost worker's trials run again elsewhere. Then
# everything goes:
# no Slurm, munge or forktrial process and no file is left behind.
# shellcheck source=tests/deploy/lib.sh
source "$(dirname "$0")/lib.sh"

need_root
for program in munged mungekey slurmctld slurmd sbatch squeue scancel scontrol; do
  command -v "$program" >/dev/null ||
    skip "$program is not installed: scripts/install-deps installs slurmctld slurmd slurm-client munge"
done

slurm_local=$FORKTRIAL_SOURCE/scripts/slurm-local
fleet=$FORKTRIAL_SOURCE/deploy/slurm/forktrial-slurm
cluster=$TMPDIR/slurm
store=$TMPDIR/store
logs=$TMPDIR/logs
caches=$TMPDIR/caches
work=$TMPDIR/work
mkdir -p "$logs" "$caches" "$work"
cpus_per_worker=2
# The default lease: a cancelled worker shown lost before it could lapse was
# lost by its goodbye.
lease=30

# Slurm and munge daemons that ran before this test are not its to judge.
daemon_pids() { ps -e -o pid=,comm= | awk '$2 ~ /^(slurmctld|slurmd|slurmstepd|munged)$/ {print $1}'; }
daemons_before=$(daemon_pids | tr '\n' ' ')

# The Slurm and munge daemons this test started (not there before it).
new_daemon_pids() {
  local pid
  for pid in $(daemon_pids); do
    case " $daemons_before " in *" $pid "*) continue ;; esac
    echo "$pid"
  done
}

# Whether process PID descends from this script or from a daemon it started:
# a program of this build run by another test or user beside this one is
# not this test's to judge.
descends_from_ours() {
  local pid=$1 started
  started=" $$ $(new_daemon_pids | tr '\n' ' ') "
  while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
    case "$started" in *" $pid "*) return 0 ;; esac
    pid=$(awk '/^PPid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
  return 1
}

# What this test started and is still running: a process whose command line
# names this test's directory, one of this build's programs run by this test
# or under a daemon it started, or a Slurm or munge daemon that was not there
# before.
ours() {
  {
    pgrep -a -f "$TMPDIR" || true
    local pid
    for pid in $(pgrep -f "^$FORKTRIAL_BIN_DIR/forktrial" || true); do
      descends_from_ours "$pid" && echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
    done
    for pid in $(new_daemon_pids); do
      [ "$(awk '/^State:/ {print $2}' "/proc/$pid/status" 2>/dev/null)" = Z ] && continue
      echo "$pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"
    done
  } | grep -v -e "^$$ " -e "^$BASHPID " -e ' pgrep ' | sort -u
}

coordinator_pid=""
# exited PID: the process has ended (a zombie, or reaped).
exited() { ! kill -0 "$1" 2>/dev/null || [[ $(ps -o stat= -p "$1") == Z* ]]; }
# stop_coordinator: SIGTERM, and its exit status; SIGKILL if it has not
# stopped 10 s later.
stop_coordinator() {
  [ -n "$coordinator_pid" ] || return 0
  local pid=$coordinator_pid rc
  coordinator_pid=""
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_until 10 exited "$pid"; then
    echo "the coordinator (pid $pid) ignored SIGTERM for 10 s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid"
  rc=$?
  [ $rc -eq 0 ] || echo "the coordinator ended with status $rc" >&2
  return $rc
}

# On a failure: what the components said.
passed=""
show_logs() {
  [ -z "$passed" ] || return 0
  local file
  for file in "$work/coordinator.log" "$logs"/*.out "$cluster/log/slurmctld.log" "$cluster/log/slurmd.log"; do
    [ -f "$file" ] || continue
    echo "---- the end of $file"
    tail -n 25 "$file"
  done
}
# shellcheck disable=SC2016 # expanded when they run
on_exit 'rm -rf "$cluster" "$store" "$logs" "$caches" "$work"'
# shellcheck disable=SC2016
on_exit '"$slurm_local" stop "$cluster" >/dev/null 2>&1'
on_exit 'stop_coordinator'
on_exit 'show_logs'

# ---- (1) the cluster, the coordinator, the fleet

say "starting a one-node Slurm cluster in $cluster"
"$slurm_local" start "$cluster" || fail "scripts/slurm-local start failed"
eval "$("$slurm_local" env "$cluster")"
[ -r "$SLURM_CONF" ] || fail "scripts/slurm-local env names no readable SLURM_CONF ($SLURM_CONF)"
nodes_cpus=$(sinfo -h -o %c | head -n 1)
((nodes_cpus >= 3 * cpus_per_worker)) ||
  fail "the node declares $nodes_cpus CPUs: too few for 3 workers of $cpus_per_worker"

import_chat "$store" || fail "cannot import the parent run"
port=$(free_port)
ep=tcp://127.0.0.1:$port
# The program itself, not the ft function: $! is then the coordinator's pid.
"$FORKTRIAL_BIN_DIR/forktrial" coordinator --store "$store" --listen "$ep" --lease "$lease" \
  >"$work/coordinator.log" 2>&1 &
coordinator_pid=$!
wait_until 20 ft workers --coordinator "$ep" || fail "the coordinator at $ep does not answer"

# Three free ports in a row from a base: task N's worker serves HTTP on base + N.
http_base=$(python3 -c '
import socket
for _ in range(100):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    base = probe.getsockname()[1]
    probe.close()
    if base > 65000:
        continue
    try:
        held = []
        for port in range(base, base + 3):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            held.append(s)
    except OSError:
        continue
    print(base)
    break
') || fail "no three free ports in a row for the workers' HTTP"
# http_status TASK PATH: the HTTP status of a worker's endpoint, 0 when nothing answers.
http_status() {
  python3 -c '
import sys, urllib.error, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    print(opener.open(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except OSError:
    print(0)' "http://127.0.0.1:$((http_base + $1))$2"
}

say "submitting 3 workers of $cpus_per_worker CPUs, HTTP from port $http_base"
submitted=$("$fleet" submit --coordinator "$ep" --workers 3 --cpus-per-worker "$cpus_per_worker" \
  --log-dir "$logs" --cache-root "$caches" --forktrial "$FORKTRIAL_BIN_DIR/forktrial" \
  --http "127.0.0.1:$http_base" --json) ||
  fail "forktrial-slurm submit failed"
job=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["job"])' <<<"$submitted") ||
  fail "forktrial-slurm submit --json printed no job: $submitted"
say "fleet: job $job"

# task_state TASK: the Slurm state of one array task.
task_state() {
  "$fleet" status "$job" --json | python3 -c '
import json, sys
tasks = {t["task"]: t["state"] for t in json.load(sys.stdin)["tasks"]}
print(tasks.get(sys.argv[1], "none"))' "$1"
}
all_running() {
  local task
  for task in 0 1 2; do [ "$(task_state "$task")" = RUNNING ] || return 1; done
}
wait_until 30 all_running || fail "the 3 array tasks are not all running: $("$fleet" status "$job")"

# workers_json: the coordinator's view of the workers.
workers_json() { ft workers --coordinator "$ep" --json; }
# worker_field ID FIELD: one field of one worker, "none" when it is unknown.
worker_field() {
  workers_json | python3 -c '
import json, sys
for w in json.load(sys.stdin)["workers"]:
    if w["worker"] == sys.argv[1]:
        print(str(w[sys.argv[2]]).lower())
        break
else:
    print("none")' "$1" "$2"
}
fleet_joined() {
  local task
  for task in 0 1 2; do
    [ "$(worker_field "slurm-${job}_$task" alive)" = true ] || return 1
    [ "$(worker_field "slurm-${job}_$task" slots)" = "$cpus_per_worker" ] || return 1
  done
}
wait_until 60 fleet_joined ||
  fail "the workers slurm-${job}_0..2 did not all join with $cpus_per_worker slots: $(workers_json)"
ready_over_http() { [ "$(http_status "$1" /readyz)" = 200 ]; }
for task in 0 1 2; do
  wait_until 10 ready_over_http "$task" ||
    fail "the worker of task $task is not ready over HTTP: /readyz answers $(http_status "$task" /readyz)"
done
say "the 3 workers joined, $cpus_per_worker slots each (one a CPU), each ready over HTTP"

# ---- (2) a batch to completion

# job_status JOB: its status object.
job_status() { ft status "$1" --coordinator "$ep" --json; }
# run_batch NAME TRIALS: submits a batch; prints its job id.
run_batch() {
  write_batch "$work/$1.jsonl" "$2" || fail "cannot write the batch $1"
  ft submit "$work/$1.jsonl" --coordinator "$ep" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["job"])'
}

first_trials=15
first=$(run_batch first "$first_trials") || fail "the first batch was not submitted"
say "first batch: $first, $first_trials trials"
ft wait "$first" --coordinator "$ep" --max-wait 90 >/dev/null ||
  fail "the first batch did not end with every trial reconciled: $(job_status "$first")"
count=$(trial_count "$first" "$ep")
[ "$count" = "$first_trials" ] || fail "the first batch has $count results, not $first_trials"
ft results "$first" --coordinator "$ep" --json >"$work/first.results"
say "first batch: $count results; by worker: $(python3 -c '
import collections, json, sys
print(dict(collections.Counter(json.loads(l)["worker"] for l in open(sys.argv[1]))))' "$work/first.results")"

# ---- (3) one array task cancelled in the middle of a batch

victim=slurm-${job}_1
second_trials=1000
second=$(run_batch second "$second_trials") || fail "the second batch was not submitted"
say "second batch: $second, $second_trials trials"
# The victim holds leases, and the batch is under way but far from its end.
victim_busy() {
  [ "$(worker_field "$victim" running)" -gt 0 ] || return 1
  job_status "$second" | python3 -c 'import json, sys; sys.exit(json.load(sys.stdin)["done"] < 1)'
}
wait_until 30 victim_busy || fail "$victim never held a trial of the second batch: $(workers_json)"
done_at_cancel=$(job_status "$second" | python3 -c 'import json, sys; print(json.load(sys.stdin)["done"])')
# What the cancel must land in: trials still queued beyond what the workers'
# slots and prefetch can hold (a few each), so the victim still holds leases
# when its task goes. How many are done by then is the machine's pace, not a
# rule of the test: only a batch all but finished makes the cancel prove nothing.
((second_trials - done_at_cancel >= 100)) ||
  fail "the second batch was $done_at_cancel/$second_trials done when $victim was seen busy: fewer than 100 were left for the cancel to land in"
say "cancelling array task 1 ($victim, running $(worker_field "$victim" running)) at $done_at_cancel/$second_trials done"
# The victim was heard within the second before this: without a goodbye the
# coordinator could not lose it before lease - 1 s from here.
cancelled_at=$SECONDS
"$fleet" cancel "$job" 1 || fail "forktrial-slurm cancel $job 1 failed"
victim_lost() { [ "$(worker_field "$victim" alive)" = false ]; }
wait_until $((cancelled_at + lease - 2 - SECONDS)) victim_lost ||
  fail "the coordinator did not show $victim lost before its $lease s lease could lapse: $(workers_json)"
grep -q "worker $victim said goodbye (stopped by SIGTERM): lost now" "$work/coordinator.log" ||
  fail "the coordinator's log does not say $victim said goodbye: $(grep "$victim" "$work/coordinator.log" | tail -n 5)"
say "the coordinator showed $victim lost at its goodbye, $((SECONDS - cancelled_at)) s after the cancel (its lease: $lease s)"
task_cancelled() { [ "$(task_state 1)" = CANCELLED ]; }
wait_until 60 task_cancelled || fail "task 1 is $(task_state 1), not CANCELLED, 60 s after its cancel"
for task in 0 2; do
  [ "$(task_state "$task")" = RUNNING ] || fail "task $task is $(task_state "$task") after task 1 was cancelled"
done
victim_log=$logs/forktrial-workers-${job}_1.out
wait_until 10 grep -q "worker $victim ended with status" "$victim_log" ||
  fail "the output of task 1 does not say how its worker ended: $(tail -n 5 "$victim_log")"
grep -q "worker $victim ended with status 0\$" "$victim_log" ||
  fail "the worker of task 1 did not stop cleanly on SIGTERM: $(grep 'ended with status' "$victim_log")"
[ "$(http_status 1 /healthz)" = 0 ] || fail "the cancelled worker's HTTP endpoint still answers"
[ "$(http_status 0 /healthz)" = 200 ] || fail "the worker of task 0 no longer answers /healthz"
victim_cache=$caches/forktrial-worker-${job}_1
[ ! -e "$victim_cache" ] || fail "task 1 left its cache $victim_cache"
left=$(pgrep -a -f "$victim_cache" | grep -v -e "^$$ " -e ' pgrep ' || true)
[ -z "$left" ] || fail "processes of the cancelled task are still running: $left"
say "task 1 is CANCELLED, its worker ended with status 0, nothing of it runs or answers; tasks 0 and 2 run on"

ft wait "$second" --coordinator "$ep" --max-wait 120 >/dev/null ||
  fail "the second batch did not end with every trial reconciled: $(job_status "$second")"
[ "$(worker_field "$victim" alive)" = false ] ||
  fail "the coordinator still counts $victim as alive: $(workers_json)"
job_status "$second" >"$work/second.status"
ft results "$second" --coordinator "$ep" --json >"$work/second.results"
# Exactly once: every trial reconciled, one result each; the ones the victim
# held ran again (attempts > 1) on the workers left; and no trial took the
# signal meant for the worker for its own outcome (each candidate ends as it
# did in the first batch, where nothing was cancelled).
python3 - "$second_trials" "$victim" "$work/second.status" "$work/second.results" "$work/first.results" <<'EOF' ||
import collections, json, sys
total, victim = int(sys.argv[1]), sys.argv[2]
status = json.load(open(sys.argv[3]))
results = [json.loads(line) for line in open(sys.argv[4])]
expected = collections.defaultdict(set)
for line in open(sys.argv[5]):
    r = json.loads(line)
    expected[r["candidate"]].add(r["outcome"])
problems = []
if status["total"] != total or status["done"] != total:
    problems.append("status: total %s, done %s, not %d" % (status["total"], status["done"], total))
if status["status"]["reconciled"] != total:
    problems.append("status: %s reconciled, not %d: %s" % (status["status"]["reconciled"], total, status["status"]))
if len(results) != total:
    problems.append("%d results, not %d" % (len(results), total))
trials = collections.Counter(r["trial"] for r in results)
if len(trials) != total or max(trials.values()) != 1:
    problems.append("not one result a trial: %s" % [t for t, n in trials.items() if n > 1])
for r in results:
    if r["status"] != "reconciled":
        problems.append("%s is %s" % (r["trial"], r["status"]))
    if r["outcome"] not in expected[r["candidate"]]:
        problems.append("%s (%s) ended %s, not %s as before: %s" % (
            r["trial"], r["candidate"], r["outcome"], sorted(expected[r["candidate"]]), r["detail"]))
again = [r for r in results if r["attempts"] > 1]
if not again:
    problems.append("no trial was run again: the cancelled worker's leases were not requeued")
for r in again:
    if r["worker"] == victim:
        problems.append("%s, run again, was reported by the cancelled worker" % r["trial"])
by_victim = sum(1 for r in results if r["worker"] == victim)
print("second batch: %d results, %d trials run again (attempts %s), %d reported by %s before the cancel; "
      "failed attempts %s; by worker: %s" % (
          len(results), len(again), sorted(r["attempts"] for r in again), by_victim, victim,
          status.get("failed_attempts"), dict(collections.Counter(r["worker"] for r in results))))
for p in problems:
    print("problem: " + p)
sys.exit(1 if problems else 0)
EOF
  fail "the second batch did not end exactly once (above)"
say "attempts the cancelled worker gave back as stopped from outside (the rest were requeued at its goodbye):" \
  "$(grep -c "failed: worker $victim: its child was stopped by" "$work/coordinator.log")"

# ---- (4) everything goes

say "cancelling the fleet"
"$fleet" cancel "$job" --wait --timeout 60 || fail "forktrial-slurm cancel $job failed"
[ -z "$(squeue -h)" ] || fail "the queue is not empty after the fleet's cancel: $(squeue)"
for task in 0 1 2; do
  grep -q "worker slurm-${job}_$task ended with status 0\$" "$logs/forktrial-workers-${job}_$task.out" ||
    fail "the worker of task $task did not end with status 0: $(tail -n 3 "$logs/forktrial-workers-${job}_$task.out")"
done
[ -z "$(ls -A "$caches")" ] || fail "the workers left caches: $(ls -A "$caches")"
stop_coordinator || fail "the coordinator did not stop cleanly on SIGTERM"
"$slurm_local" stop "$cluster" || fail "scripts/slurm-local stop failed"
left=$(ours)
[ -z "$left" ] || fail "processes left running: $left"
rm -rf "$cluster" "$store" "$logs" "$caches" "$work"
left=$(find "$TMPDIR" -mindepth 1 -maxdepth 1)
[ -z "$left" ] || fail "files left in TMPDIR: $left"
passed=1
say "passed"
