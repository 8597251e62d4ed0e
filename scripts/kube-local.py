#!/usr/bin/env python3
"""Derives from `kubectl kustomize deploy/k8s` the variant that podman 4.3.1's
`kube play` runs on one machine, changing only what podman cannot take:

  kube-local.py RENDERED SECRETS OUT PROBES --image TAG --keys-dir DIR
                [--publish NAME=HOSTPORT]... [--workers N] [--claims-exist]

RENDERED: the kustomize output. SECRETS: Secret documents (what `kubectl
create secret generic ... --dry-run=client -o yaml` prints), whose data is
written into KEYS_DIR/<secret name>/ as the kubelet would mount it (mode 0440,
group 65534: the manifests' defaultMode and fsGroup). OUT: the YAML to play.
PROBES: JSON, the probes the manifests declare, for the test to perform.

What changes, and why:
- Namespace, Service and NetworkPolicy are left out: podman ignores them.
- The StatefulSet becomes a Pod named after its Service, so that the Service's
  name (the endpoint in the ConfigMap) resolves to it on a podman network with
  DNS; its volumeClaimTemplates become PersistentVolumeClaims (podman makes a
  named volume of each), named as the StatefulSet controller names them.
  With --claims-exist they are left out and the pod mounts the volumes a
  previous play made: podman refuses a claim whose volume exists, and `kube
  down` keeps them, as a cluster keeps a StatefulSet's claims.
- The Deployment becomes its replicas (--workers sets how many) as Pods
  named NAME-0, NAME-1...: podman 4.3.1 makes an emptyDir a named volume
  called after the volume, so a Deployment's replicas (and every pod with an
  emptyDir of that name) would share one; here each pod's emptyDirs are
  renamed after the pod.
- Images: TAG, imagePullPolicy Never (anything else means a pull).
- $(NAME) in command and args is expanded from the container's env and
  envFrom ConfigMaps, as the kubelet does: podman passes it on verbatim.
- Secret volumes become hostPath volumes of KEYS_DIR/<secret name>: podman
  4.3.1's kube play dies on a secret volume (nil pointer in VolumeFromSecret).
- livenessProbe and readinessProbe are removed and listed in PROBES: podman
  ignores readiness, and turns an httpGet liveness probe into a healthcheck
  running `curl` through /bin/sh, which the image does not have, on a systemd
  timer, which this machine does not run.
- --publish NAME=HOSTPORT publishes the container port named NAME (of the
  StatefulSet's pod) on 127.0.0.1:HOSTPORT. Every other port is removed:
  podman 4.3.1 publishes a containerPort without a hostPort on the host's
  every address (so two workers' 7681 collide, and the coordinator's would be
  open to the network).
"""
import argparse
import base64
import copy
import json
import os
import re
import sys

import yaml

IGNORED_KINDS = {"Namespace", "Service", "NetworkPolicy"}
NOBODY = 65534


def die(message):
    print(f"kube-local: {message}", file=sys.stderr)
    sys.exit(1)


def load_all(path):
    with open(path, encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc]


def write_secret(secret, keys_dir):
    name = secret["metadata"]["name"]
    directory = os.path.join(keys_dir, name)
    os.makedirs(directory, exist_ok=True)
    os.chown(directory, 0, NOBODY)
    os.chmod(directory, 0o750)
    items = {key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()}
    items.update({key: value.encode() for key, value in (secret.get("stringData") or {}).items()})
    for key, content in items.items():
        path = os.path.join(directory, key)
        with open(path, "wb") as out:
            out.write(content)
        os.chown(path, 0, NOBODY)
        os.chmod(path, 0o440)
    return directory


def expand(text, env, where):
    def value(match):
        name = match.group(1)
        if name not in env:
            die(f"{where}: $({name}) names no variable of the container's env or envFrom")
        return env[name]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value, text)


def container_env(container, config_maps, where):
    env = {}
    for source in container.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref is None:
            die(f"{where}: envFrom other than configMapRef is not handled")
        if ref["name"] not in config_maps:
            die(f"{where}: envFrom names ConfigMap {ref['name']}, which the manifests lack")
        env.update(config_maps[ref["name"]])
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = variable["value"]
    return env


def adapt_pod_spec(spec, workload, options, config_maps, probes):
    for volume in spec.get("volumes", []):
        if "secret" in volume:
            name = volume.pop("secret")["secretName"]
            path = os.path.join(options.keys_dir, name)
            if not os.path.isdir(path):
                die(f"{workload}: volume {volume['name']} mounts Secret {name}, which was not given")
            volume["hostPath"] = {"path": path, "type": "Directory"}
    for container in spec["containers"]:
        where = f"{workload}/{container['name']}"
        container["image"] = options.image
        container["imagePullPolicy"] = "Never"
        env = container_env(container, config_maps, where)
        for field in ("command", "args"):
            if field in container:
                container[field] = [expand(arg, env, where) for arg in container[field]]
        named_ports = {port["name"]: port for port in container.get("ports", []) if "name" in port}
        for kind in ("livenessProbe", "readinessProbe"):
            probe = container.pop(kind, None)
            if probe is None:
                continue
            get = probe.get("httpGet")
            if get is None:
                die(f"{where}: {kind} is not an httpGet probe")
            port = get["port"]
            if isinstance(port, str):
                if port not in named_ports:
                    die(f"{where}: {kind} names port {port}, which the container does not declare")
                port = named_ports[port]["containerPort"]
            probes.append({"workload": workload, "container": container["name"],
                           "probe": kind, "path": get["path"], "port": port})


def own_empty_dirs(spec, pod_name):
    renamed = {}
    for volume in spec.get("volumes", []):
        if "emptyDir" in volume:
            renamed[volume["name"]] = volume["name"] = f"{pod_name}-{volume['name']}"
    for container in spec["containers"]:
        for mount in container.get("volumeMounts", []):
            mount["name"] = renamed.get(mount["name"], mount["name"])


def publish(spec, workload, mapping):
    seen = set()
    for container in spec["containers"]:
        published = []
        for port in container.get("ports", []):
            if port.get("name") in mapping:
                port["hostPort"] = mapping[port["name"]]
                port["hostIP"] = "127.0.0.1"
                seen.add(port["name"])
                published.append(port)
        container["ports"] = published
    missing = set(mapping) - seen
    if missing:
        die(f"{workload}: no container port named {', '.join(sorted(missing))} to publish")


def pod_of(template, name, spec):
    own_empty_dirs(spec, name)
    spec["restartPolicy"] = "Always"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": template["metadata"].get("labels", {})},
            "spec": spec}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rendered")
    parser.add_argument("secrets")
    parser.add_argument("out")
    parser.add_argument("probes")
    parser.add_argument("--image", required=True)
    parser.add_argument("--keys-dir", required=True)
    parser.add_argument("--publish", action="append", default=[])
    parser.add_argument("--workers", type=int)
    parser.add_argument("--claims-exist", action="store_true")
    options = parser.parse_args()
    if not os.path.isabs(options.keys_dir) or not os.path.isdir(options.keys_dir):
        die(f"--keys-dir {options.keys_dir}: give an existing directory, by its absolute path")
    mapping = {}
    for item in options.publish:
        name, _, port = item.partition("=")
        if not port.isdigit():
            die(f"--publish {item}: give NAME=HOSTPORT")
        mapping[name] = int(port)

    for secret in load_all(options.secrets):
        if secret.get("kind") != "Secret":
            die(f"{options.secrets}: a {secret.get('kind')} where Secrets were expected")
        write_secret(secret, options.keys_dir)

    docs = load_all(options.rendered)
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    out, probes, left_out = [], [], []
    stateful_sets = 0
    for doc in docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if kind in IGNORED_KINDS:
            left_out.append(f"{kind}/{name}")
        elif kind == "ConfigMap":
            out.append(doc)
        elif kind == "StatefulSet":
            stateful_sets += 1
            spec = doc["spec"]
            if spec.get("replicas", 1) != 1:
                die(f"StatefulSet/{name}: the local variant runs one replica")
            pod_spec = copy.deepcopy(spec["template"]["spec"])
            for claim in spec.get("volumeClaimTemplates", []):
                claim_name = f"{claim['metadata']['name']}-{name}-0"
                if not options.claims_exist:
                    out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "metadata": {"name": claim_name}, "spec": claim["spec"]})
                pod_spec.setdefault("volumes", []).append(
                    {"name": claim["metadata"]["name"],
                     "persistentVolumeClaim": {"claimName": claim_name}})
            adapt_pod_spec(pod_spec, name, options, config_maps, probes)
            publish(pod_spec, name, mapping)
            out.insert(0, pod_of(spec["template"], spec["serviceName"], pod_spec))
        elif kind == "Deployment":
            replicas = options.workers if options.workers is not None else doc["spec"].get("replicas", 1)
            template_spec = copy.deepcopy(doc["spec"]["template"]["spec"])
            adapt_pod_spec(template_spec, name, options, config_maps, probes)
            publish(template_spec, name, {})
            for index in range(replicas):
                out.append(pod_of(doc["spec"]["template"], f"{name}-{index}",
                                  copy.deepcopy(template_spec)))
        else:
            die(f"{kind}/{name}: the local variant does not know this kind")
    if stateful_sets != 1:
        die(f"expected one StatefulSet (the coordinator), found {stateful_sets}")
    # ConfigMaps and claims first, so that the pods find them; the
    # coordinator's pod (inserted first) before the workers' (a stable sort).
    order = {"ConfigMap": 0, "PersistentVolumeClaim": 1, "Pod": 2}
    out.sort(key=lambda d: order[d["kind"]])
    with open(options.out, "w", encoding="utf-8") as stream:
        yaml.safe_dump_all(out, stream, sort_keys=False)
    with open(options.probes, "w", encoding="utf-8") as stream:
        json.dump(probes, stream, indent=1)
    print("kube-local: left out (podman ignores them): " + ", ".join(left_out))


if __name__ == "__main__":
    main()
