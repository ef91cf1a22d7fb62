"""What deploy/k8s/smoke.sh needs to run a rendered overlay with `podman kube play` (podman 4.3), which is not
a Kubernetes: no controllers, no Services, no probes of its own that match the kubelet's.

  adapt RENDERED OUT_DIR --revision r1 --ip-base 10.213.77.11 --secrets-dir DIR [--services-from SERVICES.json]
      One Pod file per Deployment (its ConfigMaps beside it, the only other kind podman 4.3 plays), named
      <deployment>-<revision>, with a static IP. Prints every object or field left out and why. What
      kubectl would do differently:
        - Service: none in podman. Each Service's cluster DNS names go into every Pod's /etc/hosts
          (hostAliases) as the IP of the Pod it selects: what a headless Service's DNS gives for one
          ready replica. --services-from keeps the previous revision's addresses: a Pod of a rollout is
          not behind the Services until it is ready.
        - Secret: podman 4.3 crashes on secret volumes (a nil pointer in kube.VolumeFromSecret), so each
          one becomes a read-only host directory holding the Secret's keys as files: compose's
          bind-mounted secret file.
        - probes: podman ignores gRPC probes and runs httpGet ones with a curl the image lacks; they are
          removed from the Pod and run by `wait` instead, from the Pod's spec (kept in <deployment>.probes.json).
        - containerPorts: podman 4.3 publishes them on the host; they are removed (the Pods are reached
          by their IPs, as in a cluster). preStop hooks: not run. restartPolicy: Never (podman would
          restart a crashing container without the kubelet's back-off).
        - init containers: podman 4.3 here returns before they end, then fails to remove them; they run
          with `init` (podman run) before the Pod is played.
        - emptyDir: podman 4.3 shares one volume among all Pods with an emptyDir of the same name; each
          becomes a named volume of its Pod's own (<pod>-<volume>).
        - NetworkPolicy, PodDisruptionBudget, HorizontalPodAutoscaler, Namespace, PodMonitor: not run.
  init POD_FILE
      Runs the Pod's init containers, in order, each to completion.
  wait POD_FILE... [--expect-unready --within S]
      Probes a played Pod as the kubelet would, from the rendered probe specs: startupProbe until it
      passes, then readinessProbe, then livenessProbe once. gRPC probes call grpc.health.v1 Check on the
      Pod IP, httpGet probes GET the Pod IP, exec probes run through `podman exec`. Exit 0 once every
      container is ready; with --expect-unready, exit 0 only if every Pod is still not ready after S s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

PLAYED_KINDS = {"Deployment", "ConfigMap"}
CLUSTER_DOMAIN = "svc.cluster.local"
PROBE_KINDS = ("startupProbe", "readinessProbe", "livenessProbe")
# Fields podman 4.3 plays wrongly or not at all; the Pod runs without them (the kubelet's job here is `wait`).
# ports: podman 4.3 publishes every containerPort on the host; the Pods are reached by their IPs, as in a cluster.
DROPPED_CONTAINER_FIELDS = (*PROBE_KINDS, "lifecycle", "ports")


def load(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


def adapt(args: argparse.Namespace) -> int:
    objects = load(Path(args.rendered))
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    configmaps = {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "ConfigMap"}
    deployments = [obj for obj in objects if obj["kind"] == "Deployment"]
    for obj in objects:
        if obj["kind"] not in PLAYED_KINDS:
            print(f"  not run by podman: {obj['kind']}/{obj['metadata']['name']}")

    prefix, last = args.ip_base.rsplit(".", 1)
    addresses = {dep["metadata"]["name"]: f"{prefix}.{int(last) + index}" for index, dep in enumerate(deployments)}
    if args.services_from:
        service_ips = json.loads(Path(args.services_from).read_text(encoding="utf-8"))
    else:
        service_ips = {}
        for service in (obj for obj in objects if obj["kind"] == "Service"):
            namespace = service["metadata"].get("namespace", "default")
            selected = [dep for dep in deployments if selects(service["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])]
            assert len(selected) == 1, f"Service {service['metadata']['name']}: selects {len(selected)} Deployments"
            name = service["metadata"]["name"]
            for hostname in (f"{name}.{namespace}.{CLUSTER_DOMAIN}", f"{name}.{namespace}", name):
                service_ips[hostname] = addresses[selected[0]["metadata"]["name"]]
    (out / "services.json").write_text(json.dumps(service_ips, indent=1), encoding="utf-8")
    by_ip: dict[str, list[str]] = {}
    for hostname, ip in service_ips.items():
        by_ip.setdefault(ip, []).append(hostname)

    for dep in deployments:
        name = dep["metadata"]["name"]
        template = dep["spec"]["template"]
        spec = dict(template["spec"])
        pod_security = spec.get("securityContext", {})
        print(f"  Deployment/{name}: one Pod {name}-{args.revision} at {addresses[name]} (replicas {dep['spec'].get('replicas', 1)} -> 1)")
        # The kubelet restarts a crashed container with a growing back-off; podman restarts it at once, hundreds
        # of times a minute. Here a crash stays visible as an exited container.
        spec["restartPolicy"] = "Never"
        spec["hostAliases"] = [{"ip": ip, "hostnames": sorted(names)} for ip, names in sorted(by_ip.items())]
        probes = {}
        for key in ("initContainers", "containers"):
            containers = []
            for container in spec.get(key, []):
                container = dict(container)
                probes[container["name"]] = {
                    "ports": {port.get("name", str(port["containerPort"])): port["containerPort"] for port in container.get("ports", [])},
                    **{kind: container[kind] for kind in PROBE_KINDS if kind in container},
                }
                for field in DROPPED_CONTAINER_FIELDS:
                    container.pop(field, None)
                containers.append(container)
            if containers:
                spec[key] = containers
        init_containers = spec.pop("initContainers", [])
        volumes, used_configmaps = [], []
        for volume in spec.get("volumes", []):
            if "emptyDir" in volume:
                # podman 4.3 makes an emptyDir a volume named after it, which every Pod with an emptyDir of that
                # name shares: one named volume per Pod instead (also where init containers leave their output).
                volume = {"name": volume["name"], "persistentVolumeClaim": {"claimName": f"{name}-{args.revision}-{volume['name']}"}}
            if "secret" in volume:
                directory = Path(args.secrets_dir) / volume["secret"]["secretName"]
                if not directory.is_dir():
                    raise SystemExit(
                        f"{name}: Secret {volume['secret']['secretName']} is missing: expected its keys as files in {directory}"
                    )
                print(f"  {name}: Secret volume {volume['secret']['secretName']} -> host directory {directory} (read-only)")
                volume = {"name": volume["name"], "hostPath": {"path": str(directory.resolve()), "type": "Directory"}}
            elif "configMap" in volume:
                used_configmaps.append(volume["configMap"]["name"])
            volumes.append(volume)
        spec["volumes"] = volumes
        metadata = {
            "name": f"{name}-{args.revision}",
            "labels": template["metadata"].get("labels", {}),
        }
        if init_containers:
            print(f"  {name}: init containers {[c['name'] for c in init_containers]} -> `podman run` before the Pod")
        (out / f"{name}.init.json").write_text(
            json.dumps([init_command(c, spec, pod_security, f"{name}-{args.revision}") for c in init_containers], indent=1),
            encoding="utf-8",
        )
        documents = [configmaps[cm] for cm in used_configmaps] + [{"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}]
        (out / f"{name}.yaml").write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
        (out / f"{name}.ip").write_text(addresses[name], encoding="utf-8")
        # What `wait` needs beside the Pod file (podman refuses annotations over 63 characters).
        (out / f"{name}.probes.json").write_text(json.dumps(probes, indent=1), encoding="utf-8")
    return 0


def init_command(container: dict, spec: dict, pod_security: dict, pod_name: str) -> list[str]:
    """`podman run` for one init container: its image, args, user, read-only root, and its volumes (the Pod's named
    volumes that stand for its emptyDirs)."""
    security = {**pod_security, **container.get("securityContext", {})}
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    command = [
        "podman",
        "run",
        "--rm",
        "--name",
        f"{pod_name}-{container['name']}",
        "--user",
        f"{security['runAsUser']}:{security['runAsGroup']}",
    ]
    if security.get("readOnlyRootFilesystem"):
        command.append("--read-only")
    command += [f"--cap-drop={cap}" for cap in security.get("capabilities", {}).get("drop", [])]
    if security.get("allowPrivilegeEscalation") is False:
        command += ["--security-opt", "no-new-privileges"]
    if "memory" in container.get("resources", {}).get("limits", {}):
        command += ["--memory", str(container["resources"]["limits"]["memory"]).replace("i", "").lower()]
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        if "persistentVolumeClaim" in volume:
            command += ["-v", f"{volume['persistentVolumeClaim']['claimName']}:{mount['mountPath']}"]
        else:
            raise SystemExit(f"{pod_name}: init container volume {mount['name']}: only emptyDir volumes are rehearsed")
    if "command" in container:
        command += ["--entrypoint", container["command"][0]]
    return [*command, container["image"], *container.get("command", [])[1:], *container.get("args", [])]


def init(args: argparse.Namespace) -> int:
    for command in json.loads(Path(args.pod_file).with_suffix(".init.json").read_text(encoding="utf-8")):
        print(f"  init: {' '.join(command[command.index('--name') + 1 : command.index('--name') + 2])}", flush=True)
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            print(result.stdout[-2000:], result.stderr[-2000:])
            return 1
    return 0


# --- probes -----------------------------------------------------------------------------------------


def grpc_serving(address: str, service: str, timeout: float) -> tuple[bool, str]:
    import grpc

    # grpc.health.v1.HealthCheckRequest{service} and HealthCheckResponse{status}, encoded by hand: the
    # request is field 1 (a string), SERVING is status 1 (field 1, varint).
    request = (b"\x0a" + bytes([len(service.encode())]) + service.encode()) if service else b""
    with grpc.insecure_channel(address) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None, response_deserializer=None)
        try:
            response = check(request, timeout=timeout)
        except grpc.RpcError as error:
            return False, f"grpc {error.code().name}"
    return response == b"\x08\x01", f"grpc status bytes {response.hex() or 'empty (UNKNOWN)'}"


def run_probe(probe: dict, pod_ip: str, ports: dict, container_name: str) -> tuple[bool, str]:
    timeout = float(probe.get("timeoutSeconds", 1))
    if "grpc" in probe:
        return grpc_serving(f"{pod_ip}:{probe['grpc']['port']}", probe["grpc"].get("service", ""), timeout)
    if "httpGet" in probe:
        get = probe["httpGet"]
        port = ports.get(get["port"], get["port"])
        url = f"http://{pod_ip}:{port}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return 200 <= response.status < 400, f"GET {url}: {response.status}"
        except urllib.error.HTTPError as error:
            return False, f"GET {url}: {error.code}"
        except OSError as error:
            return False, f"GET {url}: {error}"
    if "exec" in probe:
        result = subprocess.run(["podman", "exec", container_name, *probe["exec"]["command"]], capture_output=True, timeout=timeout + 5)
        return result.returncode == 0, f"exec exit {result.returncode}"
    if "tcpSocket" in probe:
        import socket

        try:
            socket.create_connection((pod_ip, ports.get(probe["tcpSocket"]["port"], probe["tcpSocket"]["port"])), timeout=timeout).close()
            return True, "tcp connect"
        except OSError as error:
            return False, f"tcp {error}"
    raise SystemExit(f"unknown probe {probe}")


def container_state(name: str) -> str:
    result = subprocess.run(
        ["podman", "inspect", name, "--format", "{{.State.Status}} exit={{.State.ExitCode}} restarts={{.RestartCount}}"],
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() or result.stderr.strip()


def wait(args: argparse.Namespace) -> int:
    """Probe the containers of every Pod file at once, each on its own probes' schedule."""
    containers = {}  # (pod name, container name) -> what its probing needs
    for pod_file in map(Path, args.pod_files):
        (pod,) = [doc for doc in load(pod_file) if doc["kind"] == "Pod"]
        probes = json.loads(pod_file.with_suffix(".probes.json").read_text(encoding="utf-8"))
        for container in pod["spec"]["containers"]:
            spec = probes[container["name"]]
            containers[pod["metadata"]["name"], container["name"]] = {
                "ip": pod_file.with_suffix(".ip").read_text(encoding="utf-8").strip(),
                "ports": spec["ports"],
                "probes": spec,
                # startup, then readiness, then liveness (once): the order in which the kubelet lets each one count
                "stages": [kind for kind in PROBE_KINDS if kind in spec],
                "failures": 0,
                "last": "not probed yet",
            }
    started = time.monotonic()
    for state in containers.values():
        state["next_at"] = started + (state["probes"][state["stages"][0]].get("initialDelaySeconds", 0) if state["stages"] else 0)
    deadline = started + (args.within or 24 * 3600)
    pending = set(containers)
    while pending and time.monotonic() < deadline:
        for key in sorted(pending):
            state, (pod_name, name) = containers[key], key
            if time.monotonic() < state["next_at"]:
                continue
            if not state["stages"]:
                pending.discard(key)
                print(f"  [{time.monotonic() - started:5.1f}s] {pod_name}/{name}: every probe passed", flush=True)
                continue
            kind = state["stages"][0]
            probe = state["probes"][kind]
            ok, detail = run_probe(probe, state["ip"], state["ports"], f"{pod_name}-{name}")
            state["last"] = f"{kind}: {detail}"
            if ok:
                print(f"  [{time.monotonic() - started:5.1f}s] {pod_name}/{name} {kind} passed ({detail})", flush=True)
                state["stages"].pop(0)
                state["failures"], state["next_at"] = 0, time.monotonic()
                continue
            state["failures"] += 1
            if kind == "startupProbe" and state["failures"] >= probe.get("failureThreshold", 3) and not args.expect_unready:
                print(f"  {pod_name}/{name}: startupProbe failed {state['failures']} times: the kubelet restarts it ({state['last']})")
                return 1
            state["next_at"] = time.monotonic() + probe.get("periodSeconds", 10)
        time.sleep(0.5)
    elapsed = time.monotonic() - started
    for pod_name, name in sorted(pending):
        state = containers[pod_name, name]
        print(f"  [{elapsed:5.1f}s] {pod_name}/{name} NOT READY: {state['last']}; container {container_state(f'{pod_name}-{name}')}")
    if args.expect_unready:
        # every Pod must have stayed unready: one that became ready would have let its rollout go on
        unready_pods = {pod_name for pod_name, _ in pending}
        return 0 if unready_pods == {pod_name for pod_name, _ in containers} else 1
    return 1 if pending else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    adapt_parser = commands.add_parser("adapt")
    adapt_parser.add_argument("rendered")
    adapt_parser.add_argument("out_dir")
    adapt_parser.add_argument("--revision", required=True)
    adapt_parser.add_argument("--ip-base", required=True, help="the first Pod's IP; the next ones follow")
    adapt_parser.add_argument("--secrets-dir", required=True, help="SECRET_NAME/KEY files")
    adapt_parser.add_argument("--services-from", help="services.json of the revision whose Pods are behind the Services")
    wait_parser = commands.add_parser("wait")
    wait_parser.add_argument("pod_files", nargs="+")
    wait_parser.add_argument("--within", type=float, help="seconds (default: as long as the startup probes allow)")
    wait_parser.add_argument("--expect-unready", action="store_true")
    init_parser = commands.add_parser("init")
    init_parser.add_argument("pod_file")
    args = parser.parse_args()
    return {"adapt": adapt, "init": init, "wait": wait}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
