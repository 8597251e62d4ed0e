#!/usr/bin/env bash
# The container image and the Kubernetes manifests, run by podman on this
# machine:
# - scripts/container-image builds the image from the build tree's binaries,
#   nothing pulled; it runs as 65534, holds no shell, and trial children
#   start in it (preflight);
# - `kubectl kustomize deploy/k8s`, turned by scripts/kube-local (as a user runs it) into what podman
#   4.3.1's `kube play` can run, starts the coordinator and two workers on a
#   podman network, with CurveZMQ keys from the Secrets made as
#   deploy/README.md says;
# - a recorded run is imported into the coordinator's store the documented
#   way (exec in its container), and a batch submitted from the host through
#   the published port completes with the outcomes the same batch has on the
#   host; a key on no allow list is refused;
# - the manifests' liveness and readiness probes, asked as the kubelet would
#   (the coordinator's through its published port, the workers' in their
#   pods' network), answer 200;
# - the store outlives the pods: after kube down and play again, the job is
#   still there and the cluster runs another batch;
# - kube down, then removing what kube down keeps, then scripts/podman-local
#   cleanup leave nothing: no container, pod, volume, secret, image or
#   network, no mount, netns, iptables chain or rule that was not there.
source "$(dirname "$0")/lib.sh"
# Progress with the seconds since the start: the test should take about a minute.
step() { say "$* (at ${SECONDS}s)"; }

need_root
for tool in podman runc kubectl nsenter curl; do
  command -v "$tool" >/dev/null 2>&1 || skip "no $tool: run scripts/install-deps"
done
py=/usr/bin/python3
"$py" -c 'import yaml' 2>/dev/null || skip "no python3-yaml: run scripts/install-deps"

src=$FORKTRIAL_SOURCE
work=$TMPDIR/work
state=$TMPDIR/podman
tag=localhost/forktrial:deploy-test
net=forktrial-test-$$
coordinator=forktrial-coordinator-coordinator
workers=(forktrial-worker-0-worker forktrial-worker-1-worker)
claim_volume=store-forktrial-coordinator-0
mkdir -p "$work"

eval "$("$src/scripts/podman-local" setup "$state")" || fail "scripts/podman-local setup failed"
cleaned=false
cleanup() {
  $cleaned && return 0
  step "cleaning up after a failure"
  "$src/scripts/podman-local" cleanup "$state" || true
  rm -rf "$work"
}
on_exit cleanup

# What the pods said, when a step fails.
show_pods() {
  podman ps -a --format '{{.Names}} {{.Status}}' || true
  local container
  for container in "$coordinator" "${workers[@]}"; do
    echo "--- podman logs $container (last lines)"
    podman logs "$container" 2>&1 | tail -n 15 || true
  done
}
fail_with_pods() {
  show_pods >&2
  fail "$@"
}

# ---- the image
step "building the image from $(dirname "$FORKTRIAL_BIN_DIR")"
"$src/scripts/container-image" "$(dirname "$FORKTRIAL_BIN_DIR")" --tag "$tag" \
  --context "$work/image" >/dev/null || fail "scripts/container-image failed"
rm -rf "$work/image"
user=$(podman image inspect "$tag" --format '{{.Config.User}}')
[ "$user" = 65534:65534 ] || fail "the image runs as '$user', not 65534:65534"
if podman run --rm --network none --entrypoint /bin/sh "$tag" -c true >/dev/null 2>&1; then
  fail "the image has a shell (/bin/sh ran); it should hold forktrial and its libraries only"
fi
version=$(podman run --rm --network none "$tag" --version) || fail "forktrial --version failed in the image"
[ "$version" = "$(ft --version)" ] || fail "the image says '$version', the build tree '$(ft --version)'"
preflight=$(podman run --rm --network none "$tag" preflight --json) ||
  fail "preflight failed in the image (trial children cannot start there): $preflight"
"$py" - "$preflight" <<'EOF' || fail "preflight in the image: $preflight"
import json, sys
report = json.loads(sys.argv[1])
assert report["ok"] is True, "not ok"
assert report["child"] == "/usr/local/libexec/forktrial/forktrial-child", report["child"]
EOF
step "image $tag: $version, user $user, no shell, preflight ok"

# ---- keys, as deploy/README.md makes them, into the Secrets' documents
keys=$work/keys-src
mkdir -p "$keys"
for name in coordinator worker client stranger; do
  ft keygen "$keys/$name.key" >/dev/null 2>&1 || fail "forktrial keygen $name.key failed"
done
cp "$keys/worker.key.pub" "$keys/workers.allow"
cp "$keys/client.key.pub" "$keys/clients.allow"

# ---- the manifests, made playable as a user makes them (scripts/kube-local)
zmq_port=$(free_port)
http_port=$(free_port)
local_args=(--keys "$keys" --image "$tag" --publish "zmq=$zmq_port" --publish "http=$http_port"
  --workers 2)
local_variant() {
  "$src/scripts/kube-local" render "$1" "${local_args[@]}" "${@:2}" ||
    fail "scripts/kube-local render failed"
  cp "$1.probes.json" "$work/probes.json"
}
local_variant "$work/local.yaml"
podman network create "$net" >/dev/null || fail "podman network create $net failed"

export FORKTRIAL_COORDINATOR=tcp://127.0.0.1:$zmq_port
export FORKTRIAL_KEY=$keys/client.key FORKTRIAL_COORDINATOR_KEY=$keys/coordinator.key.pub

alive_workers() {
  ft workers --json --timeout 2 2>/dev/null |
    "$py" -c 'import json, sys; print(sum(w["alive"] for w in json.load(sys.stdin)["workers"]))'
}
two_workers_alive() { [ "$(alive_workers)" = 2 ]; }

play() {
  podman kube play --network "$net" "$1" >"$work/play.log" 2>&1 ||
    fail_with_pods "podman kube play $(basename "$1") failed: $(tail -n 5 "$work/play.log")"
  wait_until 60 two_workers_alive ||
    fail_with_pods "the two workers did not join the coordinator within 60 s (alive: $(alive_workers))"
}

step "kube play: the coordinator and two workers, the coordinator on 127.0.0.1:$zmq_port"
play "$work/local.yaml"

# ---- a recorded run into the coordinator's store, then a batch
imported=$(podman exec -i "$coordinator" forktrial run import - --id run_chat \
  --label "recorded chat" <"$src/examples/runs/chat.jsonl") ||
  fail_with_pods "importing the run in the coordinator's container failed: $imported"
[ "$imported" = run_chat ] || fail "the import printed '$imported', not run_chat"

write_batch "$work/batch.jsonl" 20
job=$(ft submit "$work/batch.jsonl" --json | "$py" -c 'import json, sys; print(json.load(sys.stdin)["job"])') ||
  fail_with_pods "submitting the batch failed"
ft wait "$job" --max-wait 90 >"$work/wait.log" 2>&1 ||
  fail_with_pods "job $job did not complete: $(tail -n 5 "$work/wait.log")"
count=$(trial_count "$job" "$FORKTRIAL_COORDINATOR")
[ "$count" = 20 ] || fail "job $job reports $count trials, not 20"

# The same batch on the host: the outcomes must be the same.
outcomes() {
  "$py" -c '
import json, sys
rows = [json.loads(line) for line in sys.stdin if line.startswith("{")]
rows = [r for r in rows if "trial" in r]
for r in sorted((r["candidate"], r["scenario"], r["at"], str(r["outcome"]), str(r["events_appended"])) for r in rows):
    print(" ".join(r))'
}
ft results "$job" --json | outcomes >"$work/cluster.outcomes"
import_chat "$work/host-store"
# Without the client's keys in the environment: the batch's own workers
# would take them, and its coordinator has none.
env -u FORKTRIAL_KEY -u FORKTRIAL_COORDINATOR_KEY -u FORKTRIAL_COORDINATOR \
  timeout 120 "$FORKTRIAL_BIN_DIR/forktrial" batch "$work/batch.jsonl" --store "$work/host-store" \
  --workers 2 --json 2>"$work/batch.log" | outcomes >"$work/host.outcomes"
[ -s "$work/host.outcomes" ] ||
  fail "the batch on the host printed no results: $(tail -n 5 "$work/batch.log")"
diff "$work/host.outcomes" "$work/cluster.outcomes" >&2 ||
  fail "the pods' outcomes differ from the host's ('<' host, '>' pods)"
step "job $job: 20 trials reconciled in the pods, with the host's outcomes"

# A key on no allow list gets no answer, and the coordinator says why.
if ft status --key "$keys/stranger.key" --timeout 2 >/dev/null 2>&1; then
  fail "a client whose key is on no allow list was answered"
fi
stranger=$(sed -n 's/^public-key = "\(.*\)"$/\1/p' "$keys/stranger.key.pub")
# -e: a key may begin with "-".
wait_until 10 bash -c 'podman logs "$0" 2>&1 | grep -F "refused a peer" | grep -qF -e "$1"' \
  "$coordinator" "$stranger" || fail_with_pods "the coordinator did not log refusing the unlisted key"
step "an unlisted client key is refused"

# ---- the probes the manifests declare, as the kubelet would make them: to
# the pod's address (not its loopback), on the port they name. The
# coordinator's is reached through its published port, the workers' from
# inside their pods' network namespaces.
pod_address() { nsenter --net="$1" ip -4 -o addr show eth0 | awk '{ split($4, a, "/"); print a[1] }'; }
asked=0
while IFS=' ' read -r workload kind path port; do
  if [ "$workload" = forktrial-coordinator ]; then
    [ "$port" = 7680 ] || fail "the coordinator's $kind is on port $port, not 7680"
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$http_port$path")
    [ "$code" = 200 ] || fail_with_pods "$workload $kind: GET $path answered $code, not 200"
    asked=$((asked + 1))
    continue
  fi
  for container in "${workers[@]}"; do
    netns=$(podman inspect "$container" --format '{{.NetworkSettings.SandboxKey}}')
    address=$(pod_address "$netns")
    [ -n "$address" ] || fail_with_pods "no address of $container's pod in $netns"
    code=$(nsenter --net="$netns" curl -s -o /dev/null -w '%{http_code}' "http://$address:$port$path")
    [ "$code" = 200 ] || fail_with_pods "$container $kind: GET $address:$port$path answered $code, not 200"
    asked=$((asked + 1))
  done
done < <("$py" -c '
import json, sys
for p in json.load(open(sys.argv[1])):
    print(p["workload"], p["probe"], p["path"], p["port"])' "$work/probes.json")
[ "$asked" = 6 ] || fail "the manifests' probes made $asked requests, not 6 (2 per pod)"
step "liveness and readiness probes answer 200"
# What the pods' prometheus.io annotations point Prometheus at.
code=$(curl -s -o "$work/metrics" -w '%{http_code}' "http://127.0.0.1:$http_port/metrics")
if [ "$code" != 200 ] || ! grep -q '^# TYPE ' "$work/metrics"; then
  fail "the coordinator's /metrics answered $code, not Prometheus text"
fi

# ---- the store outlives the pods
podman kube down "$work/local.yaml" >/dev/null 2>&1 || fail "podman kube down failed"
[ -z "$(podman ps -aq)" ] || fail "kube down left containers: $(podman ps -a --format '{{.Names}}')"
podman volume exists "$claim_volume" || fail "kube down removed the store's volume $claim_volume"
local_variant "$work/again.yaml" --claims-exist
step "kube down, kube play again on the same store"
play "$work/again.yaml"
count=$(trial_count "$job" "$FORKTRIAL_COORDINATOR")
[ "$count" = 20 ] || fail "after the restart job $job reports $count trials, not 20"
write_batch "$work/again.jsonl" 5
ft submit "$work/again.jsonl" --wait --max-wait 60 >"$work/wait.log" 2>&1 ||
  fail_with_pods "a batch after the restart did not complete: $(tail -n 5 "$work/wait.log")"
step "after the restart: job $job still holds its 20 trials, and a new batch completed"

# ---- nothing left
podman kube down "$work/again.yaml" >/dev/null 2>&1 || fail "podman kube down failed"
[ -z "$(podman ps -aq)" ] || fail "kube down left containers: $(podman ps -a --format '{{.Names}}')"
[ -z "$(podman pod ps -q)" ] || fail "kube down left pods: $(podman pod ps --format '{{.Name}}')"
volumes=$(podman volume ls -q)
[ "$volumes" = "$claim_volume" ] ||
  fail "after kube down the volumes are '$(echo "$volumes" | tr '\n' ' ')', not just the store's"
podman volume rm "$claim_volume" >/dev/null || fail "podman volume rm $claim_volume failed"
podman network rm "$net" >/dev/null || fail "podman network rm $net failed"
podman rmi "$tag" >/dev/null || fail "podman rmi $tag failed"
# kube play builds the pods' infra image from catatonit; it is ours too.
podman images -q | xargs -r podman rmi >/dev/null || fail "removing the pods' infra image failed"
for what in "volume ls -q" "secret ls -q" "images -aq" "ps -aq" "pod ps -q"; do
  # shellcheck disable=SC2086
  left=$(podman $what)
  [ -z "$left" ] || fail "podman $what still lists: $left"
done
networks=$(podman network ls --format '{{.Name}}')
[ "$networks" = podman ] || fail "podman still lists networks: $networks"
"$src/scripts/podman-local" cleanup "$state" || fail "scripts/podman-local cleanup found leftovers"
cleaned=true
mounts=$(awk -v dir="$TMPDIR/" 'index($2, dir) == 1 { print $2 }' /proc/mounts)
[ -z "$mounts" ] || fail "mounts left under $TMPDIR: $mounts"
rm -rf "$work"
step "passed: nothing left behind"
