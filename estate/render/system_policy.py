"""The system namespaces' own fences: an explicit Pod Security level on kube-system, and
NetworkPolicies in kube-system and kueue-system (default deny, then what each component
needs). Objects as data, dumped by the caller.

What the pods in these namespaces need on the pod network (host-network pods, kube-proxy,
Calico, kube-state-metrics and the DCGM exporter, are outside NetworkPolicy; the node
firewall's flows fence them):
- every pod: DNS to kube-dns, and the API server on the control planes' API addresses and
  the VIP (Calico applies policy after kube-proxy's DNAT, so the Service address
  `kubernetes` is reached at these);
- kube-dns (CoreDNS): DNS from anywhere, and DNS out to the resolvers it forwards to;
- Kueue's controller: its admission webhook from the API server. The API server calls from
  its node, whose source address under VXLAN is the node's tunnel address in the pod CIDR,
  so the webhook port is open from any address; every other port stays closed.
- the kubelet's probes: Calico always admits traffic from a node to its own pods (Felix),
  so no rule is needed for them.
"""
from __future__ import annotations

from estate.model import kubernetes as k8s
from estate.model.kubernetes import API_PORT, control_planes
from estate.spec.resolved import Estate

NP_API = "networking.k8s.io/v1"
DNS_PORTS = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
KUBE_DNS = {"k8s-app": "kube-dns"}
KUEUE_WEBHOOK_PORT = 9443          # Kueue v0.19.2's webhook-server containerPort
KUBE_SYSTEM = "kube-system"
# kube-system holds the privileged GPU add-ons (the device plugin, GPU feature discovery)
# and host-network pods: its level is privileged, said explicitly.
KUBE_SYSTEM_POD_SECURITY = {"pod-security.kubernetes.io/enforce": "privileged",
                            "pod-security.kubernetes.io/enforce-version": "latest"}


def _policy(ns: str, name: str, spec: dict) -> dict:
    return {"apiVersion": NP_API, "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def api_server_peers(estate: Estate) -> list[dict]:
    hosts = sorted({n.address for n in control_planes(estate) if n.address} |
                   ({str(estate.spec.kubernetes.api_vip)} if estate.spec.kubernetes.api_vip
                    else set()))
    return [{"ipBlock": {"cidr": f"{h}/32"}} for h in hosts]


def common(estate: Estate, ns: str) -> list[dict]:
    """Default deny, DNS and the API server, for every pod of ns."""
    dns = {"namespaceSelector": {"matchLabels": {k8s.NAMESPACE_NAME_LABEL: KUBE_SYSTEM}},
           "podSelector": {"matchLabels": KUBE_DNS}}
    return [
        _policy(ns, "default-deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        _policy(ns, "allow-dns-and-api-server", {
            "podSelector": {}, "policyTypes": ["Egress"],
            "egress": [{"to": [dns], "ports": DNS_PORTS},
                       {"to": api_server_peers(estate),
                        "ports": [{"protocol": "TCP", "port": API_PORT}]}]}),
    ]


def kube_system(estate: Estate) -> list[dict]:
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": KUBE_SYSTEM, "labels": dict(KUBE_SYSTEM_POD_SECURITY)}}
    return [ns, *common(estate, KUBE_SYSTEM),
            _policy(KUBE_SYSTEM, "kube-dns", {
                "podSelector": {"matchLabels": KUBE_DNS}, "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"ports": DNS_PORTS}],
                "egress": [{"ports": DNS_PORTS}]})]


def kueue_system(estate: Estate) -> list[dict]:
    ns = k8s.KUEUE_NAMESPACE
    return [*common(estate, ns),
            _policy(ns, "kueue-webhook", {
                "podSelector": {"matchLabels": {"control-plane": "controller-manager"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": KUEUE_WEBHOOK_PORT}]}]})]


