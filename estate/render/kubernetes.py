"""The Kubernetes plane from the spec: kubeadm, containerd, device plugin, tenants, Kueue, kind.

The derived facts (node labels and taints, GPU flavors, tenant quotas) come from
estate.model.kubernetes, which the validators read too; this module builds the
documents (kubeadm, containerd, device-plugin configs, tenants, Kueue) and the
templates in k8s/templates/ lay them out.

The governance mirrors the Slurm side: a node's fabric position (leaf, spine,
core, block) comes from the same spec.topology that topology.conf is written
from, and tenants' GPU quotas must add up to exactly the GPUs the spec gives
the plane.
"""
from __future__ import annotations

import json
import shlex
from functools import lru_cache
from typing import Any

import yaml

from estate.model.kubernetes import (  # the facts this renderer lays out
    API_PORT, AUTH_CONFIG, AUTH_CONFIG_PATH, CA_HASH_PLACEHOLDER, CERT_KEY_PLACEHOLDER, CONTAINERD_APT_LIST,
    CONTAINERD_APT_PREF, CRI_SOCKET, DEFAULT_LOCAL_QUEUE,
    DEFAULT_SHARING_CONFIG,
    DEVICE_LIST_STRATEGY, DEVICE_PLUGIN_CONFIG_LABEL, DEVICE_PLUGIN_IMAGE, DEVICE_PLUGIN_NAME,
    DEVICE_PLUGIN_NAMESPACE, DNS_DOMAIN, FSTAB_ONLY_OPTIONS, GPU_PRESENT, GPU_RESOURCE,
    ADMISSION_PLUGINS, KIND_API, KIND_IMAGE, KNode, KUBEADM_API, KUEUE_API,
    NAMESPACE_NAME_LABEL, POD_SECURITY_LABELS, SYSTEM_PRIORITY_CLASSES, TENANT_ROLE,
    TENANT_ROLE_RULES,
    TOLERATIONS_WHITELIST, pool_toleration, tolerations_whitelist,
    NFS_NOMINAL_CAPACITY, NVIDIA_RUNTIME_BINARY, RUNTIME_HANDLER,
    TOKEN_PLACEHOLDER, TOOLKIT_CONFIG, TOOLKIT_SETTINGS,
    api_endpoint, api_host, auth_volume, authentication_config, control_planes, cpu_quantity, flavors, hostlist, kubelet_settings,
    tenant_resources, mig_layout, MIG_PARTED, DCGM_VERSION, NFD_VERSION,
    KSM_MANIFEST, KSM_VERSION, PLANE, plane_nodes, priority_class, sharing_for, tenant_quotas,
)
from estate.model import bridge, cni
from estate.model import kubernetes as k8s
from estate.kubernetes_releases import (CONTAINERD_CONFIG_VERSION, CONTAINERD_MAJOR,
                                        CONTAINERD_SUITE, DEBIAN_KEYRING, DEBIAN_MIRROR,
                                        pause_image)
from estate.model.services import MANIFESTS
from estate.model.flows import flow as matrix_flow
from estate.render.cni import installation_spec, operator_text
from estate.render import gpu_addons, hardening, system_policy
from estate.render.kube_state_metrics import kube_state_metrics
from estate.render.identity_policy import run_as_policy
from estate.model.storage import grants
from estate.render.artifacts import Artifact
from estate.render.kueue_install import build_kueue_install
from estate.render.templates import RenderError, dumped, line_value, render_template
from estate.spec.hostlist import Hostlist
from estate.spec.model import GpuSharing, Tenant
from estate.spec.resolved import Estate

TEMPLATES = "k8s/templates"

# --- layout helpers ----------------------------------------------------------------

class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):   # type: ignore[misc]   # libyaml emits 10x faster
    """Multi-line strings (embedded YAML, configs) as literal blocks, for readable diffs.
    No anchors: an object the data holds twice is written out twice."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def to_yaml(data, indent: int = 0) -> str:
    """Block YAML for nested data, indented to sit under a template key."""
    text = _dump(data)
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in text.rstrip("\n").split("\n"))


def _dump(data) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1000)


def _render(template: str, estate: Estate, source: str, **ctx) -> bytes:
    return render_template(f"{TEMPLATES}/{template}", {
        "spec": estate.spec, "k8s": estate.spec.kubernetes, "source": source or estate.spec.name,
        "y": lambda data, indent=0: dumped(to_yaml(data, indent)), **ctx})


def kubelet_args(node: KNode) -> list[dict]:
    args = []
    if node.address:
        args.append({"name": "node-ip", "value": node.address})
    if node.labels:
        bad = [f"{k}={v}" for k, v in node.labels.items() if any(c in k + v for c in ",=")]
        if bad:  # the spec types refuse these; a derived label must not split the list
            raise RenderError(f"node {node.name}: labels {bad} would split --node-labels")
        args.append({"name": "node-labels",
                     "value": ",".join(f"{k}={v}" for k, v in node.labels.items())})
    return args


def node_registration(node: KNode) -> dict:
    return {"name": node.name, "criSocket": CRI_SOCKET, "taints": list(node.taints),
            "kubeletExtraArgs": kubelet_args(node)}


def api_server_args(estate: Estate) -> list[dict]:
    args = [{"name": "enable-admission-plugins", "value": ",".join(ADMISSION_PLUGINS)}]
    if estate.spec.kubernetes.oidc:
        args.append({"name": "authentication-config", "value": AUTH_CONFIG_PATH})
    return args


def build_authentication(estate: Estate) -> list[Artifact]:
    """The API server's AuthenticationConfiguration on every control plane (each one's
    API server reads it from the same path); nothing without kubernetes.oidc."""
    k = estate.spec.kubernetes
    if k.oidc is None:
        return []
    text = "# People's tokens from the spec's issuer (kubernetes.oidc). Generated by Estate.\n" \
        + _dump(authentication_config(k.oidc, k.version))
    return [Artifact(AUTH_CONFIG, text.encode(), hostlist(control_planes(estate)), PLANE)]


# --- builders: one per component -----------------------------------------------------

def build_kubeadm(estate: Estate, source: str) -> list[Artifact]:
    """init.yaml for the first control plane; a JoinConfiguration for every other node."""
    cps = control_planes(estate)
    first = cps[0]
    init = _render("kubeadm-init.yaml.j2", estate, source, node=first,
                   registration=node_registration(first), endpoint=api_endpoint(estate),
                   api_port=API_PORT, kubeadm_api=KUBEADM_API, dns_domain=DNS_DOMAIN,
                   cert_sans=cert_sans(estate),
                   cert_key=CERT_KEY_PLACEHOLDER if len(cps) > 1 else None,
                   kubelet=kubelet_settings(estate),
                   api_server_args=api_server_args(estate),
                   api_server_volumes=[auth_volume()] if estate.spec.kubernetes.oidc else [],
                   version=f"v{estate.spec.kubernetes.version}")
    out = [Artifact("kubernetes/kubeadm/init.yaml", init, hostlist([first]), PLANE),
           *build_authentication(estate)]
    for node in plane_nodes(estate):
        if node is first:
            continue
        text = _render("kubeadm-join.yaml.j2", estate, source, node=node,
                       registration=node_registration(node), endpoint=api_endpoint(estate),
                       api_port=API_PORT, kubeadm_api=KUBEADM_API, token=TOKEN_PLACEHOLDER,
                       ca_hash=CA_HASH_PLACEHOLDER,
                       cert_key=CERT_KEY_PLACEHOLDER if node.control_plane else None)
        out.append(Artifact(f"kubernetes/kubeadm/join/{node.name}.yaml", text,
                            hostlist([node]), PLANE))
    return out


def cert_sans(estate: Estate) -> list[str]:
    """The API server certificate's extra names: every control plane's address and the VIP
    (controlPlaneEndpoint's host, which kubeadm adds too; listed so the file says it)."""
    out = [n.address for n in control_planes(estate) if n.address]
    vip = estate.spec.kubernetes.api_vip
    return out + [str(vip)] if vip else out


def kube_vip_pod(estate: Estate, kubeconfig: str) -> dict:
    """kube-vip's static pod as `kube-vip manifest pod --arp --controlplane --leaderElection
    --interface IF --address VIP` (v1.2.3) writes it, the kubeconfig aside (kubeconfig:
    admin.conf, or super-admin.conf while the first control plane initialises)."""
    k8s_spec = estate.spec.kubernetes
    env = [{"name": "vip_arp", "value": "true"},
           {"name": "port", "value": str(API_PORT)},
           {"name": "vip_nodename", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
           {"name": "vip_interface", "value": k8s_spec.api_vip_interface},
           {"name": "vip_subnet", "value": "32"},
           {"name": "cp_enable", "value": "true"},
           {"name": "cp_namespace", "value": "kube-system"},
           {"name": "vip_leaderelection", "value": "true"},
           {"name": "vip_leasename", "value": k8s.KUBE_VIP_LEASE},
           *({"name": k, "value": v} for k, v in k8s.KUBE_VIP_LEASE_TIMES.items()),
           {"name": "address", "value": str(k8s_spec.api_vip)},
           # metrics on the host's :2112, kube-vip's default; the firewall admits no one
           {"name": "prometheus_server", "value": ":2112"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kube-vip", "namespace": "kube-system"},
        "spec": {
            "containers": [{
                "name": "kube-vip", "image": k8s.KUBE_VIP_IMAGE,
                "imagePullPolicy": "IfNotPresent", "args": ["manager"], "env": env,
                # what the generator writes outside masquerade mode
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"],
                                                     "drop": ["ALL"]}},
                "volumeMounts": [{"name": "kubeconfig", "mountPath": k8s.ADMIN_CONF}]}],
            # kube-vip talks to the API as https://kubernetes:6443, the local API server
            "hostAliases": [{"ip": "127.0.0.1", "hostnames": ["kubernetes"]}],
            "hostNetwork": True,
            "volumes": [{"name": "kubeconfig",
                         "hostPath": {"path": kubeconfig, "type": "File"}}]}}


def build_kube_vip(estate: Estate, source: str) -> list[Artifact]:
    """The VIP's static pod for every control plane, and the first one's variant for kubeadm
    init (super-admin.conf: kube-vip issue #684). Nothing without a VIP."""
    if not estate.spec.kubernetes.api_vip:
        return []
    cps = control_planes(estate)
    head = (f"# kube-vip {k8s.KUBE_VIP_VERSION}: the API VIP {api_host(estate)}, generated by "
            f"Estate from {line_value(source or estate.spec.name, k8s.KUBE_VIP_PATH)}. Do not "
            "edit.\n")
    def text(conf):
        return (head + to_yaml(kube_vip_pod(estate, conf)) + "\n").encode()
    return [Artifact(k8s.KUBE_VIP_PATH, text(k8s.ADMIN_CONF), hostlist(cps), PLANE),
            Artifact(k8s.KUBE_VIP_INIT_PATH, text(k8s.SUPER_ADMIN_CONF), hostlist(cps[:1]),
                     PLANE)]


CRICTL = f"crictl --runtime-endpoint {CRI_SOCKET}"

ETCD_SNAPSHOT_SCRIPT = f"""#!/bin/sh
# A snapshot of this control plane's etcd member, generated by Estate. Do not edit.
# etcdctl runs in the etcd static pod's container (the server's own release), with
# kubeadm's etcd client certificate; the file lands in the pod's host-path data
# directory and is moved to {k8s.ETCD_SNAPSHOT_DIR}, keeping the newest {k8s.ETCD_SNAPSHOTS_KEPT}.
set -eu
umask 077
id=$({CRICTL} ps --name '^etcd$' --state running -q | head -n 1)
if [ -z "$id" ]; then echo "estate-etcd-snapshot: no running etcd container" >&2; exit 1; fi
snap={k8s.ETCD_DATA}/estate-snapshot.db
rm -f "$snap"
{CRICTL} exec "$id" etcdctl --endpoints=https://127.0.0.1:2379 \\
  --cacert={k8s.ETCD_PKI}/ca.crt --cert={k8s.ETCD_PKI}/healthcheck-client.crt \\
  --key={k8s.ETCD_PKI}/healthcheck-client.key snapshot save "$snap"
mkdir -p {k8s.ETCD_SNAPSHOT_DIR}
mv "$snap" "{k8s.ETCD_SNAPSHOT_DIR}/etcd-$(date -u +%Y%m%dT%H%M%SZ).db"
ls -1t {k8s.ETCD_SNAPSHOT_DIR}/etcd-*.db | tail -n +{k8s.ETCD_SNAPSHOTS_KEPT + 1} \\
  | xargs -r rm -f --
"""

CERT_RENEW_SCRIPT = f"""#!/bin/sh
# kubeadm certificate renewal on this control plane, generated by Estate. Do not edit.
# kubeadm's certificates are valid {k8s.CERT_VALIDITY_DAYS} days; `kubeadm certs renew all` renews
# them (and the kubeconfigs kubeadm wrote), and the static pods that read them restart one
# at a time: a manifest moved out of the kubelet's directory stops its pod within the
# kubelet's fileCheckFrequency ({k8s.STATIC_POD_GRACE_S} s), moved back it starts again (kubeadm's
# certificate-management page). The kubelet rotates its own client certificate.
set -eu
manifests=/etc/kubernetes/manifests
held=/etc/kubernetes/estate-restarting
put_back() {{ for f in "$held"/*.yaml; do [ -e "$f" ] && mv "$f" "$manifests/"; done; true; }}
trap put_back EXIT
kubeadm certs renew all
mkdir -p "$held"
for pod in {' '.join(k8s.STATIC_PODS)}; do
  [ -f "$manifests/$pod.yaml" ] || continue
  mv "$manifests/$pod.yaml" "$held/"
  sleep {k8s.STATIC_POD_GRACE_S}
  mv "$held/$pod.yaml" "$manifests/"
  for i in $(seq 60); do
    [ -n "$({CRICTL} ps --name "^$pod\\$" --state running -q)" ] && break
    sleep 5
  done
done
"""

UNIT_WHY = {"etcd-snapshot": "etcd snapshot of this control plane's member",
            "cert-renew": "kubeadm certificate renewal and static-pod restarts",
            "bridge-approve": "approval of the bridge minters' own certificate requests"}
APPROVE_SCHEDULE = "*:0/5"   # every five minutes: a minter's request waits that long at most


def approve_script(estate: Estate) -> str:
    """Approves a pending request of signer kube-apiserver-client only where its requester
    is a bridge minter's user and its subject is exactly that user (CN, no organisation):
    a minter renews itself and can name no one else. Everything else stays pending for
    the cluster's admins."""
    from estate.render.bridge import SIGNER
    users = " ".join(shlex.quote(bridge.minter_user(g.tenant)) for g in bridge.grants(estate))
    return f"""#!/bin/sh
# {UNIT_WHY["bridge-approve"]} on this control plane, generated by Estate. Do not edit.
set -eu
export KUBECONFIG={k8s.ADMIN_CONF}
minters="{users}"
kubectl get csr -o jsonpath='{{range .items[*]}}{{.metadata.name}} {{.spec.signerName}} {{.spec.username}} {{.status.conditions[*].type}}{{"\\n"}}{{end}}' |
while read -r name signer user state; do
  [ "$signer" = {SIGNER} ] && [ -z "$state" ] || continue
  mine=no
  for m in $minters; do [ "$user" = "$m" ] && mine=yes; done
  [ $mine = yes ] || continue
  subject=$(kubectl get csr "$name" -o jsonpath='{{.spec.request}}' | base64 -d |
            openssl req -noout -subject -nameopt RFC2253)
  if [ "$subject" != "subject=CN=$user" ]; then
    echo "estate-bridge-approve: $name: $user asks for '$subject', not itself: left pending" >&2
    continue
  fi
  kubectl certificate approve "$name"
done
"""


def _units(name: str, schedule: str) -> dict[str, str]:
    why = UNIT_WHY[name]
    return {
        k8s.service_unit(name): (
            f"# {why}, generated by Estate. Do not edit.\n[Unit]\nDescription={why} (Estate)\n"
            "After=kubelet.service containerd.service\n\n[Service]\nType=oneshot\n"
            f"ExecStart=/usr/local/sbin/estate-{name}\n"),
        k8s.timer_unit(name): (
            f"# {why}, generated by Estate. Do not edit.\n[Unit]\nDescription={why}, "
            f"{schedule} (Estate)\n\n[Timer]\nOnCalendar={schedule}\n"
            f"RandomizedDelaySec={'1min' if name == k8s.BRIDGE_APPROVE else '1h'}\n"
            "Persistent=true\n\n[Install]\nWantedBy=timers.target\n")}


def build_control_plane_timers(estate: Estate, source: str) -> list[Artifact]:
    """On every control plane: an etcd snapshot timer (daily, the last 7 kept) and a
    certificate renewal timer (monthly, well within kubeadm's one-year certificates)."""
    cps = hostlist(control_planes(estate))
    scripts = {"etcd-snapshot": ETCD_SNAPSHOT_SCRIPT, "cert-renew": CERT_RENEW_SCRIPT}
    timers = dict(k8s.TIMERS)
    if bridge.has_minter(estate):
        scripts[k8s.BRIDGE_APPROVE] = approve_script(estate)
        timers[k8s.BRIDGE_APPROVE] = APPROVE_SCHEDULE
    out = []
    for name, schedule in timers.items():
        out.append(Artifact(f"{k8s.SBIN}estate-{name}", scripts[name].encode(), cps, PLANE,
                            mode=0o755))
        out += [Artifact(k8s.SYSTEMD_UNITS + unit, text.encode(), cps, PLANE)
                for unit, text in _units(name, schedule).items()]
    return out


def build_containerd(estate: Estate, source: str) -> list[Artifact]:
    """containerd 2 from Debian's testing suite, pinned so that nothing else comes from it;
    systemd cgroups everywhere; GPU nodes also get the NVIDIA runtime, as default."""
    nodes = plane_nodes(estate)
    out = []
    for gpu, path in ((False, "config.toml"), (True, "config-gpu.toml")):
        consumers = [n for n in nodes if (n.gpus > 0) == gpu]
        if not consumers:
            continue
        text = _render("containerd-config.toml.j2", estate, source, gpu=gpu,
                       pause_image=pause_image(estate.spec.kubernetes.version),
                       handler=RUNTIME_HANDLER, nvidia_binary=NVIDIA_RUNTIME_BINARY,
                       major=CONTAINERD_MAJOR, config_version=CONTAINERD_CONFIG_VERSION)
        out.append(Artifact(f"kubernetes/containerd/{path}", text, hostlist(consumers), PLANE))
    head = (f"# containerd {CONTAINERD_MAJOR}.x from Debian {CONTAINERD_SUITE}, rendered by "
            "Estate; do not edit.\n")
    texts = {
        CONTAINERD_APT_LIST: f"deb [signed-by={DEBIAN_KEYRING}] {DEBIAN_MIRROR} "
                             f"{CONTAINERD_SUITE} main\n",
        # the specific record wins for containerd; the general one refuses the rest
        CONTAINERD_APT_PREF: (f"Package: containerd\nPin: release n={CONTAINERD_SUITE}\n"
                              "Pin-Priority: 990\n\n"
                              f"Package: *\nPin: release n={CONTAINERD_SUITE}\n"
                              "Pin-Priority: -1\n"),
    }
    return out + [Artifact(p, (head + t).encode(), hostlist(nodes), PLANE)
                  for p, t in texts.items()]


def build_toolkit(estate: Estate, source: str) -> list[Artifact]:
    """The NVIDIA container toolkit's settings on GPU nodes (the package's defaults for the
    rest): GPUs only through the device plugin's volume mounts."""
    gpu_nodes = [n for n in plane_nodes(estate) if n.gpus > 0]
    if not gpu_nodes:
        return []
    text = ("# NVIDIA container toolkit settings, generated by Estate. Do not edit.\n"
            + "".join(f"{k} = {str(v).lower()}\n" for k, v in TOOLKIT_SETTINGS.items()))
    return [Artifact(TOOLKIT_CONFIG, text.encode(), hostlist(gpu_nodes), PLANE)]


def device_plugin_configs(estate: Estate) -> dict[str, dict]:
    """Config name -> the device plugin's config (api/config/v1) for the plane's GPU classes."""
    k8s = estate.spec.kubernetes
    used = {DEFAULT_SHARING_CONFIG: k8s.gpu_sharing}
    for n in plane_nodes(estate):
        if n.is_gpu_worker:
            name, sharing = sharing_for(estate, n.cls)
            used[name] = sharing
    return {name: _plugin_config(s) for name, s in sorted(used.items())}


def _plugin_config(sharing: GpuSharing) -> dict:
    mig = sharing.mig_strategy if sharing.mode == "mig" else "none"
    config = {"version": "v1", "flags": {"migStrategy": mig, "failOnInitError": True,
                                         "plugin": {"deviceListStrategy": DEVICE_LIST_STRATEGY}}}
    if sharing.mode == "time-slicing":
        config["sharing"] = {"timeSlicing": {
            "failRequestsGreaterThanOne": sharing.fail_requests_greater_than_one,
            "resources": [{"name": GPU_RESOURCE, "replicas": sharing.replicas}]}}
    return config


def mig_parted_config(estate: Estate) -> dict:
    """nvidia-mig-parted's config (`version: v1`, `mig-configs`): one named config per node
    class whose GPUs run MIG on this plane, selected by the node's nvidia.com/mig.config
    label (what nvidia-mig-manager reads; `nvidia-mig-parted apply -c <class>` by hand)."""
    configs = {}
    for n in plane_nodes(estate):
        if n.is_gpu_worker:
            layout = mig_layout(n.cls, sharing_for(estate, n.cls)[1])
            if layout:
                configs[n.cls.name] = [{"devices": "all", "mig-enabled": True,
                                        "mig-devices": layout}]
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))} if configs else {}


def build_mig_parted(estate: Estate, source: str) -> list[Artifact]:
    config = mig_parted_config(estate)
    if not config:
        return []
    names = set(config["mig-configs"])
    nodes = [n for n in plane_nodes(estate) if n.is_gpu_worker and n.cls.name in names]
    origin = line_value(source or "the spec", MIG_PARTED)
    text = (f"# nvidia-mig-parted config, generated by Estate from {origin}. Do not edit.\n"
            "# One config per node class; a node applies the one its nvidia.com/mig.config "
            "label names.\n" + to_yaml(config) + "\n")
    return [Artifact(MIG_PARTED, text.encode(), hostlist(nodes), PLANE)]


def _toolkit_privileged() -> dict:
    """The securityContext of a container that must see every GPU of its node."""
    plugin: dict = {}
    hardening.unprivileged(plugin, add=(k8s.TOOLKIT_PRIVILEGE,),
                           read_only=k8s.TOOLKIT_READ_ONLY_ROOT)
    return plugin["securityContext"]


def build_device_plugin(estate: Estate, source: str) -> list[Artifact]:
    if not any(n.is_gpu_worker for n in plane_nodes(estate)):
        return []
    configs = device_plugin_configs(estate)
    # Under MIG the plugin watches the MIG devices' health through the toolkit's monitor
    # device: NVIDIA_MIG_MONITOR_DEVICES=all, which the toolkit grants only with
    # CAP_SYS_ADMIN (upstream's Helm chart adds both when migStrategy is not none).
    mig = any(c["flags"]["migStrategy"] != "none" for c in configs.values())
    # The plugin enumerates every GPU of its node, and the toolkit ignores
    # NVIDIA_VISIBLE_DEVICES from containers without SYS_ADMIN (TOOLKIT_PRIVILEGE): it adds
    # that one capability, which also covers MIG's monitor devices, and drops the rest. The
    # plugin itself writes only its socket, to the kubelet's hostPath (v0.20.0 internal/cdi
    # New: the null handler, no CDI spec, unless a cdi-* strategy is on), but the toolkit's
    # hooks write into its root (TOOLKIT_READ_ONLY_ROOT). Its config sidecars drop
    # everything and run read-only.
    text = _render("device-plugin.yaml.j2", estate, source, name=DEVICE_PLUGIN_NAME,
                   namespace=DEVICE_PLUGIN_NAMESPACE, image=DEVICE_PLUGIN_IMAGE,
                   configs={k: dumped(to_yaml(v) + "\n") for k, v in configs.items()},
                   default_config=DEFAULT_SHARING_CONFIG, config_label=DEVICE_PLUGIN_CONFIG_LABEL,
                   handler=RUNTIME_HANDLER, node_selector={GPU_PRESENT: "true"},
                   tolerations=[{"key": GPU_RESOURCE, "operator": "Exists",
                                 "effect": "NoSchedule"},
                                {"key": "CriticalAddonsOnly", "operator": "Exists"}],
                   # the sidecars write only /config (an emptyDir)
                   security={"allowPrivilegeEscalation": False,
                             "capabilities": {"drop": ["ALL"]},
                             "readOnlyRootFilesystem": True},
                   # upstream's chart sets none (values.yaml `resources: {}`): Estate's
                   # estimate, small Go daemons that serve the kubelet over a socket
                   sidecar_resources={"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"cpu": "100m", "memory": "64Mi"}},
                   plugin_resources={"requests": {"cpu": "50m", "memory": "64Mi"},
                                     "limits": {"cpu": "500m", "memory": "256Mi"}},
                   mig_env=mig,
                   plugin_security=_toolkit_privileged())
    return [_manifest("20-device-plugin.yaml", text, estate)]


def _vendored_manifest(name: str, what: str, docs: list[dict], estate: Estate,
                       source: str) -> Artifact:
    origin = line_value(source or "the spec", name)
    head = (f"# {what}, generated by Estate from {origin}. Do not edit.\n"
            "# Upstream's manifest (k8s/README.md names source, version and sha256) with "
            "Estate's placement.\n")
    body = "---\n".join(to_yaml(d) + "\n" for d in docs)
    return _manifest(name, (head + body).encode(), estate)


def build_gpu_addons(estate: Estate, source: str) -> list[Artifact]:
    """NVIDIA's add-ons on every GPU worker (estate.render.gpu_addons)."""
    if not any(n.is_gpu_worker for n in plane_nodes(estate)):
        return []
    gfd = gpu_addons.gpu_feature_discovery(estate, device_plugin_configs(estate),
                                           f"{DEVICE_PLUGIN_NAME}-configs")
    return [_vendored_manifest("22-dcgm-exporter.yaml",
                               f"NVIDIA DCGM exporter {DCGM_VERSION}",
                               gpu_addons.dcgm_exporter(estate), estate, source),
            # NFD first: GFD's labels reach the node only through it
            _vendored_manifest("23-node-feature-discovery.yaml",
                               f"node-feature-discovery {NFD_VERSION}",
                               gpu_addons.node_feature_discovery(estate), estate, source),
            _vendored_manifest("24-gpu-feature-discovery.yaml",
                               f"GPU Feature Discovery ({DEVICE_PLUGIN_IMAGE})", gfd,
                               estate, source)]


def build_kube_state_metrics(estate: Estate, source: str) -> list[Artifact]:
    """kube-state-metrics on the control planes (estate.render.kube_state_metrics), only
    when spec.monitoring scrapes it."""
    docs = kube_state_metrics(estate)
    if not docs:
        return []
    return [_vendored_manifest(KSM_MANIFEST, f"kube-state-metrics {KSM_VERSION}", docs,
                               estate, source)]


def _objects(name: str, what: str, docs: list[dict], estate: Estate, source: str) -> Artifact:
    origin = line_value(source or "the spec", name)
    head = f"# {what}, generated by Estate from {origin}. Do not edit.\n"
    return _manifest(name, (head + "---\n".join(to_yaml(d) + "\n" for d in docs)).encode(),
                     estate)


def build_system_policy(estate: Estate, source: str) -> list[Artifact]:
    """kube-system's explicit Pod Security level and both system namespaces'
    NetworkPolicies (estate.render.system_policy); kueue-system's after Kueue's install,
    which creates that namespace."""
    out = [_objects("05-kube-system.yaml", "kube-system: Pod Security and NetworkPolicies",
                    system_policy.kube_system(estate), estate, source)]
    if estate.spec.kubernetes.tenants:
        out.append(_objects("42-kueue-system-policy.yaml", "kueue-system: NetworkPolicies",
                            system_policy.kueue_system(estate), estate, source))
    return out


def build_cluster_objects(estate: Estate, source: str) -> list[Artifact]:
    """RuntimeClass nvidia, the tenants' PriorityClasses and Namespaces."""
    k8s = estate.spec.kubernetes
    out = []
    if any(n.is_gpu_worker for n in plane_nodes(estate)):
        text = _render("runtimeclass.yaml.j2", estate, source, handler=RUNTIME_HANDLER,
                       node_selector={GPU_PRESENT: "true"})
        out.append(_manifest("10-runtimeclass.yaml", text, estate))
    if k8s.tenants:
        minters = [bridge.minter_user(g.tenant) for g in bridge.grants(estate)] \
            if bridge.has_minter(estate) else []
        text = _render("tenants-cluster.yaml.j2", estate, source, tenant_role=TENANT_ROLE,
                       tenant_role_rules=list(TENANT_ROLE_RULES),
                       minter_renew=f"estate-{bridge.MINTER}-renew", minter_users=minters,
                       tenants=[
            {"name": t.name, "priority_class": priority_class(t), "priority": t.priority,
             "labels": POD_SECURITY_LABELS,
             "annotations": {TOLERATIONS_WHITELIST: json.dumps(
                 tolerations_whitelist(estate, t), separators=(",", ":"))}}
            for t in k8s.tenants])
        out.append(_manifest("00-tenants.yaml", text, estate))
    return out


def network_policy_peers(estate: Estate, tenant: Tenant) -> tuple[list[str], list[str]]:
    """(tenants whose pods may reach this tenant, tenants this tenant's pods may reach)."""
    tenants = estate.spec.kubernetes.tenants
    ingress = [name for name in tenant.allow_from if name != tenant.name]
    egress = [t.name for t in tenants if tenant.name in t.allow_from and t.name != tenant.name]
    return ingress, egress


def bridge_egress(estate: Estate) -> dict | None:
    """Where a tenant granted the bridge may go: the slurmrestd flow of the flow matrix
    (its nodes' addresses and port), or None where the spec has no slurmrestd."""
    flow = matrix_flow(estate, "slurmrestd")
    if flow is None:
        return None
    addrs = sorted(str(a) for a in (estate.address(n, flow.segment) for n in flow.to) if a)
    return {"cidrs": [f"{a}/32" for a in addrs], "protocol": flow.proto.upper(),
            "port": flow.ports[0], "end_port": flow.ports[1] if flow.ports[1] != flow.ports[0]
            else None}


def bridge_credentials(tenant: Tenant) -> dict | None:
    """The bridge's Secret and its minter's names in the tenant's namespace."""
    if not tenant.bridge:
        return None
    return {"user": tenant.bridge.user, "token_lifetime": tenant.bridge.token_lifetime,
            "secret": bridge.SECRET, "minter": bridge.MINTER,
            "minter_user": bridge.minter_user(tenant.name)}


def tenant_context(estate: Estate, tenant: Tenant) -> dict:
    ingress, egress = network_policy_peers(estate, tenant)
    return {
        "name": tenant.name,
        "gpu_share": tenant_resources(estate, tenant),
        "gpu_max_per_container": max_per_container(estate, tenant),
        "ingress_from": ingress, "egress_to": egress,
        "slurmrestd": bridge_egress(estate) if tenant.bridge else None,
        "bridge": bridge_credentials(tenant),
        "claims": [c for c in nfs_claims(estate) if c["namespace"] == tenant.name],
        "foreign_priority_classes": foreign_priority_classes(estate, tenant),
        "groups": list(tenant.groups), "role": TENANT_ROLE,
        "run_as": run_as_policy(estate, tenant),
    }


def max_per_container(estate: Estate, tenant: Tenant) -> dict[str, int]:
    """GPU resource -> the most one container may ask: what one of the tenant's nodes has."""
    by_flavor = {f.name: f for f in flavors(estate)}
    out = {r: 0 for r in tenant_resources(estate, tenant)}
    for q in tenant_quotas(estate)[tenant.name]:
        for r, n in by_flavor[q.flavor].max_per_node.items():
            out[r] = max(out.get(r, 0), n)
    return out


def foreign_priority_classes(estate: Estate, tenant: Tenant) -> list[str]:
    """PriorityClasses a tenant's pods may not name: the other tenants' and the system's
    (PriorityClasses are cluster-wide, so without a quota scoped to them any namespace
    could jump the queue with another tenant's priority)."""
    others = [priority_class(t) for t in estate.spec.kubernetes.tenants if t.name != tenant.name]
    return sorted(set(others)) + list(SYSTEM_PRIORITY_CLASSES)


def build_tenants(estate: Estate, source: str) -> list[Artifact]:
    out = []
    for t in estate.spec.kubernetes.tenants:
        text = _render("tenant.yaml.j2", estate, source, t=tenant_context(estate, t),
                       capacity=NFS_NOMINAL_CAPACITY,
                       gpu_resource=GPU_RESOURCE, ns_label=NAMESPACE_NAME_LABEL)
        out.append(_manifest(f"30-tenant-{t.name}.yaml", text, estate))
    return out


def build_kueue(estate: Estate, source: str) -> list[Artifact]:
    k8s = estate.spec.kubernetes
    if not k8s.tenants:
        return []
    quotas = tenant_quotas(estate)
    # Kueue: a resource group's flavors each list every covered resource, in one order
    queues = [{"name": t.name, "cohort": t.cohort, "namespace": t.name,
               "local_queues": [t.name, DEFAULT_LOCAL_QUEUE],
               "gpu_resources": sorted({r for q in quotas[t.name] for r in q.resources}),
               "quotas": [q for q in quotas[t.name]]} for t in k8s.tenants]
    text = _render("kueue.yaml.j2", estate, source, api=KUEUE_API, flavors=flavors(estate),
                   tolerations={f.name: [pool_toleration(f.name)] for f in flavors(estate)},
                   queues=queues, gpu_resource=GPU_RESOURCE, cpu=cpu_quantity,
                   ns_label=NAMESPACE_NAME_LABEL)
    return [_manifest("50-kueue.yaml", text, estate)]


def nfs_volumes(estate: Estate) -> list[dict]:
    """Exports some Kubernetes node mounts, with the server's address on the export segment."""
    return [dict(v) for v in _nfs_volumes(estate)]


@lru_cache(maxsize=8)
def _nfs_volumes(estate: Estate) -> tuple[dict, ...]:
    """Cached per estate: a mount's clients may name every Slurm node too (50,000 names to
    expand), and several renderers ask."""
    exports = {e.name: e for e in estate.spec.storage.exports}
    plane = {n.name for n in plane_nodes(estate)}
    out: dict[str, dict] = {}
    for m in estate.spec.storage.mounts:
        export = exports.get(m.export)
        clients = [c for c in Hostlist.parse(m.clients) if c in plane]
        if not export or not clients or export.name in out:
            continue
        server = estate.address(export.server, export.segment)
        out[export.name] = {
            "export": export.name, "server": str(server), "path": export.path,
            "mount_path": m.path, "clients": clients,
            "options": [o for o in m.options.split(",") if o and o not in FSTAB_ONLY_OPTIONS],
            "all_nodes": len(clients) == len(plane),
        }
    return tuple(out.values())


def nfs_claims(estate: Estate) -> list[dict]:
    """One PersistentVolume per storage grant, pre-bound to a claim in the tenant's namespace.

    Only what kubernetes.tenants[].storage grants: an export the plane's nodes mount is
    not a tenant's for that alone (the Slurm users' homes least of all). A PersistentVolume
    binds one claim, so tenants sharing an export each get their own volume on the same
    NFS path; read-only unless the grant says rw.
    """
    volumes = {v["export"]: v for v in nfs_volumes(estate)}
    out = []
    for g in grants(estate):
        v = volumes.get(g.grant.export)
        if v is None:
            continue  # storage.unknown_grant / storage.grant_not_mounted report it
        read_only = g.grant.access != "rw"
        out.append({**v, "pv": f"{v['export']}-{g.tenant}", "namespace": g.tenant,
                    "claim": v["export"], "read_only": read_only,
                    "access_mode": "ReadOnlyMany" if read_only else "ReadWriteMany"})
    return out


def build_storage(estate: Estate, source: str) -> list[Artifact]:
    claims = nfs_claims(estate)
    if not claims:
        return []
    text = _render("storage.yaml.j2", estate, source, claims=claims,
                   capacity=NFS_NOMINAL_CAPACITY)
    return [_manifest("25-storage.yaml", text, estate)]


def kind_nodes(estate: Estate) -> list[dict]:
    mounts = [(v, set(v["clients"])) for v in nfs_volumes(estate)]
    out, patches = [], {}   # a group's workers share one taint patch: dumped once
    for n in plane_nodes(estate):
        node: dict[str, Any] = {"role": "control-plane" if n.control_plane else "worker",
                "image": KIND_IMAGE.format(version=estate.spec.kubernetes.version)}
        if n.labels:
            node["labels"] = n.labels
        extra = [{"hostPath": v["mount_path"], "containerPath": v["mount_path"]}
                 for v, clients in mounts if n.name in clients]
        if extra:
            node["extraMounts"] = extra
        # kind taints its control planes itself; workers get theirs through kubeadm.
        if n.taints and not n.control_plane:
            key = tuple(tuple(t.items()) for t in n.taints)
            if key not in patches:
                patches[key] = to_yaml({"kind": "JoinConfiguration", "nodeRegistration": {
                    "taints": list(n.taints)}}) + "\n"
            node["kubeadmConfigPatches"] = [patches[key]]
        out.append(node)
    return out


def build_kind(estate: Estate, source: str) -> list[Artifact]:
    """A kind cluster shaped like the plane, for trying the manifests on a workstation."""
    text = _render("kind-config.yaml.j2", estate, source, api=KIND_API,
                   nodes=kind_nodes(estate))
    return [Artifact("kubernetes/kind-config.yaml", text, Hostlist(), PLANE)]


def build_cni(estate: Estate, source: str) -> list[Artifact]:
    """Calico: the operator (hardened), then the Installation it reconciles
    (estate.render.cni)."""
    text = _render("cni-installation.yaml.j2", estate, source, version=cni.CALICO_VERSION,
                   api=cni.INSTALLATION_API, spec_body=installation_spec(estate))
    return [_manifest(cni.OPERATOR_PATH, operator_text(to_yaml), estate),
            _manifest(cni.INSTALLATION_PATH, text, estate)]


def _manifest(name: str, content: bytes, estate: Estate) -> Artifact:
    # Applied from a control plane: the pod network first, then in name order
    # (k8s_control_plane).
    return Artifact(f"{MANIFESTS}{name}", content, hostlist(control_planes(estate)),
                    PLANE)


# What every plane node needs from the kernel and where its packages come from.
KERNEL_MODULES = ("overlay", "br_netfilter")
SYSCTLS = {"net.bridge.bridge-nf-call-iptables": 1, "net.bridge.bridge-nf-call-ip6tables": 1,
           "net.ipv4.ip_forward": 1}
PACKAGES = ("kubelet", "kubeadm", "kubectl")
KEYRING = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"


def package_repository(estate: Estate) -> str:
    """'URL SUITE' of the apt repository: the spec's, or pkgs.k8s.io for the minor."""
    k = estate.spec.kubernetes
    minor = ".".join(k.version.split(".")[:2])
    return k.package_repository or f"https://pkgs.k8s.io/core:/stable:/v{minor}/deb/ /"


def build_node(estate: Estate, source: str) -> list[Artifact]:
    """Kernel modules, sysctls and the pinned package source, for every plane node."""
    nodes = hostlist(plane_nodes(estate))
    origin = line_value(source or "the spec", "kubernetes/node")
    head = f"# Rendered by estate from {origin}; do not edit.\n"
    url, _, suite = line_value(package_repository(estate), "kubernetes/apt").partition(" ")
    line_value(estate.spec.kubernetes.version, "kubernetes/apt")
    texts = {
        "node/modules.conf": "".join(f"{m}\n" for m in KERNEL_MODULES),
        "node/sysctl.conf": "".join(f"{k} = {v}\n" for k, v in SYSCTLS.items()),
        "apt/kubernetes.list": f"deb [signed-by={KEYRING}] {url} {suite or '/'}\n",
        # The Release.key next to the repository signs it (pkgs.k8s.io and its mirrors).
        "apt/kubernetes.pref": (f"Package: {' '.join(PACKAGES)}\n"
                                f"Pin: version {estate.spec.kubernetes.version}-*\n"
                                "Pin-Priority: 1001\n"),
    }
    return [Artifact(f"kubernetes/{p}", (head + t).encode(), nodes, PLANE)
            for p, t in texts.items()]


def build_kueue_system(estate: Estate, source: str) -> list[Artifact]:
    """Kueue itself (estate.render.kueue_install), applied before the queues."""
    return build_kueue_install(estate, source, to_yaml, hostlist(control_planes(estate)))


BUILDERS = (build_kubeadm, build_kube_vip, build_control_plane_timers, build_containerd,
            build_toolkit, build_mig_parted, build_node, build_cluster_objects,
            build_cni, build_device_plugin, build_gpu_addons, build_storage,
            build_kube_state_metrics, build_tenants, build_kueue_system, build_system_policy,
            build_kueue, build_kind)


def render_kubernetes(estate: Estate, source: str = "") -> list[Artifact]:
    """Every Kubernetes-plane artifact; nothing when the spec has no Kubernetes plane."""
    if estate.spec.kubernetes is None or not control_planes(estate):
        return []
    return [a for build in BUILDERS for a in build(estate, source)]
