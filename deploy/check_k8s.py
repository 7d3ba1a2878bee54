"""Offline structural check of deploy/k8s/*.yaml (scripts/test.sh runs it).

`kubectl apply --dry-run=client` needs an API server for resource discovery, so CI cannot run
it; this parses every manifest and checks what must agree between them: names, labels and
selectors, port names, probes, the mounted config and state paths, the grace period against
the config's `log.shutdown_timeout`, and the StatefulSet's static group membership.

Usage: python3 deploy/check_k8s.py [deploy/k8s]   (needs PyYAML; Python >= 3.11 for tomllib)
"""

import pathlib
import re
import sys
import tomllib

import yaml

CONFIG = "/etc/neyman/kafka.toml"


def fail(message):
    sys.exit(f"deploy/k8s: {message}")


def seconds(duration):
    """A neyman duration ("10s", "500ms", "2m") in seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", duration)
    if not m:
        fail(f"unreadable duration {duration!r}")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return int(m.group(1)) * scale


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/k8s")
    docs = {}
    for path in sorted(root.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is None:
                continue
            for key in ("apiVersion", "kind", "metadata"):
                if key not in doc:
                    fail(f"{path}: a document without {key}")
            name = doc["metadata"].get("name")
            if not name:
                fail(f"{path}: {doc['kind']} without metadata.name")
            docs[doc["kind"]] = doc
    want = {"ConfigMap", "Deployment", "StatefulSet", "Service", "PodMonitor"}
    if set(docs) != want:
        fail(f"kinds {sorted(docs)}, want {sorted(want)}")
    if docs["PodMonitor"]["apiVersion"] != "monitoring.coreos.com/v1":
        fail("PodMonitor is not monitoring.coreos.com/v1")

    configmap = docs["ConfigMap"]
    config = tomllib.loads(configmap["data"]["kafka.toml"])
    grace_min = seconds(config["log"]["shutdown_timeout"])
    if config["http"]["listen"] != "0.0.0.0:8787":
        fail("the ConfigMap's http.listen is not 0.0.0.0:8787")

    port_names = set()
    for kind in ("Deployment", "StatefulSet"):
        w = docs[kind]
        spec = w["spec"]
        pod = spec["template"]
        labels = pod["metadata"]["labels"]
        for k, v in spec["selector"]["matchLabels"].items():
            if labels.get(k) != v:
                fail(f"{kind}: selector {k}={v} does not match the pod labels")
        pspec = pod["spec"]
        if pspec["terminationGracePeriodSeconds"] <= grace_min:
            fail(f"{kind}: terminationGracePeriodSeconds <= log.shutdown_timeout ({grace_min} s)")
        (c,) = pspec["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        if ports.get("http") != 8787:
            fail(f"{kind}: no container port http = 8787")
        port_names |= set(ports)
        if c["args"] != ["run", "--config", CONFIG]:
            fail(f"{kind}: args {c['args']}")
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = c[probe]["httpGet"]
            if get["path"] != path or get["port"] not in ports:
                fail(f"{kind}: {probe} is {get}, want {path} on a declared port")
        env = {e["name"]: e for e in c.get("env", [])}
        if env.get("NEYMAN_HTTP_LISTEN", {}).get("value") != "0.0.0.0:8787":
            fail(f"{kind}: NEYMAN_HTTP_LISTEN is not 0.0.0.0:8787")
        if "NEYMAN_KAFKA_BOOTSTRAP_SERVERS" not in env:
            fail(f"{kind}: no NEYMAN_KAFKA_BOOTSTRAP_SERVERS")
        static = env.get("NEYMAN_KAFKA_GROUP_INSTANCE_ID")
        if kind == "StatefulSet":
            ref = (static or {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if ref != "metadata.name":
                fail("StatefulSet: NEYMAN_KAFKA_GROUP_INSTANCE_ID is not the pod name")
            if spec["serviceName"] != docs["Service"]["metadata"]["name"]:
                fail("StatefulSet: serviceName is not the Service")
        elif static is not None:
            fail("Deployment: replicas cannot share a group.instance.id")
        volumes = {v["name"]: v for v in pspec["volumes"]}
        claims = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        mounts = {}
        writable = []
        for m in c["volumeMounts"]:
            if m["name"] not in volumes and m["name"] not in claims:
                fail(f"{kind}: mount {m['name']} has no volume")
            mounts[m["mountPath"]] = m["name"]
            if not m.get("readOnly", False):
                writable.append(pathlib.PurePosixPath(m["mountPath"]))
        config_volume = volumes.get(mounts.get(str(pathlib.PurePosixPath(CONFIG).parent)))
        if not config_volume or config_volume["configMap"]["name"] != configmap["metadata"]["name"]:
            fail(f"{kind}: {CONFIG} is not the ConfigMap")
        state = pathlib.PurePosixPath(config["state"]["dir"])
        if not any(state.is_relative_to(p) for p in writable):
            fail(f"{kind}: state.dir {state} is on no writable volume")
        pod_labels = labels

    service = docs["Service"]["spec"]
    for k, v in service["selector"].items():
        if pod_labels.get(k) != v:
            fail(f"Service: selector {k}={v} selects no neyman pod")
    (sport,) = service["ports"]
    if sport["name"] != "http" or sport["port"] != 8787 or sport["targetPort"] not in port_names:
        fail(f"Service: port {sport}")

    monitor = docs["PodMonitor"]["spec"]
    for k, v in monitor["selector"]["matchLabels"].items():
        if pod_labels.get(k) != v:
            fail(f"PodMonitor: selector {k}={v} selects no neyman pod")
    (endpoint,) = monitor["podMetricsEndpoints"]
    if endpoint["port"] not in port_names or endpoint["path"] != "/metrics":
        fail(f"PodMonitor: endpoint {endpoint}")
    print(f"deploy/k8s: {len(docs)} manifests agree")


if __name__ == "__main__":
    main()
