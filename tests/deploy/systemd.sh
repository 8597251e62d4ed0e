#!/usr/bin/env bash
# The systemd units of deploy/systemd, checked two ways:
#  1. systemd-analyze verify, with ExecStart pointed at the binaries under
#     test, the keys' drop-ins applied; any message fails (verify only warns
#     about an unknown key or a value it cannot parse), and copies broken on
#     purpose prove the check fails.
#  2. Started under a real systemd: this host's own root, booted with
#     systemd-nspawn on a throwaway overlay (private network; nothing it
#     writes reaches the host), the binaries bound at their installed paths
#     (/usr/bin, /usr/libexec/forktrial). The coordinator and two workers,
#     one with --isolation strict, run batches with every hardening option
#     of the units in force; the coordinator is killed and must come back;
#     then the keys' drop-ins are installed and a batch runs over CurveZMQ.
# Skips part 2 (exit 77) without systemd-nspawn (scripts/install-deps
# installs systemd-container).
source "$(dirname "$0")/lib.sh"
set -e
need_root
for tool in systemd-analyze unshare nsenter python3; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/install-deps)"
done

src=$FORKTRIAL_SOURCE/deploy/systemd

# ---- 1. systemd-analyze verify

# Copies the units into DIR with ExecStart running the forktrial under test,
# and each keys' drop-in where systemd looks for it.
stage_units() {
  local dir=$1
  mkdir -p "$dir/forktrial-coordinator.service.d" "$dir/forktrial-worker@.service.d"
  for unit in forktrial-coordinator.service forktrial-worker@.service forktrial-gc.service; do
    sed "s#^ExecStart=/usr/bin/forktrial #ExecStart=$FORKTRIAL_BIN_DIR/forktrial #" \
      "$src/$unit" >"$dir/$unit"
    grep -q "^ExecStart=$FORKTRIAL_BIN_DIR/forktrial " "$dir/$unit" ||
      fail "$unit: no ExecStart=/usr/bin/forktrial line to point at the binary under test"
  done
  cp "$src/forktrial-gc.timer" "$dir/"
  cp "$src/forktrial-coordinator-curve.conf" "$dir/forktrial-coordinator.service.d/curve.conf"
  cp "$src/forktrial-worker-curve.conf" "$dir/forktrial-worker@.service.d/curve.conf"
}

# systemd-analyze verify of DIR's coordinator and a worker instance; prints
# what it said and returns 1 when it said anything or failed. It runs with
# a private /run/systemd, where verify leaves a file of its own.
verify_units() {
  local dir=$1 out rc=0
  out=$(unshare --mount --propagation private sh -c \
    'mount -t tmpfs tmpfs /run/systemd && exec systemd-analyze verify --man=no "$@"' sh \
    "$dir/forktrial-coordinator.service" "$dir/forktrial-worker@ci.service" \
    "$dir/forktrial-gc.service" "$dir/forktrial-gc.timer" 2>&1) || rc=$?
  if [ $rc -ne 0 ] || [ -n "$out" ]; then
    printf 'systemd-analyze verify (exit %s): %s\n' "$rc" "$out"
    return 1
  fi
}

stage_units "$TMPDIR/units"
on_exit "rm -rf '$TMPDIR/units'"
verify_units "$TMPDIR/units" || fail "the units do not verify cleanly"
say "units verified: no message from systemd-analyze verify"

# The check must fail on broken units: a misspelled hardening key and a
# value it cannot parse (warnings only, exit 0), a binary that is not there
# (exit 1), and a broken drop-in.
broken() {
  local what=$1 file=$2 expression=$3
  rm -rf "$TMPDIR/broken"
  stage_units "$TMPDIR/broken"
  sed -i "$expression" "$TMPDIR/broken/$file"
  cmp -s "$TMPDIR/broken/$file" "$TMPDIR/units/$file" && fail "breaking $file ($what) changed nothing"
  if verify_units "$TMPDIR/broken" >"$TMPDIR/broken.out"; then
    fail "a unit with $what verified cleanly"
  fi
  say "broken on purpose ($what): caught: $(grep -v '^$' "$TMPDIR/broken.out" | tail -n 1)"
}
on_exit "rm -rf '$TMPDIR/broken' '$TMPDIR/broken.out'"
broken "a misspelled key" forktrial-worker@.service 's/^ProtectSystem=/ProtectSytem=/'
broken "an unparsable value" forktrial-coordinator.service 's/^ProtectSystem=strict/ProtectSystem=strcit/'
broken "a missing binary" forktrial-coordinator.service 's#/forktrial coordinator#/forktrial-absent coordinator#'
broken "a misspelled drop-in key" forktrial-coordinator.service.d/curve.conf 's/^LoadCredential=/LoadCredentials=/'

# ---- 2. the units under a real systemd

command -v systemd-nspawn >/dev/null ||
  skip "the units verify, but systemd-nspawn is missing, so they were not started under systemd (scripts/install-deps installs systemd-container)"

machine=forktrial-deploy-$$
root=$TMPDIR/root
etc=$TMPDIR/etc
share=$TMPDIR/share
mkdir -p "$root" "$etc" "$share"
on_exit "rmdir '$root'; rm -rf '$etc' '$share'"

# What systemd-nspawn leaves on the host: removed unless it was there before.
for left in /run/systemd/nspawn /var/lib/machines; do
  if [ ! -e "$left" ]; then
    on_exit "rmdir '$left/locks' '$left/propagate' 2>/dev/null; rmdir '$left' 2>/dev/null"
  fi
done

# The container's cgroups (systemd-nspawn's payload and supervisor, and the
# container's own) go under one of this test's, removed at the end.
cgroup_dirs=()
add_cgroup() {
  local mount=$1 own
  own=$(awk -F: -v key="$2" '$2 == key { print $3 }' /proc/self/cgroup)
  [ -n "$own" ] || return 0
  local dir=$mount${own%/}/$machine
  mkdir "$dir" || fail "cannot make the container's cgroup $dir"
  cgroup_dirs+=("$dir")
  on_exit "find '$dir' -depth -type d -exec rmdir {} + 2>/dev/null || true"
}
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  add_cgroup /sys/fs/cgroup ""
else
  add_cgroup /sys/fs/cgroup/systemd name=systemd
  [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && add_cgroup /sys/fs/cgroup/unified ""
fi

# The environment files: the shipped examples as they are, and an instance
# file for each worker (w1 standard, w2 strict), each on an HTTP port.
cp "$src/coordinator.env" "$src/worker.env" "$src/gc.env" "$etc/"
printf 'FORKTRIAL_HTTP=127.0.0.1:7681\nFORKTRIAL_SLOTS=2\n' >"$etc/worker-w1.env"
printf 'FORKTRIAL_HTTP=127.0.0.1:7682\nFORKTRIAL_ISOLATION=strict\n' >"$etc/worker-w2.env"
chmod -R a+rX "$etc"

mount --bind / "$root"
on_exit "umount '$root'"
(
  for dir in "${cgroup_dirs[@]}"; do echo "$BASHPID" >"$dir/cgroup.procs"; done
  exec systemd-nspawn --quiet --directory="$root" --volatile=overlay --register=no --keep-unit \
    --link-journal=no --private-network --machine="$machine" \
    --bind-ro="$FORKTRIAL_BIN_DIR/forktrial:/usr/bin/forktrial" \
    --bind-ro="$FORKTRIAL_BIN_DIR/forktrial-full:/usr/libexec/forktrial/forktrial-full" \
    --bind-ro="$FORKTRIAL_BIN_DIR/forktrial-child:/usr/libexec/forktrial/forktrial-child" \
    --bind-ro="$src/forktrial-coordinator.service:/lib/systemd/system/forktrial-coordinator.service" \
    --bind-ro="$src/forktrial-worker@.service:/lib/systemd/system/forktrial-worker@.service" \
    --bind-ro="$src/forktrial-gc.service:/lib/systemd/system/forktrial-gc.service" \
    --bind-ro="$src/forktrial-gc.timer:/lib/systemd/system/forktrial-gc.timer" \
    --bind-ro="$etc:/etc/forktrial" --bind-ro="$share:/srv/forktrial-test" \
    --bind-ro="$FORKTRIAL_SOURCE" \
    --boot systemd.unit=basic.target
) >"$TMPDIR/container.log" 2>&1 &
nspawn=$!
on_exit "rm -f '$TMPDIR/container.log'"
on_exit "stop_container"

leader=""
find_leader() {
  local pid
  pid=$(pgrep -P "$nspawn" | head -n 1)
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = systemd ] && leader=$pid
}
stop_container() {
  if [ -n "$leader" ]; then kill -RTMIN+4 "$leader" 2>/dev/null || true; fi
  local end=$((SECONDS + 30))
  while kill -0 "$nspawn" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
  if kill -0 "$nspawn" 2>/dev/null; then
    say "the container did not power off in 30 s: killing it"
    [ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null
    kill -KILL "$nspawn" 2>/dev/null
  fi
  wait "$nspawn" 2>/dev/null || true
}
in_container() {
  nsenter --target "$leader" --all \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"
}
booted() {
  local state
  state=$(in_container systemctl is-system-running 2>/dev/null) || true
  [ "$state" = running ] || [ "$state" = degraded ]
}
container_failed() {
  cat "$TMPDIR/container.log" >&2 || true
  fail "$1"
}
wait_until 30 find_leader || container_failed "systemd did not start in the container"
wait_until 60 booted || container_failed "systemd in the container did not reach basic.target"
say "systemd booted in container $machine (leader pid $leader)"

http_ok() {
  in_container python3 -c 'import sys, urllib.request as u
sys.exit(0 if u.urlopen("http://127.0.0.1:" + sys.argv[1] + sys.argv[2], timeout=2).status == 200 else 1)' "$1" "$2"
}
unit_journal() { in_container journalctl --no-pager -o cat -u "$1" | tail -n 20 >&2 || true; }
unit_failed() {
  unit_journal "$1"
  fail "$2"
}
unit_show() { in_container systemctl show -p "$2" --value "$1"; }

# The coordinator, with the example environment file as shipped.
in_container systemctl start forktrial-coordinator.service
wait_until 30 http_ok 7680 /readyz ||
  unit_failed forktrial-coordinator.service "the coordinator's /readyz on 127.0.0.1:7680 never answered 200"
pid=$(unit_show forktrial-coordinator.service MainPID)
uid=$(in_container awk '/^Uid:/ { print $2 }' "/proc/$pid/status")
[ "$uid" != 0 ] && [ "$uid" = "$(in_container id -u forktrial-coordinator)" ] ||
  fail "the coordinator runs as uid $uid, not as its dynamic user forktrial-coordinator"
owner=$(in_container stat -c %U /var/lib/private/forktrial)
[ "$owner" = forktrial-coordinator ] ||
  fail "the coordinator's state directory is owned by $owner, not forktrial-coordinator"
say "coordinator up: ready on :7680, uid $uid (forktrial-coordinator), store in /var/lib/private/forktrial"

# A run enters the store the way deploy/README.md says: the coordinator
# stopped, an import as the service's own user.
in_container systemctl stop forktrial-coordinator.service
in_container systemd-run --quiet --pipe --wait -p DynamicUser=yes -p User=forktrial-coordinator \
  -p StateDirectory=forktrial forktrial run import - --store /var/lib/forktrial --id run_chat \
  --label "recorded chat" <"$FORKTRIAL_SOURCE/examples/runs/chat.jsonl" >/dev/null ||
  fail "importing the run as the coordinator's user (systemd-run) failed"
in_container systemctl start forktrial-coordinator.service
wait_until 30 http_ok 7680 /readyz ||
  unit_failed forktrial-coordinator.service "the coordinator did not come back after the import"

in_container systemctl start forktrial-worker@w1.service forktrial-worker@w2.service
for port in 7681 7682; do
  worker=w$((port - 7680))
  wait_until 60 http_ok "$port" /readyz ||
    unit_failed "forktrial-worker@$worker.service" "worker $worker's /readyz on :$port never answered 200"
done
# check workers FILE: w1 runs standard, w2 strict with its namespaces and
# seccomp applied, neither with a net degraded but the cgroup's.
# check results FILE WORKER: the 10 trials of write_batch ran on WORKER, each
# candidate ended as it must, and no report names a net degraded but the
# cgroup's.
check() {
  python3 - "$@" <<'EOF'
import json, sys
mode, path = sys.argv[1], sys.argv[2]
problems = []
if mode == "workers":
    workers = {w["worker"]: w for w in json.load(open(path))["workers"]}
    for name, level in (("w1", "standard"), ("w2", "strict")):
        w = workers.get(name)
        if not w or not w["alive"]:
            problems.append(f"{name} is not alive: {w}")
            continue
        if w["isolation"]["level"] != level:
            problems.append(f"{name} runs {w['isolation']['level']}, not {level}")
        others = [d for d in w["degraded_nets"] if not d.startswith("cgroup net")]
        if others:
            problems.append(f"{name} degraded nets besides the cgroup's: {others}")
    strict = workers.get("w2", {}).get("isolation", {})
    for guarantee in ("filesystem", "network", "syscalls"):
        if not strict.get(guarantee, {}).get("provided"):
            problems.append(f"w2 (strict) lacks {guarantee}: {strict.get(guarantee)}")
else:
    expected = {"greeter": "completed", "chat_echo": "completed",
                "flaky_replies": "scenario_failed", "runaway": "limits_exceeded",
                "undeclared": "materialization_failed"}
    results = [json.loads(line) for line in open(path)]
    if len(results) != 10:
        problems.append(f"{len(results)} results, not 10")
    for r in results:
        where = f"trial {r.get('trial')} ({r.get('candidate')})"
        if r.get("worker") != sys.argv[3]:
            problems.append(f"{where} ran on {r.get('worker')}, not {sys.argv[3]}")
        if r.get("outcome") != expected.get(r.get("candidate")):
            problems.append(f"{where} ended {r.get('outcome')}: {r.get('detail')}")
        for line in (r.get("detail") or "").splitlines():
            if ("degraded" in line or "unavailable" in line) and "cgroup net" not in line:
                problems.append(f"{where}: {line}")
for p in problems:
    print("systemd:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
}

in_container forktrial workers --json >"$TMPDIR/workers.json"
on_exit "rm -f '$TMPDIR/workers.json'"
check workers "$TMPDIR/workers.json" || fail "the workers do not report the isolation they were started with"
say "workers up: w1 standard, w2 strict (namespaces and seccomp applied; only the cgroup net degraded)"

# A batch on each worker alone: every kind of candidate ends as it must.
write_batch "$share/batch.jsonl" 10
on_exit "rm -f '$TMPDIR/results.jsonl' '$share/batch.jsonl'"
# Runs the batch with WORKER the only worker up; client=(...) are the
# client's key options, once the coordinator has keys. --no-cache: the
# batch's candidates are deterministic, and each run must run on its worker
# rather than be answered from the first run's results.
client=()
run_batch_on() {
  local worker=$1 job
  job=$(in_container timeout 120 forktrial submit /srv/forktrial-test/batch.jsonl --json \
    --no-cache "${client[@]}" | python3 -c 'import json, sys; print(json.load(sys.stdin)["job"])') ||
    fail "submitting the batch for $worker failed"
  in_container timeout 120 forktrial wait "$job" "${client[@]}" >/dev/null ||
    unit_failed "forktrial-worker@$worker.service" "job $job on $worker did not finish reconciled"
  in_container forktrial results "$job" --json "${client[@]}" >"$TMPDIR/results.jsonl"
  check results "$TMPDIR/results.jsonl" "$worker" || unit_failed "forktrial-worker@$worker.service" \
    "job $job on $worker: trials did not end as they must"
  say "batch $job on $worker alone${client[*]:+, with keys}: 10 trials, each ended as it must"
  last_job=$job
}
in_container systemctl stop forktrial-worker@w2.service
run_batch_on w1
in_container systemctl start forktrial-worker@w2.service
in_container systemctl stop forktrial-worker@w1.service
run_batch_on w2
in_container systemctl start forktrial-worker@w1.service

# gc as the timer runs it, beside the live coordinator: with the shipped
# policy (keep all) it deletes nothing; with keep none, every fork of the
# two finished jobs, and the coordinator serves their results still.
gc_says() {
  in_container systemctl start forktrial-gc.service ||
    unit_failed forktrial-gc.service "forktrial-gc.service failed"
  in_container journalctl --no-pager -o cat -u forktrial-gc.service | grep "^deleted [0-9]* fork" |
    tail -n 1
}
said=$(gc_says)
[[ $said == "deleted 0 fork(s)"* ]] || fail "gc with the shipped policy (keep all) said: $said"
printf 'FORKTRIAL_GC_KEEP=none\nFORKTRIAL_GC_OLDER_THAN=0\n' >"$etc/gc.env"
said=$(gc_says)
[[ $said =~ ^deleted\ ([0-9]+)\ fork ]] && ((BASH_REMATCH[1] > 0)) ||
  fail "gc with keep none deleted no fork: $said"
in_container forktrial results "$last_job" --json "${client[@]}" >"$TMPDIR/results.jsonl" ||
  fail "the coordinator did not serve job $last_job's results after gc"
[ "$(wc -l <"$TMPDIR/results.jsonl")" = 10 ] || fail "job $last_job has not its 10 results after gc"
in_container systemctl start forktrial-gc.timer
[ -n "$(unit_show forktrial-gc.timer NextElapseUSecRealtime)" ] ||
  fail "forktrial-gc.timer started with no next run"
in_container systemctl stop forktrial-gc.timer
say "gc as its unit runs it, beside the coordinator: $said; results kept; the daily timer starts"

# Restart=on-failure: a coordinator killed by a signal comes back.
pid=$(unit_show forktrial-coordinator.service MainPID)
in_container kill -KILL "$pid"
restarted() {
  [ "$(unit_show forktrial-coordinator.service NRestarts)" = 1 ] && http_ok 7680 /readyz
}
wait_until 30 restarted ||
  unit_failed forktrial-coordinator.service "the coordinator killed with SIGKILL did not restart"
say "coordinator killed (SIGKILL): restarted by systemd and ready again"

# Keys, set up as deploy/README.md says: the drop-ins, the secret keys
# root's with mode 0600 (which the services' dynamic users cannot open: they
# get them as credentials), the allow lists, the coordinator's public key in
# worker.env. A client without keys is then refused; with them, a batch runs.
ft keygen "$etc/coordinator.key" >/dev/null
ft keygen "$etc/worker-w1.key" >/dev/null
ft keygen "$etc/client.key" >/dev/null
printf '%s worker-id=w1\n' "$(cat "$etc/worker-w1.key.pub")" >"$etc/workers.allow"
cp "$etc/client.key.pub" "$etc/clients.allow"
chmod 0644 "$etc"/*.pub "$etc"/*.allow
echo "FORKTRIAL_COORDINATOR_KEY=/etc/forktrial/coordinator.key.pub" >>"$etc/worker.env"
in_container systemctl stop forktrial-worker@w2.service
in_container install -D -m 0644 "$src/forktrial-coordinator-curve.conf" \
  /etc/systemd/system/forktrial-coordinator.service.d/curve.conf
in_container install -D -m 0644 "$src/forktrial-worker-curve.conf" \
  /etc/systemd/system/forktrial-worker@.service.d/curve.conf
in_container systemctl daemon-reload
in_container systemctl restart forktrial-coordinator.service
wait_until 30 http_ok 7680 /readyz ||
  unit_failed forktrial-coordinator.service "the coordinator with keys never became ready"
in_container systemctl restart forktrial-worker@w1.service
wait_until 60 http_ok 7681 /readyz ||
  unit_failed forktrial-worker@w1.service "worker w1 with keys was never welcomed by the coordinator"
if in_container forktrial workers --timeout 3 >/dev/null 2>&1; then
  fail "the coordinator with keys answered a client that has none"
fi
client=(--key /etc/forktrial/client.key --coordinator-key /etc/forktrial/coordinator.key.pub)
run_batch_on w1
say "keys: the coordinator and w1 read theirs as credentials; a client without keys is refused"

for worker in w1 w2; do
  in_container test -d "/var/cache/forktrial/$worker/" ||
    fail "worker $worker has no cache directory /var/cache/forktrial/$worker"
done
in_container systemctl stop forktrial-worker@w1.service forktrial-worker@w2.service \
  forktrial-coordinator.service
for unit in forktrial-coordinator.service forktrial-worker@w1.service forktrial-worker@w2.service; do
  state=$(unit_show "$unit" ActiveState)
  [ "$state" = inactive ] || unit_failed "$unit" "$unit is $state after systemctl stop, not inactive"
done
# One name a call: pgrep refuses a pattern longer than a process name (15).
if in_container pgrep -x forktrial >/dev/null || in_container pgrep -x forktrial-full >/dev/null ||
  in_container pgrep -f forktrial-child >/dev/null; then
  fail "forktrial processes are left in the container after every unit stopped"
fi
say "every unit stopped cleanly; no forktrial process left"
