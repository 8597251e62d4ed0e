#!/usr/bin/env python3
"""What forktrial's Kubernetes manifests must hold beyond the API's schemas,
checked on what `kubectl kustomize deploy/k8s` renders:

  k8s-rules.py RENDERED README

- the objects: a Namespace, the ConfigMap, the coordinator's headless Service
  and its StatefulSet of one replica with a volume claim, the workers'
  Deployment, a NetworkPolicy for each; all in one namespace;
- selectors match their pods, and the Service and each policy select the
  pods they are meant for and no others;
- every container: the image, requests and limits of cpu and memory (a
  request no more than its limit), non-root, no privilege escalation, a
  read-only root filesystem; liveness /healthz and readiness /readyz probes
  over HTTP on the port `--http 0.0.0.0:PORT` serves;
- every $(NAME) in args is defined; every mount names a volume;
- the ConfigMap's endpoint is the Service's ZeroMQ port, its store lies on
  the claim;
- every key file the args name lies on a Secret's mount, and README's
  `kubectl create secret generic NAME --from-file=...` commands put exactly
  those files in that Secret;
- the policies: workers reach the coordinator's ZeroMQ port and accept only
  their HTTP port.

Prints one line per broken rule; exits 0 when none is, 1 otherwise.
"""
import re
import sys

import yaml

problems = []


def problem(text):
    problems.append(text)


def parse_quantity(text):
    text = str(text)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text)
    if not match or (match.group(2) and match.group(2) not in units):
        raise ValueError(f"not a quantity: {text}")
    return float(match.group(1)) * units.get(match.group(2), 1)


def selects(selector, labels):
    return all(labels.get(key) == value for key, value in (selector or {}).items())


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        problem(f"expected one {kind}{' ' + name if name else ''}, found {len(found)}")
        return None
    return found[0]


def readme_secrets(path):
    """{secret name: set of file names} from README's kubectl create secret commands."""
    with open(path, encoding="utf-8") as stream:
        text = stream.read().replace("\\\n", " ")
    secrets = {}
    for line in text.splitlines():
        match = re.search(r"kubectl .*create secret generic (\S+)(.*)", line)
        if match:
            files = set(re.findall(r"--from-file=(?:[^=\s]+=)?(\S+)", match.group(2)))
            secrets.setdefault(match.group(1), set()).update(f.split("/")[-1] for f in files)
    return secrets


def check_container(container, pod_spec, where, env, claim_mounts):
    args = container.get("args", [])
    if not re.fullmatch(r"\S+/forktrial:\S+", container.get("image", "")):
        problem(f"{where}: image {container.get('image')} is not a tagged forktrial image (kustomize's images:)")
    if "imagePullPolicy" not in container:
        problem(f"{where}: no imagePullPolicy")
    resources = container.get("resources", {})
    for resource in ("cpu", "memory"):
        request = resources.get("requests", {}).get(resource)
        limit = resources.get("limits", {}).get(resource)
        if request is None or limit is None:
            problem(f"{where}: no {resource} request or limit")
        elif parse_quantity(request) > parse_quantity(limit):
            problem(f"{where}: {resource} request {request} exceeds its limit {limit}")
    pod_security = pod_spec.get("securityContext", {})
    security = container.get("securityContext", {})
    if not (security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True):
        problem(f"{where}: runAsNonRoot is not true")
    if security.get("runAsUser", pod_security.get("runAsUser")) != 65534:
        problem(f"{where}: does not run as 65534, the image's user")
    if security.get("allowPrivilegeEscalation") is not False:
        problem(f"{where}: allowPrivilegeEscalation is not false")
    if security.get("readOnlyRootFilesystem") is not True:
        problem(f"{where}: readOnlyRootFilesystem is not true")

    http = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--http"]
    if len(http) != 1 or not re.fullmatch(r"0\.0\.0\.0:\d+", http[0]):
        problem(f"{where}: args need one --http 0.0.0.0:PORT (the probes reach it from the node)")
        http_port = None
    else:
        http_port = int(http[0].split(":")[1])
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    for kind, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = (container.get(kind) or {}).get("httpGet")
        if get is None:
            problem(f"{where}: no httpGet {kind}")
            continue
        if get.get("path") != path:
            problem(f"{where}: {kind} asks {get.get('path')}, not {path}")
        port = get.get("port")
        port = ports.get(port) if isinstance(port, str) else port
        if port is None:
            problem(f"{where}: {kind} names port {get.get('port')}, which the container does not declare")
        elif http_port is not None and port != http_port:
            problem(f"{where}: {kind} asks port {port}, --http serves {http_port}")

    for arg in args:
        for name in re.findall(r"\$\(([^)]*)\)", arg):
            if name not in env:
                problem(f"{where}: $({name}) in args is defined neither by env nor by a ConfigMap")
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    secret_mounts = {}
    for mount in container.get("volumeMounts", []):
        if mount["name"] in claim_mounts:
            continue
        if mount["name"] not in volumes:
            problem(f"{where}: mount {mount['mountPath']} names no volume ({mount['name']})")
        elif "secret" in volumes[mount["name"]]:
            secret_mounts[mount["mountPath"].rstrip("/")] = volumes[mount["name"]]["secret"]["secretName"]
    used = {}
    for arg in args:
        if arg.startswith("/etc/forktrial/"):
            directory, _, file = arg.rpartition("/")
            if directory not in secret_mounts:
                problem(f"{where}: {arg} lies on no Secret's mount")
            else:
                used.setdefault(secret_mounts[directory], set()).add(file)
    return used


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: k8s-rules.py RENDERED README")
    with open(sys.argv[1], encoding="utf-8") as stream:
        docs = [d for d in yaml.safe_load_all(stream) if d]
    one(docs, "Namespace")
    config = one(docs, "ConfigMap", "forktrial-config")
    service = one(docs, "Service", "forktrial-coordinator")
    coordinator = one(docs, "StatefulSet", "forktrial-coordinator")
    worker = one(docs, "Deployment", "forktrial-worker")
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    if None in (config, service, coordinator, worker):
        return
    namespaces = {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"}
    if len(namespaces) != 1 or None in namespaces:
        problem(f"the objects are not all in one namespace: {sorted(map(str, namespaces))}")

    config_data = config.get("data", {})
    workloads = {"coordinator": coordinator, "worker": worker}
    labels = {}
    used_secrets = {}
    for role, workload in workloads.items():
        spec = workload["spec"]
        template_labels = spec["template"]["metadata"].get("labels", {})
        labels[role] = template_labels
        if not selects(spec["selector"].get("matchLabels"), template_labels):
            problem(f"{role}: the selector does not match its pods' labels")
        claim_mounts = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
        pod_spec = spec["template"]["spec"]
        for container in pod_spec["containers"]:
            env = {}
            for source in container.get("envFrom", []):
                if source.get("configMapRef", {}).get("name") == config["metadata"]["name"]:
                    env.update(config_data)
                else:
                    problem(f"{role}: envFrom names something other than the ConfigMap")
            env.update({e["name"]: e.get("value") for e in container.get("env", [])})
            for name, files in check_container(container, pod_spec, f"{role}/{container['name']}",
                                               env, claim_mounts).items():
                used_secrets.setdefault(name, set()).update(files)

    # The coordinator: one replica, a claim holding the store, the Service.
    spec = coordinator["spec"]
    if spec.get("replicas") != 1:
        problem(f"the coordinator runs {spec.get('replicas')} replicas; it must be exactly one")
    if spec.get("serviceName") != service["metadata"]["name"]:
        problem("the StatefulSet's serviceName is not the coordinator's Service")
    if service["spec"].get("clusterIP") != "None":
        problem("the coordinator's Service is not headless (clusterIP: None)")
    if not service["spec"].get("publishNotReadyAddresses"):
        problem("the coordinator's Service hides it while not ready (publishNotReadyAddresses)")
    if not selects(service["spec"].get("selector"), labels["coordinator"]) or selects(
            service["spec"].get("selector"), labels["worker"]):
        problem("the Service's selector must select the coordinator's pods and not the workers'")
    claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    container = spec["template"]["spec"]["containers"][0]
    claim_paths = [m["mountPath"] for m in container.get("volumeMounts", []) if m["name"] in claims]
    store = config_data.get("FORKTRIAL_STORE", "")
    if not any(store.startswith(path.rstrip("/") + "/") for path in claim_paths):
        problem(f"FORKTRIAL_STORE {store!r} lies on no volume claim")
    service_ports = {p["name"]: p for p in service["spec"].get("ports", [])}
    container_ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    for name, port in service_ports.items():
        if port.get("targetPort") not in container_ports:
            problem(f"the Service's port {name} targets {port.get('targetPort')}, which the coordinator lacks")
    zmq = service_ports.get("zmq", {}).get("port")
    expected = f"tcp://{service['metadata']['name']}:{zmq}"
    if config_data.get("FORKTRIAL_COORDINATOR") != expected:
        problem(f"FORKTRIAL_COORDINATOR is {config_data.get('FORKTRIAL_COORDINATOR')!r}, not {expected!r}")

    # The Secrets: what the args use is what README's commands make.
    documented = readme_secrets(sys.argv[2])
    for name, files in used_secrets.items():
        if name not in documented:
            problem(f"Secret {name}: README has no `kubectl create secret generic {name}` command")
        elif documented[name] != files:
            problem(f"Secret {name}: README puts {sorted(documented[name])} in it, the args use {sorted(files)}")

    # The policies.
    by_role = {}
    for policy in policies:
        selected = [role for role, own in labels.items()
                    if selects(policy["spec"]["podSelector"].get("matchLabels"), own)]
        if len(selected) != 1:
            problem(f"NetworkPolicy {policy['metadata']['name']} selects {selected or 'nothing'}")
        else:
            by_role[selected[0]] = policy["spec"]
    if set(by_role) != {"coordinator", "worker"}:
        problem("each of the coordinator and the workers needs a NetworkPolicy of its own")
        return
    worker_policy = by_role["worker"]
    if set(worker_policy.get("policyTypes", [])) != {"Ingress", "Egress"}:
        problem("the workers' policy must restrict both Ingress and Egress")
    worker_http = {p["containerPort"] for p in worker["spec"]["template"]["spec"]["containers"][0]["ports"]}
    ingress_ports = {p.get("port") for rule in worker_policy.get("ingress", []) for p in rule.get("ports", [])}
    if ingress_ports != worker_http or any(not rule.get("ports") for rule in worker_policy.get("ingress", [])):
        problem(f"the workers accept ports {sorted(map(str, ingress_ports))}, not just their HTTP port")
    reaches = any(
        zmq in {p.get("port") for p in rule.get("ports", [])}
        and any(selects(peer.get("podSelector", {}).get("matchLabels"), labels["coordinator"])
                for peer in rule.get("to", []))
        for rule in worker_policy.get("egress", []))
    if not reaches:
        problem(f"the workers' policy lets them reach no coordinator port {zmq}")
    admits = any(
        zmq in {p.get("port") for p in rule.get("ports", [])}
        and any(selects(peer.get("podSelector", {}).get("matchLabels"), labels["worker"])
                and "namespaceSelector" not in peer for peer in rule.get("from", []))
        for rule in by_role["coordinator"].get("ingress", []))
    if not admits:
        problem(f"the coordinator's policy does not admit its workers on port {zmq}")


if __name__ == "__main__":
    try:
        main()
    except (KeyError, TypeError, ValueError, IndexError) as error:
        problem(f"malformed manifests: {type(error).__name__}: {error}")
    for text in problems:
        print(f"k8s-rules: {text}")
    sys.exit(1 if problems else 0)
