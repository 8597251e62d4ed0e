#!/usr/bin/env bash
# The Kubernetes manifests (deploy/k8s), checked offline:
# - every manifest, and every document `kubectl kustomize deploy/k8s`
#   renders, against the API's schemas with the npm package kubernetes-models
#   (types, enums, required fields), through k8s-validate.mjs;
# - the rendered documents against the rules the deployment depends on
#   (k8s-rules.py: selectors, probes on the --http port, $(NAME) references,
#   key files against deploy/README.md's commands, the policies);
# - broken copies, each with one planted fault, must fail, each naming its
#   fault: the checks can fail.
# kubernetes-models and yaml, pinned in k8s-packages.json, are installed by
# scripts/install-deps --test into a cache outside the source tree
# ($FORKTRIAL_NPM_CACHE, default ~/.cache/forktrial/npm-k8s) and read offline;
# the test is skipped when they are not there.
source "$(dirname "$0")/lib.sh"

src=$FORKTRIAL_SOURCE
py=/usr/bin/python3
for tool in kubectl node; do
  command -v "$tool" >/dev/null 2>&1 || skip "no $tool"
done
"$py" -c 'import yaml' 2>/dev/null || skip "no python3-yaml: run scripts/install-deps"

cache_root=${FORKTRIAL_NPM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/forktrial/npm-k8s}
npm_dir=$cache_root/packages
# scripts/install-deps --test installs the packages pinned in
# k8s-packages.json there; the test itself reaches no network.
if ! cmp -s "$src/tests/deploy/k8s-packages.json" "$npm_dir/package.json" ||
  [ ! -d "$npm_dir/node_modules/kubernetes-models" ] || [ ! -d "$npm_dir/node_modules/yaml" ]; then
  skip "the npm packages of tests/deploy/k8s-packages.json are not in $npm_dir: run scripts/install-deps --test"
fi
say "kubernetes-models and yaml as pinned in k8s-packages.json, from $npm_dir"

work=$TMPDIR/work
mkdir -p "$work"
on_exit 'rm -rf "$work"'
validate() { node "$src/tests/deploy/k8s-validate.mjs" "$npm_dir" "$@"; }
rules() { "$py" "$src/tests/deploy/k8s-rules.py" "$1" "$src/deploy/README.md"; }

# ---- the manifests as written
sources=()
for file in "$src"/deploy/k8s/*.yaml; do
  [ "$(basename "$file")" = kustomization.yaml ] || sources+=("$file")
done
[ ${#sources[@]} -gt 0 ] || fail "no manifests in deploy/k8s"
validate "${sources[@]}" >"$work/sources.log" 2>&1 || {
  cat "$work/sources.log" >&2
  fail "a manifest in deploy/k8s is not valid"
}
"$py" - "$src/deploy/k8s" <<'EOF' || fail "kustomization.yaml and the files in deploy/k8s disagree"
import os, sys, yaml
root = sys.argv[1]
kustomization = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
listed = set(kustomization.get("resources", []))
present = {f for f in os.listdir(root) if f.endswith(".yaml") and f != "kustomization.yaml"}
for name in sorted(present - listed):
    print(f"{name} is not among kustomization.yaml's resources")
for name in sorted(listed - present):
    print(f"kustomization.yaml lists {name}, which does not exist")
sys.exit(1 if listed != present else 0)
EOF
say "$(tail -n 1 "$work/sources.log" | sed 's/^k8s-validate: //') in deploy/k8s"

# ---- what kustomize renders
kubectl kustomize "$src/deploy/k8s" >"$work/rendered.yaml" 2>"$work/kustomize.log" ||
  fail "kubectl kustomize deploy/k8s failed: $(cat "$work/kustomize.log")"
validate "$work/rendered.yaml" >"$work/rendered.log" 2>&1 || {
  cat "$work/rendered.log" >&2
  fail "a rendered document is not valid"
}
rendered=$(grep -c '^ok ' "$work/rendered.log")
written=$(grep -c '^ok ' "$work/sources.log")
[ "$rendered" = "$written" ] ||
  fail "kustomize rendered $rendered documents from $written written ones"
rules "$work/rendered.yaml" >"$work/rules.log" 2>&1 || {
  cat "$work/rules.log" >&2
  fail "the rendered manifests break the deployment's rules"
}
say "kubectl kustomize deploy/k8s: $rendered documents valid, the deployment's rules hold"

# ---- broken copies must fail, each naming its fault
# break_copy FAULT OUT: the rendered documents with FAULT planted.
break_copy() {
  "$py" - "$1" "$work/rendered.yaml" "$2" <<'EOF'
import sys, yaml
fault, source, out = sys.argv[1:]
docs = [d for d in yaml.safe_load_all(open(source)) if d]
def find(kind, name=None):
    return next(d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))
worker = find("Deployment")
coordinator = find("StatefulSet")
worker_container = worker["spec"]["template"]["spec"]["containers"][0]
coordinator_container = coordinator["spec"]["template"]["spec"]["containers"][0]
if fault == "replicas-not-integer":
    worker["spec"]["replicas"] = "two"
elif fault == "pull-policy-enum":
    coordinator_container["imagePullPolicy"] = "Sometimes"
elif fault == "container-without-name":
    del worker_container["name"]
elif fault == "deployment-without-selector":
    del worker["spec"]["selector"]
elif fault == "service-protocol-enum":
    find("Service")["spec"]["ports"][0]["protocol"] = "SCTPX"
elif fault == "policy-type-enum":
    find("NetworkPolicy", "forktrial-worker")["spec"]["policyTypes"] = ["Inbound"]
elif fault == "unknown-kind":
    coordinator["kind"] = "StatefulSett"
elif fault == "readiness-path":
    worker_container["readinessProbe"]["httpGet"]["path"] = "/ready"
elif fault == "undefined-variable":
    worker_container["args"] = [a.replace("$(FORKTRIAL_SLOTS)", "$(FORKTRIAL_SLOT)") for a in worker_container["args"]]
elif fault == "two-coordinators":
    coordinator["spec"]["replicas"] = 2
elif fault == "worker-open-port":
    find("NetworkPolicy", "forktrial-worker")["spec"]["ingress"][0]["ports"].append({"port": 22, "protocol": "TCP"})
elif fault == "undocumented-key-file":
    worker_container["args"] = [a.replace("worker.key", "node.key") for a in worker_container["args"]]
elif fault == "probe-off-http-port":
    coordinator_container["livenessProbe"]["httpGet"]["port"] = "zmq"
else:
    sys.exit(f"no fault named {fault}")
yaml.safe_dump_all(docs, open(out, "w"))
EOF
}

# expect_failure CHECK FAULT TEXT: CHECK (validate or rules) must fail on the
# copy with FAULT, and say TEXT.
expect_failure() {
  local check=$1 fault=$2 text=$3 copy=$work/broken-$2.yaml
  break_copy "$fault" "$copy" || fail "could not plant $fault"
  if "$check" "$copy" >"$work/broken.log" 2>&1; then
    fail "$check passed a copy with the fault $fault"
  fi
  grep -qF -- "$text" "$work/broken.log" || {
    cat "$work/broken.log" >&2
    fail "$check failed on $fault without saying '$text'"
  }
  rm -f "$copy"
}
expect_failure validate replicas-not-integer "spec/replicas must be integer"
expect_failure validate pull-policy-enum "imagePullPolicy must be equal to one of the allowed values"
expect_failure validate container-without-name "containers/0 must have required property name"
expect_failure validate deployment-without-selector "spec must have required property selector"
expect_failure validate service-protocol-enum "ports/0/protocol must be equal to one of the allowed values"
expect_failure validate policy-type-enum "policyTypes/0 must be equal to one of the allowed values"
expect_failure validate unknown-kind "no such kind in the API: apps/v1 StatefulSett"
expect_failure rules readiness-path "readinessProbe asks /ready, not /readyz"
expect_failure rules undefined-variable "\$(FORKTRIAL_SLOT) in args is defined neither"
expect_failure rules two-coordinators "runs 2 replicas; it must be exactly one"
expect_failure rules worker-open-port "the workers accept ports"
expect_failure rules undocumented-key-file "README puts ['coordinator.key.pub', 'worker.key'] in it"
expect_failure rules probe-off-http-port "livenessProbe asks port 7600, --http serves 7680"
say "13 broken copies failed, each naming its fault"
