#!/usr/bin/env bash
# Kubernetes rehearsal without a cluster (Debian 12, root, no Docker daemon, no registry):
#   1. build the image as the container smoke test does (../shared/container/smoke.sh: a debootstrap base
#      image, then the Dockerfile unchanged with buildah), tagged as two releases, k8s-1 and k8s-2;
#   2. render the cpu-tiny overlay with `kubectl kustomize`, pinned to release k8s-1 by a kustomization on
#      top (as a deployment pins a release), and run it with `podman kube play`, one Pod per Deployment,
#      in the draft -> verify -> gateway order; wait for every probe; one chat call through the gateway;
#   3. roll forward to k8s-2, whose config is broken (acceptance_sampling: false, which every role refuses):
#      its first Pod must stay unready, so the rollout stops there while release 1 serves (maxUnavailable 0);
#   4. roll back to release 1's image and config, probe everything and chat again. Then tear down.
# podman 4.3 plays only Pods/Deployments and ConfigMaps: podman_kube.py turns the render into Pods and says
# what it leaves out (Services become /etc/hosts entries, the Secret a host directory, the kubelet's probes
# are run by its `wait`; NetworkPolicies, PDBs and the HPA are not run). Each step prints its time.
# Usage: smoke.sh [WORK_DIR]     prints "K8S SMOKE OK" last on success; exit 1 otherwise.
#   SPECDEC_K8S_IMAGE=localhost/specdec:smoke  skips the build and releases that image (CI: the one the
#   container smoke test just built from the same commit).
# Time on 2 cores: ~2 min base image (cached after the first run), ~5 min build, ~4 min the rehearsal.
set -euo pipefail
SRC=$(realpath "$(dirname "$0")/../..")
W=${1:-${TMPDIR:-/tmp}/specdec-k8s-smoke}
BASE=localhost/python:3.11-bookworm
IMAGE=localhost/specdec
NET=specdec-k8s-smoke
SUBNET=10.213.77    # outside podman's own 10.88-10.89 ranges
PY=${PYTHON:-$SRC/.venv/bin/python}   # PyYAML and grpcio: `make install`'s virtual environment
KUBE=("$PY" "$SRC/deploy/k8s/podman_kube.py")
mkdir -p "$W"; cd "$W"
t0=$SECONDS; t_step=$SECONDS; summary=()
step() {
  [ ${#summary[@]} -eq 0 ] || summary[-1]="${summary[-1]} $((SECONDS - t_step)) s"
  t_step=$SECONDS; summary+=("$*:"); echo "### [$((SECONDS - t0))s] $*"
}
fail() { echo "K8S SMOKE FAILED: $*"; exit 1; }

step "packages"
export DEBIAN_FRONTEND=noninteractive
if ! command -v buildah >/dev/null || ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends debootstrap buildah podman runc catatonit netavark aardvark-dns iptables >/dev/null
fi
command -v kubectl >/dev/null || fail "kubectl is needed (it renders the overlays: kubectl kustomize)"
"$PY" -c 'import yaml, grpc' || fail "$PY needs PyYAML and grpcio (make install)"
cat >containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
CONF
export CONTAINERS_CONF=$W/containers.conf

if [ -n "${SPECDEC_K8S_IMAGE:-}" ]; then
  step "image: $SPECDEC_K8S_IMAGE, already built"
  buildah inspect --type image "$SPECDEC_K8S_IMAGE" >/dev/null || fail "no image $SPECDEC_K8S_IMAGE"
  buildah tag "$SPECDEC_K8S_IMAGE" "$IMAGE:k8s-1"
else
  if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    step "base image $BASE (debootstrap, no registry; the container smoke test's recipe)"
    MIRROR=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
    rm -rf rootfs
    debootstrap --variant=minbase bookworm rootfs "$MIRROR" >debootstrap.log
    rm -f rootfs/etc/apt/sources.list && cp /etc/apt/sources.list.d/debian.sources rootfs/etc/apt/sources.list.d/
    # where this machine's network re-signs TLS, the image must trust the same extra CAs or pip cannot connect
    mkdir -p rootfs/usr/local/share/ca-certificates
    if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then cp /usr/local/share/ca-certificates/*.crt rootfs/usr/local/share/ca-certificates/; fi
    mount -t proc proc rootfs/proc
    chroot rootfs /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive sh -c '
      apt-get update -q && apt-get install -y -q --no-install-recommends \
        python3.11 python3.11-venv python3-venv python-is-python3 ca-certificates netbase \
      && update-ca-certificates && apt-get clean && rm -rf /var/lib/apt/lists/*' >chroot-apt.log
    umount rootfs/proc
    c=$(buildah from scratch); m=$(buildah mount "$c")
    tar --numeric-owner -C rootfs -cf - . | tar --numeric-owner -xpf - -C "$m"
    buildah umount "$c" >/dev/null
    buildah config --env LANG=C.UTF-8 --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --cmd python3 --os linux --arch amd64 "$c"
    buildah commit -q --rm "$c" "$BASE" >/dev/null
    rm -rf rootfs
  fi
  step "build the Dockerfile as it is (the committed tree) -> $IMAGE:k8s-1"
  rm -rf ctx && git clone -q "$SRC" ctx
  # --layers: a rerun reuses the torch and dependency layers instead of downloading ~3 GB again
  buildah bud --layers --isolation chroot --build-arg PYTHON_IMAGE="$BASE" -t "$IMAGE:k8s-1" ctx >build.log 2>&1 \
    || { tail -5 build.log; fail "image build failed (log: $W/build.log)"; }
fi
# Release 2 is the same build under a new tag: what is broken in it is its config.
buildah tag "$IMAGE:k8s-1" "$IMAGE:k8s-2"

step "render: the cpu-tiny overlay pinned to release k8s-1 (and k8s-2, with a broken config)"
OVERLAY=$(realpath --relative-to="$W" "$SRC/deploy/k8s/overlays/cpu-tiny")
release() {  # release DIR TAG: a kustomization on top of the overlay that pins the image tag
  mkdir -p "$1"
  cat >"$1/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../$OVERLAY
images:
  - name: $IMAGE
    newTag: $2
EOF
}
rm -rf release-1 release-2
release release-1 k8s-1
release release-2 k8s-2
sed 's/acceptance_sampling: true /acceptance_sampling: false/' "$SRC/deploy/k8s/overlays/cpu-tiny/specdec.yaml" >release-2/specdec.yaml
grep -q 'acceptance_sampling: false' release-2/specdec.yaml || fail "could not break release 2's config"
cat >>release-2/kustomization.yaml <<'EOF'
configMapGenerator:
  - name: specdec-config
    behavior: merge
    files:
      - specdec.yaml
EOF
kubectl kustomize release-1 >release-1.yaml
kubectl kustomize release-2 >release-2.yaml
grep -c '^kind:' release-1.yaml | xargs echo "  release 1: objects"

step "secret: specdec-api-keys from a local key file (README.md's command)"
rm -rf secrets && mkdir -p secrets/specdec-api-keys
openssl rand -hex 32 >api_keys.txt
kubectl -n specdec create secret generic specdec-api-keys --from-file=api_keys=./api_keys.txt --dry-run=client -o yaml >secret.yaml
"$PY" - secret.yaml secrets <<'EOF'
import base64, pathlib, sys, yaml
secret = yaml.safe_load(open(sys.argv[1]))
for key, value in secret["data"].items():
    path = pathlib.Path(sys.argv[2], secret["metadata"]["name"], key)
    path.write_bytes(base64.b64decode(value)); path.chmod(0o644)   # read by uid 10001, as compose's secret file
EOF
KEY=$(head -1 api_keys.txt)

cleanup() {
  for f in release-2-pods/*.yaml release-1-pods/*.yaml; do
    if [ -f "$f" ]; then podman kube play --down "$f" >/dev/null 2>&1 || true; fi
  done
  podman network rm -f "$NET" >/dev/null 2>&1 || true
  # the init containers' named volumes, and those podman makes for ConfigMap volumes
  podman volume ls -q | grep -E -- '-r[12]-|^specdec-config-' | xargs -r podman volume rm -f >/dev/null 2>&1 || true
}
trap cleanup EXIT
cleanup
podman network create --subnet "$SUBNET.0/24" "$NET" >/dev/null

step "play release 1: one Pod per Deployment"
rm -rf release-1-pods release-2-pods
"${KUBE[@]}" adapt release-1.yaml release-1-pods --revision r1 --ip-base "$SUBNET.11" --secrets-dir secrets
for role in draft verify gateway; do
  "${KUBE[@]}" init release-1-pods/$role.yaml || fail "$role: init container"
  podman kube play --network "$NET" --ip "$(cat release-1-pods/$role.ip)" release-1-pods/$role.yaml >play-$role-r1.log 2>&1 \
    || { tail -5 play-$role-r1.log; fail "podman kube play $role"; }
done

step "release 1: wait for every probe (startup, readiness, liveness)"
for role in draft verify gateway; do
  "${KUBE[@]}" wait release-1-pods/$role.yaml --within 600 || { podman logs --tail 20 "$role-r1-$role"; fail "$role never became ready"; }
done

GATEWAY=$(cat release-1-pods/gateway.ip):8000
chat() {
  curl -fsS -m 120 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' "$GATEWAY/v1/chat/completions" \
    -d '{"model":"target","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"temperature":0}' >"chat-$1.json" \
    || fail "chat through the gateway ($1)"
  # fallback false: verify drafted through the draft Service's name, so the whole chain is wired
  "$PY" - "chat-$1.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1])); s = r["speculative"]
assert r["usage"]["completion_tokens"] > 0 and s["enabled"] and not s["fallback"], r
print(f"  chat: {r['usage']['completion_tokens']} tokens, {s['rounds']} rounds, {s['accepted_tokens']}/{s['draft_tokens']} draft tokens accepted, fallback {s['fallback']}")
EOF
}
step "release 1: a chat call through the gateway"
chat release-1
# what the requests were sized against (README.md, Sizing)
podman stats --no-stream --format '  {{.Name}}: memory {{.MemUsage}}' draft-r1-draft verify-r1-verify gateway-r1-gateway || true

step "roll forward to k8s-2, broken config (kubectl apply -k release-2): no new Pod may become ready"
# kubectl apply -k starts one new Pod per Deployment (maxSurge: 1) beside the old ones (maxUnavailable: 0).
# The Services keep release 1's Pods (services.json): a new Pod joins only once ready, which these never are.
"${KUBE[@]}" adapt release-2.yaml release-2-pods --revision r2 --ip-base "$SUBNET.21" --secrets-dir secrets \
  --services-from release-1-pods/services.json >/dev/null
for role in draft verify gateway; do
  "${KUBE[@]}" init release-2-pods/$role.yaml || fail "$role (release 2): init container"
  podman kube play --network "$NET" --ip "$(cat release-2-pods/$role.ip)" release-2-pods/$role.yaml >play-$role-r2.log 2>&1 \
    || { tail -5 play-$role-r2.log; fail "podman kube play $role (release 2)"; }
done
# As `kubectl -n specdec rollout status deployment/<name> --timeout=60s` would, give up after 60 s.
"${KUBE[@]}" wait release-2-pods/{draft,verify,gateway}.yaml --expect-unready --within 60 \
  || fail "a release 2 Pod became ready with a broken config"
for role in draft verify gateway; do
  podman logs "$role-r2-$role" >"$role-r2.log" 2>&1 || true
  grep -q 'acceptance_sampling' "$role-r2.log" || { tail -5 "$role-r2.log"; fail "release 2's $role did not refuse its config"; }
done
echo "  the new Pods' log: $(grep -m1 -o 'acceptance_sampling.*' draft-r2.log | cut -c1-140)"
podman ps -a --filter name=-r2- --format '  {{.Names}} {{.Image}} {{.Status}}'

step "release 1 serves during the blocked rollout (maxUnavailable: 0)"
chat blocked-rollout

step "roll back to release 1 (kubectl -n specdec rollout undo deployment/<name>): drop the new Pods"
for role in draft verify gateway; do podman kube play --down release-2-pods/$role.yaml >/dev/null; done
config_1=$(grep -m1 -o 'specdec-config-[a-z0-9]*' release-1.yaml)
for role in draft verify gateway; do
  image=$(podman inspect "$role-r1-$role" --format '{{.ImageName}}')
  [ "$image" = "$IMAGE:k8s-1" ] || fail "$role runs $image, not release 1's image"
  podman inspect "$role-r1-$role" --format '{{range .Mounts}}{{.Name}} {{end}}' | grep -qw -- "$config_1" \
    || fail "$role does not mount release 1's config $config_1"
  echo "  $role: $image, $config_1"
done
[ -z "$(podman pod ls -q --filter name=-r2)" ] || fail "a release 2 Pod is left"

step "after the rollback: every probe again, and a chat call"
"${KUBE[@]}" wait release-1-pods/{draft,verify,gateway}.yaml --within 60 || fail "not ready after the rollback"
chat rollback

step "tear down"
cleanup
trap - EXIT
summary[-1]="${summary[-1]} $((SECONDS - t_step)) s"
printf '  %s\n' "${summary[@]}"
echo "K8S SMOKE OK in $((SECONDS - t0)) s"
