"""The Kubernetes plane as rendered for every example stack: every file validates against
the schema of the tool that reads it, quotas add up to the plane's GPUs, nodes carry the
labels and taints the spec implies, and no join secret is written."""
from __future__ import annotations

import copy
import subprocess
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from estate.check import kubernetes_quota as kquota
from estate.check import kubernetes_schema as kcheck
from estate.render import Artifacts, render_all
from estate.kubernetes_releases import (CONTAINERD_CONFIG_VERSION, CONTAINERD_MAJOR,
                                        CONTAINERD_SUITE, pause_image)
from estate.model import kubernetes as k8s
from estate.spec.hostlist import expand
from estate.render.kubernetes import render_kubernetes
from estate.spec.hostlist import Hostlist
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import HA_VIP, spec_dict

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p for p in (ROOT / "stacks").glob("*.yaml")
                if not p.name.startswith("Pulumi.")
                and "kubernetes" in yaml.safe_load(p.read_text()))


def estate_of(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, [f.message for f in loaded.findings]
    return Estate(loaded.spec)


def rendered(estate: Estate) -> Artifacts:
    out = Artifacts()
    for a in render_kubernetes(estate, "<test>"):
        out.add(a)
    return out


def docs(art) -> list[dict]:
    return kcheck.documents(art)


def manifests(arts: Artifacts) -> list[dict]:
    return [d for a in kcheck.plane_artifacts(arts, "kubernetes/manifests/") for d in docs(a)]


@pytest.fixture(scope="module", params=STACKS, ids=[p.stem for p in STACKS])
def stack(request):
    estate = estate_of(yaml.safe_load(request.param.read_text()))
    return estate, rendered(estate)


def test_the_example_stacks_have_a_kubernetes_plane():
    assert {p.stem for p in STACKS} >= {"lab", "example-prod"}


# --- every file validates ---------------------------------------------------------------

def test_every_manifest_passes_strict_schema_validation(stack):
    estate, arts = stack
    objects = manifests(arts)
    kinds = Counter(d["kind"] for d in objects)
    assert kinds.keys() >= {"Namespace", "PriorityClass", "RuntimeClass", "ServiceAccount",
                            "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet",
                            "ResourceQuota", "LimitRange", "NetworkPolicy", "PersistentVolume",
                            "PersistentVolumeClaim", "ResourceFlavor", "ClusterQueue",
                            "LocalQueue"}, kinds
    for doc in objects:
        assert kcheck.validate_object(doc, estate.spec.kubernetes.version) == [], doc


def test_validation_uses_the_pinned_minor_schema(stack):
    estate, _ = stack
    assert kcheck.schema_version(estate.spec.kubernetes.version) == "1.36.0"


def test_kubeadm_kubelet_and_kind_configs_validate(stack):
    _, arts = stack
    seen = Counter()
    for a in kcheck.plane_artifacts(arts):
        if a.path.startswith("kubernetes/kubeadm/") or a.path.endswith("kind-config.yaml"):
            for doc in docs(a):
                seen[doc["kind"]] += 1
                assert kcheck.validate_config(doc) == [], (a.path, doc)
    assert seen["InitConfiguration"] == seen["ClusterConfiguration"] == 1
    assert seen["KubeletConfiguration"] == 1 and seen["Cluster"] == 1
    assert seen["JoinConfiguration"] >= 1


def _mutants(node):
    """Copies of a config document with one thing wrong: a leaf of the wrong type, or an
    unknown key in a mapping."""
    if isinstance(node, dict):
        yield {**node, "bogus": 1}
        for k, v in node.items():
            for m in _mutants(v):
                yield {**node, k: m}
    elif isinstance(node, list):
        for i, v in enumerate(node):
            for m in _mutants(v):
                yield node[:i] + [m] + node[i + 1:]
    else:
        yield [node]
        yield 3.5 if isinstance(node, str) else "text"


def test_inlined_config_schemas_report_what_jsonschema_resolving_refs_reports(stack):
    """The config validators inline their $defs (a third of the time at 8,000 join files):
    on every rendered config document and every one-fault mutant of it, they find exactly
    what jsonschema finds resolving the same schema's $refs itself."""
    import jsonschema
    _, arts = stack
    checked = 0
    for a in kcheck.plane_artifacts(arts):
        if not (a.path.startswith("kubernetes/kubeadm/") or a.path.endswith("kind-config.yaml")):
            continue
        for doc in docs(a):
            filename = kcheck.CONFIG_SCHEMAS[doc["apiVersion"]]
            defs = yaml.safe_load((kcheck.SCHEMA_DIR / filename).read_text())["$defs"]
            plain = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{doc['kind']}",
                                                    "$defs": defs})
            inlined = kcheck._config_validator(filename, doc["kind"])
            assert "$ref" not in str({k: v for k, v in inlined.schema.items() if k != "$defs"})
            for m in [doc, *_mutants(doc)]:
                assert kcheck._errors(inlined, m) == kcheck._errors(plain, m), m
                checked += 1
    assert checked > 100


def test_device_plugin_configs_validate_and_cover_every_gpu_node(stack):
    estate, arts = stack
    configs = kcheck.device_plugin_configs(arts["kubernetes/manifests/20-device-plugin.yaml"])
    for name, config in configs.items():
        assert kcheck.validate_device_plugin_config(config) == [], name
    for name, node in kcheck.rendered_nodes(arts).items():
        if node["labels"].get(k8s.GPU_PRESENT) == "true":
            assert node["labels"][k8s.DEVICE_PLUGIN_CONFIG_LABEL] in configs, name


def test_containerd_configs_parse_and_use_systemd_cgroups(stack):
    _, arts = stack
    for path in ("kubernetes/containerd/config.toml", "kubernetes/containerd/config-gpu.toml"):
        text = arts[path].content.decode()
        tomllib.loads(text)
        assert kcheck.containerd_problems(text, gpu="gpu" in path) == []


@pytest.fixture(scope="module")
def containerd_bin() -> str:
    """The containerd nodes get (Debian's CONTAINERD_SUITE build), unpacked under build/ by
    scripts/containerd-bin.sh from the Debian mirror; the host's own is not it."""
    out = subprocess.run(["scripts/containerd-bin.sh"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, f"scripts/containerd-bin.sh failed: {out.stderr[-500:]}"
    return out.stdout.strip().splitlines()[-1]


def test_containerd_itself_loads_the_configs(stack, tmp_path, containerd_bin):
    """containerd 2 parses each file; its effective config has the runtimes and the sandbox
    image Estate wrote."""
    est, arts = stack
    version = subprocess.run([containerd_bin, "--version"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    assert f"containerd/v{CONTAINERD_MAJOR} {CONTAINERD_MAJOR}." in version, version
    for path, gpu in (("kubernetes/containerd/config.toml", False),
                      ("kubernetes/containerd/config-gpu.toml", True)):
        f = tmp_path / Path(path).name
        f.write_bytes(arts[path].content)
        out = subprocess.run([containerd_bin, "--config", str(f), "config", "dump"],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        dump = tomllib.loads(out)
        assert dump["version"] == CONTAINERD_CONFIG_VERSION
        assert dump["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == \
            pause_image(est.spec.kubernetes.version)
        cri = dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
        assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
        assert cri["default_runtime_name"] == ("nvidia" if gpu else "runc")
        if gpu:
            nvidia = cri["runtimes"][k8s.RUNTIME_HANDLER]
            assert nvidia["runtime_type"] == "io.containerd.runc.v2"
            assert nvidia["options"]["BinaryName"] == k8s.NVIDIA_RUNTIME_BINARY
            assert nvidia["options"]["SystemdCgroup"] is True


def test_containerd_comes_from_its_pinned_suite_only(stack):
    """The apt pin takes containerd from CONTAINERD_SUITE and refuses every other package of
    that suite (a node must not drift to Debian testing)."""
    _, arts = stack
    pref = arts[k8s.CONTAINERD_APT_PREF].content.decode()
    records = [dict(l.split(": ", 1) for l in block.splitlines() if ": " in l)
               for block in pref.split("\n\n")]
    assert records[0] == {"Package": "containerd", "Pin": f"release n={CONTAINERD_SUITE}",
                          "Pin-Priority": "990"}
    assert records[1] == {"Package": "*", "Pin": f"release n={CONTAINERD_SUITE}",
                          "Pin-Priority": "-1"}
    line = arts[k8s.CONTAINERD_APT_LIST].content.decode().splitlines()[-1]
    assert line.split()[-2:] == [CONTAINERD_SUITE, "main"]


def test_runtime_class_handler_is_the_containerd_runtime(stack):
    _, arts = stack
    [rc] = [d for d in manifests(arts) if d["kind"] == "RuntimeClass"]
    gpu_toml = tomllib.loads(arts["kubernetes/containerd/config-gpu.toml"].content.decode())
    runtimes = gpu_toml["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    assert rc["handler"] in runtimes


# --- quotas add up to the plane's GPUs ---------------------------------------------------

def spec_gpu_units(estate: Estate) -> tuple[Counter, Counter]:
    """(physical GPUs, advertised nvidia.com/gpu) per model on Kubernetes workers, from the
    spec itself rather than from the renderer's own facts."""
    physical, units = Counter(), Counter()
    k = estate.spec.kubernetes
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        cls = estate.node_class(group)
        if group.plane == "kubernetes" and "k8s_worker" in group.roles and cls.gpus:
            sharing = k.gpu_sharing_by_class.get(cls.name, k.gpu_sharing)
            per_gpu = sharing.replicas if sharing.mode == "time-slicing" else 1
            physical[cls.gpus.model] += len(hosts) * cls.gpus.count
            units[cls.gpus.model] += len(hosts) * cls.gpus.count * per_gpu
    return physical, units


def test_cluster_queue_quotas_sum_to_the_plane_gpus_per_flavor(stack):
    estate, arts = stack
    physical, units = spec_gpu_units(estate)
    flavors, queues = kcheck.rendered_queues(arts)
    assert {f["metadata"]["name"] for f in flavors} == set(physical)
    assert kcheck.nominal_gpus(queues) == dict(units)
    claimed = Counter()
    for t in estate.spec.kubernetes.tenants:
        claimed.update(t.gpus)
    assert claimed == physical                  # the spec gives the tenants every GPU
    nodes = kcheck.rendered_nodes(arts)
    assert {f["metadata"]["name"]: kcheck.flavor_capacity(f, nodes) for f in flavors} == units


def test_cpu_and_memory_quotas_split_the_flavor_nodes_allocatable_exactly(stack):
    """Allocatable, not capacity: the kubelet keeps kube_reserved, system_reserved and the
    eviction threshold from every node, and the DaemonSets on every GPU worker request their
    share (k8s.DAEMONSET_REQUESTS, issue 38); quotas must not hand those out."""
    estate, arts = stack
    kl, held = estate.spec.kubernetes.kubelet, k8s.daemonset_reserve()
    kept_cpu = (kl.kube_reserved.cpu_millicores + kl.system_reserved.cpu_millicores
                + held.cpu_millis)
    kept_mem = (kl.kube_reserved.memory_mb + kl.system_reserved.memory_mb
                + kl.eviction_memory_mb + held.memory_mi)
    _, queues = kcheck.rendered_queues(arts)
    totals: dict[str, Counter] = {}
    for q in queues:
        for group in q["spec"]["resourceGroups"]:
            assert group["coveredResources"] == ["cpu", "memory", k8s.GPU_RESOURCE]
            for f in group["flavors"]:
                # Kueue's CEL rule: each flavor lists every covered resource, in order
                assert [r["name"] for r in f["resources"]] == group["coveredResources"]
                t = totals.setdefault(f["name"], Counter())
                t["cpu"] += kquota.amount(f["resources"][0]["nominalQuota"], 1e-3)
                t["memory"] += int(f["resources"][1]["nominalQuota"].removesuffix("Mi"))
    want: dict[str, Counter] = {}
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        cls = estate.node_class(group)
        if group.plane == "kubernetes" and "k8s_worker" in group.roles and cls.gpus:
            w = want.setdefault(cls.gpus.model, Counter())
            w["cpu"] += len(hosts) * (cls.cpus * 1000 - kept_cpu)
            w["memory"] += len(hosts) * (cls.memory_mb - kept_mem)
    assert totals == want and all(t["cpu"] > 0 and t["memory"] > 0 for t in totals.values())


def test_kubelet_reserves_what_the_spec_says(stack):
    estate, arts = stack
    [kubelet] = [d for d in yaml.safe_load_all(arts["kubernetes/kubeadm/init.yaml"].content)
                 if d["kind"] == "KubeletConfiguration"]
    kl = estate.spec.kubernetes.kubelet
    assert kubelet["kubeReserved"] == {"cpu": f"{kl.kube_reserved.cpu_millicores}m",
                                       "memory": f"{kl.kube_reserved.memory_mb}Mi"}
    assert kubelet["systemReserved"] == {"cpu": f"{kl.system_reserved.cpu_millicores}m",
                                         "memory": f"{kl.system_reserved.memory_mb}Mi"}
    # setting evictionHard replaces the kubelet's whole default map: the disk signals stay
    assert kubelet["evictionHard"] == {"memory.available": f"{kl.eviction_memory_mb}Mi",
                                       "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                                       "imagefs.available": "15%"}
    assert kcheck.validate_config(kubelet) == []


def test_resource_quota_is_the_tenants_share_and_kueue_lends_no_gpus(stack):
    """Each ResourceQuota is its ClusterQueue's nominal GPUs (no borrowing, which the
    ResourceQuota would refuse), so the ResourceQuotas add up to the GPUs handed out."""
    estate, arts = stack
    _, queues = kcheck.rendered_queues(arts)
    total = 0
    for q in queues:
        ns = q["spec"]["namespaceSelector"]["matchLabels"][k8s.NAMESPACE_NAME_LABEL]
        [rq] = [d for d in manifests(arts) if d["kind"] == "ResourceQuota"
                and d["metadata"]["namespace"] == ns and d["metadata"]["name"] == "gpu"]
        share = sum(kcheck.nominal_gpus([q]).values())
        assert rq["spec"]["hard"][f"requests.{k8s.GPU_RESOURCE}"] == str(share)
        total += share
        for group in q["spec"]["resourceGroups"]:
            for f in group["flavors"]:
                [gpu] = [r for r in f["resources"] if r["name"] == k8s.GPU_RESOURCE]
                assert gpu["borrowingLimit"] == 0
    assert total == sum(kcheck.nominal_gpus(queues).values())
    units = {f["metadata"]["name"]: kcheck.flavor_capacity(f, kcheck.rendered_nodes(arts))
             for f in kcheck.rendered_queues(arts)[0]}
    assert total <= sum(units.values())


def test_quotas_follow_time_slicing_and_per_class_overrides():
    data = spec_dict("lab")
    data["kubernetes"]["gpu_sharing_by_class"] = {"inference-1x": {"mode": "time-slicing",
                                                                   "replicas": 7}}
    arts = rendered(estate_of(data))
    _, queues = kcheck.rendered_queues(arts)
    assert kcheck.nominal_gpus(queues) == {"l4": 7}
    node = kcheck.rendered_nodes(arts)["k8s2"]["labels"]
    assert node[k8s.DEVICE_PLUGIN_CONFIG_LABEL] == "inference-1x"
    assert node[k8s.GPU_REPLICAS] == "7"
    configs = kcheck.device_plugin_configs(arts["kubernetes/manifests/20-device-plugin.yaml"])
    assert configs["inference-1x"]["sharing"]["timeSlicing"]["resources"] == [
        {"name": "nvidia.com/gpu", "replicas": 7}]
    assert set(configs) == {"default", "inference-1x"}


def test_two_tenants_split_a_flavor_by_their_gpus():
    data = spec_dict("lab")
    data["node_classes"][2]["gpus"]["count"] = 3
    data["kubernetes"]["tenants"] = [{"name": "a", "gpus": {"l4": 2}},
                                     {"name": "b", "gpus": {"l4": 1}, "cohort": "other"}]
    arts = rendered(estate_of(data))
    _, queues = kcheck.rendered_queues(arts)
    got = {q["metadata"]["name"]: kcheck.nominal_gpus([q])["l4"] for q in queues}
    assert got == {"a": 8, "b": 4}                   # x4 time-slicing replicas
    cpus = {q["metadata"]["name"]: q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
            ["nominalQuota"] for q in queues}
    # the lab's L4 node: 2 CPUs, of which the default reservations leave 1500m allocatable,
    # and the DaemonSets' requests 1325m: split 2:1 by largest remainder
    assert cpus == {"a": "883m", "b": "442m"}


@pytest.mark.parametrize("total,weights,whole,want", [
    (4, [1], None, [4]), (32, [24, 8], None, [24, 8]), (10, [1, 1, 1], None, [4, 3, 3]),
    (10, [1, 1], 4, [3, 2]), (7, [0, 0], None, [0, 0]), (0, [3, 1], None, [0, 0]),
])
def test_apportion_is_exact_and_deterministic(total, weights, whole, want):
    assert k8s.apportion(total, weights, whole) == want


@given(st.lists(st.integers(0, 64), min_size=1, max_size=8), st.integers(0, 100_000),
       st.integers(0, 64))
def test_apportion_never_gives_more_than_claimed(weights, total, spare):
    whole = sum(weights) + spare                       # spare: GPUs no tenant claims
    shares = k8s.apportion(total, weights, whole)
    if whole:
        assert sum(shares) == total * sum(weights) // whole
        for w, got in zip(weights, shares):
            exact = total * w / whole
            assert exact - 1 < got < exact + 1
    if not spare:
        assert sum(shares) == (total if sum(weights) else 0)


def test_unclaimed_gpus_stay_out_of_the_queues():
    """A tenant given 1 of 2 GPUs gets 1 GPU's worth of quota, not the whole flavor."""
    data = spec_dict("lab")
    data["node_classes"][2]["gpus"]["count"] = 2
    arts = rendered(estate_of(data))
    _, queues = kcheck.rendered_queues(arts)
    assert kcheck.nominal_gpus(queues) == {"l4": 4}          # 1 GPU x 4 replicas of 8
    [q] = queues
    # half of the 1500m allocatable less the DaemonSets' 175m
    assert q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] \
        == "662m"


# --- nodes: labels, taints, topology --------------------------------------------------------

def test_gpu_workers_are_labelled_and_tainted(stack):
    estate, arts = stack
    nodes = kcheck.rendered_nodes(arts)
    for group, hosts in zip(estate.spec.nodes, estate.group_hosts):
        if group.plane != "kubernetes":
            continue
        cls = estate.node_class(group)
        for name in hosts:
            node = nodes[name]
            if name in estate.spec.kubernetes.control_plane:
                assert node["taints"] == [k8s.CONTROL_PLANE_TAINT]
            elif cls.gpus:
                assert node["taints"] == [k8s.gpu_taint(cls.gpus.model)]
                assert node["labels"][k8s.GPU_PRODUCT] == cls.gpus.product
                assert node["labels"][k8s.GPU_COUNT] == str(cls.gpus.count)
            for key, value in group.labels.items():
                assert node["labels"][key] == value


def test_kubelet_node_ip_is_the_api_segment_address(stack):
    estate, arts = stack
    seg = estate.spec.kubernetes.api_segment
    for a in kcheck.plane_artifacts(arts, "kubernetes/kubeadm/"):
        for doc in docs(a):
            reg = doc.get("nodeRegistration")
            if reg:
                args = {x["name"]: x["value"] for x in reg["kubeletExtraArgs"]}
                assert args["node-ip"] == str(estate.address(reg["name"], seg))


def test_topology_labels_follow_the_slurm_topology():
    """A Kubernetes node under a leaf gets leaf/spine/core labels from the same switch tree
    that the Slurm renderer writes into topology.conf, and its block as accelerator.
    example-prod runs Slurm 24.11, whose topology.conf holds the blocks when there are
    any, so the tree is read from the same spec without blocks."""
    data = spec_dict("prod")
    [inf] = [g for g in data["nodes"] if g["hosts"] == "inf[01-04]"]
    inf["switch"] = "leaf03"
    tree_only = copy.deepcopy(data)
    tree_only["topology"]["blocks"], tree_only["topology"]["block_sizes"] = [], []
    data["topology"]["blocks"].append({"name": "b09", "nodes": "inf[01-04]"})
    tree_arts = render_all(estate_of(tree_only), "<test>")
    parent = {}
    for line in tree_arts["slurm/topology.conf"].content.decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        # Switches= is a Slurm hostlist (spine[01-02])
        for child in expand(fields.get("Switches", "")):
            parent[child] = fields["SwitchName"]
    labels = kcheck.rendered_nodes(render_all(estate_of(data), "<test>"))["inf02"]["labels"]
    leaf = labels[k8s.TOPOLOGY_LABELS["leaf"]]
    assert leaf == "leaf03"
    assert labels[k8s.TOPOLOGY_LABELS["spine"]] == parent[leaf] == "spine02"
    assert labels[k8s.TOPOLOGY_LABELS["core"]] == parent[parent[leaf]] == "core"
    assert labels[k8s.TOPOLOGY_LABELS["block"]] == "b09"
    assert all(k.startswith("network.topology.nvidia.com/") for k in k8s.TOPOLOGY_LABELS.values())


# --- who consumes what -----------------------------------------------------------------------

def test_each_file_goes_to_the_nodes_that_use_it(stack):
    estate, arts = stack
    cps = estate.spec.kubernetes.control_plane
    assert list(arts["kubernetes/kubeadm/init.yaml"].consumers) == cps[:1]
    plane = [n for g, h in zip(estate.spec.nodes, estate.group_hosts)
             if g.plane == "kubernetes" for n in h]
    joins = {a.path: list(a.consumers) for a in kcheck.plane_artifacts(arts, "kubernetes/kubeadm/join/")}
    assert joins == {f"kubernetes/kubeadm/join/{n}.yaml": [n] for n in plane if n != cps[0]}
    for a in kcheck.plane_artifacts(arts, "kubernetes/manifests/"):
        assert list(a.consumers) == cps
    gpu = set(arts["kubernetes/containerd/config-gpu.toml"].consumers)
    cpu = set(arts["kubernetes/containerd/config.toml"].consumers)
    assert gpu | cpu == set(plane) and not gpu & cpu
    assert all(estate.node_class(estate.group_of(n)).gpus for n in gpu)
    assert not arts["kubernetes/kind-config.yaml"].consumers
    assert all(a.plane == "kubernetes" for a in arts.values())


def test_extra_control_planes_join_as_control_planes_through_the_vip():
    estate = estate_of(spec_dict("ha"))
    arts = rendered(estate)
    [join] = docs(arts["kubernetes/kubeadm/join/k8s-cp2.yaml"])
    assert join["controlPlane"] == {"localAPIEndpoint": {"advertiseAddress": "10.30.0.16",
                                                         "bindPort": 6443},
                                    "certificateKey": k8s.CERT_KEY_PLACEHOLDER}
    assert join["discovery"]["bootstrapToken"]["apiServerEndpoint"] == f"{HA_VIP}:6443"
    init = {d["kind"]: d for d in docs(arts["kubernetes/kubeadm/init.yaml"])}
    assert init["InitConfiguration"]["certificateKey"] == k8s.CERT_KEY_PLACEHOLDER
    conf = init["ClusterConfiguration"]
    assert conf["controlPlaneEndpoint"] == f"{HA_VIP}:6443"
    assert conf["apiServer"]["certSANs"] == ["10.30.0.15", "10.30.0.16", "10.30.0.17", HA_VIP]
    assert conf["networking"] == {
        "podSubnet": "10.244.0.0/16", "serviceSubnet": "10.96.0.0/16", "dnsDomain": "cluster.local"}
    assert init["KubeletConfiguration"]["cgroupDriver"] == "systemd"
    [worker] = docs(arts["kubernetes/kubeadm/join/inf01.yaml"])
    assert "controlPlane" not in worker
    assert worker["discovery"]["bootstrapToken"]["apiServerEndpoint"] == f"{HA_VIP}:6443"


def _env(pod: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in
            pod["spec"]["containers"][0]["env"]}


def test_kube_vip_holds_the_vip_on_every_control_plane_in_arp_mode_with_leader_election():
    arts = rendered(estate_of(spec_dict("ha")))
    vip = arts[k8s.KUBE_VIP_PATH]
    assert list(vip.consumers) == ["k8s-cp1", "k8s-cp2", "k8s-cp3"]
    [pod] = docs(vip)
    env = _env(pod)
    assert env["address"] == HA_VIP and env["vip_interface"] == "eth0"
    assert env["vip_arp"] == "true" and env["cp_enable"] == "true"
    assert env["vip_leaderelection"] == "true" and env["vip_leasename"] == "plndr-cp-lock"
    assert env["port"] == "6443"
    container = pod["spec"]["containers"][0]
    assert container["image"] == "ghcr.io/kube-vip/kube-vip:v1.2.3"
    assert pod["spec"]["hostNetwork"] is True
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/admin.conf"
    assert kcheck.validate_object(pod, "1.36.1") == []
    # the first control plane's variant for kubeadm init: super-admin.conf, else the same
    init = arts[k8s.KUBE_VIP_INIT_PATH]
    assert list(init.consumers) == ["k8s-cp1"]
    [first] = docs(init)
    assert first["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kubernetes/super-admin.conf"
    first["spec"]["volumes"][0]["hostPath"]["path"] = "/etc/kubernetes/admin.conf"
    assert first == pod


def test_one_control_plane_without_a_vip_gets_no_kube_vip_but_its_timers(stack):
    estate, arts = stack
    assert not estate.spec.kubernetes.api_vip
    assert not any(p.startswith("kubernetes/kube-vip/") for p in arts)
    cps = estate.spec.kubernetes.control_plane
    for name in ("etcd-snapshot", "cert-renew"):
        for path in (f"kubernetes/systemd/estate-{name}.timer",
                     f"kubernetes/systemd/estate-{name}.service", f"kubernetes/sbin/estate-{name}"):
            assert list(arts[path].consumers) == cps


def test_timers_snapshot_etcd_daily_and_renew_certificates_monthly():
    import configparser
    import shutil
    import subprocess
    arts = rendered(estate_of(spec_dict("ha")))
    for name, calendar in (("etcd-snapshot", "daily"), ("cert-renew", "monthly")):
        timer = configparser.ConfigParser(interpolation=None)
        timer.read_string(arts[f"kubernetes/systemd/estate-{name}.timer"].content.decode())
        assert timer["Timer"]["OnCalendar"] == calendar and timer["Timer"]["Persistent"] == "true"
        unit = configparser.ConfigParser(interpolation=None)
        unit.read_string(arts[f"kubernetes/systemd/estate-{name}.service"].content.decode())
        assert unit["Service"]["ExecStart"] == f"/usr/local/sbin/estate-{name}"
        script = arts[f"kubernetes/sbin/estate-{name}"]
        assert script.mode == 0o755
        assert subprocess.run(["sh", "-n"], input=script.content).returncode == 0
        if shutil.which("shellcheck"):
            assert subprocess.run(["shellcheck", "-s", "sh", "-"], input=script.content,
                                  capture_output=True).returncode == 0
    snap = arts["kubernetes/sbin/estate-etcd-snapshot"].content.decode()
    assert "etcdctl --endpoints=https://127.0.0.1:2379" in snap
    assert "--cacert=/etc/kubernetes/pki/etcd/ca.crt" in snap and " snapshot save " in snap
    assert "tail -n +8" in snap    # the newest 7 kept
    renew = arts["kubernetes/sbin/estate-cert-renew"].content.decode()
    assert "kubeadm certs renew all" in renew
    assert "for pod in etcd kube-apiserver kube-controller-manager kube-scheduler kube-vip" \
        in renew


# --- secrets ---------------------------------------------------------------------------------

def test_no_join_secret_is_rendered(stack):
    estate, arts = stack
    for a in kcheck.plane_artifacts(arts, "kubernetes/kubeadm/join/"):
        [join] = docs(a)
        token = join["discovery"]["bootstrapToken"]
        assert token["token"] == k8s.TOKEN_PLACEHOLDER
        assert token["caCertHashes"] == [k8s.CA_HASH_PLACEHOLDER]
    for a in arts.values():
        assert not kcheck.BOOTSTRAP_TOKEN.search(a.content.decode())
    init = docs(arts["kubernetes/kubeadm/init.yaml"])
    assert not any("bootstrapTokens" in d for d in init)


# --- tenants: namespaces, policies, storage, Kueue wiring ------------------------------------

def tenant_objects(arts, ns: str) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in manifests(arts)
            if d["metadata"].get("namespace") == ns}


def test_network_policies_default_deny_and_open_what_the_spec_allows():
    data = spec_dict("prod")
    data["kubernetes"]["tenants"][0]["allow_from"] = ["batch-embed"]
    arts = rendered(estate_of(data))
    inference, embed = tenant_objects(arts, "inference"), tenant_objects(arts, "batch-embed")
    for objs in (inference, embed):
        deny = objs[("NetworkPolicy", "default-deny")]["spec"]
        assert deny == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        dns = objs[("NetworkPolicy", "allow-dns")]["spec"]["egress"][0]
        assert {p["port"] for p in dns["ports"]} == {53}
    peer = {"namespaceSelector": {"matchLabels": {k8s.NAMESPACE_NAME_LABEL: "batch-embed"}}}
    assert inference[("NetworkPolicy", "allow-from-tenants")]["spec"]["ingress"] == [
        {"from": [peer]}]
    back = {"namespaceSelector": {"matchLabels": {k8s.NAMESPACE_NAME_LABEL: "inference"}}}
    assert embed[("NetworkPolicy", "allow-to-tenants")]["spec"]["egress"] == [{"to": [back]}]
    assert ("NetworkPolicy", "allow-from-tenants") not in embed
    assert ("NetworkPolicy", "allow-to-tenants") not in inference


def test_queues_bind_tenant_namespaces_to_their_cluster_queues(stack):
    estate, arts = stack
    objs = manifests(arts)
    cqs = {d["metadata"]["name"]: d for d in objs if d["kind"] == "ClusterQueue"}
    lqs = [d for d in objs if d["kind"] == "LocalQueue"]
    pcs = {d["metadata"]["name"]: d["value"] for d in objs if d["kind"] == "PriorityClass"}
    for t in estate.spec.kubernetes.tenants:
        mine = [q for q in lqs if q["metadata"]["namespace"] == t.name]
        # its own, and 'default': Kueue's queue for what names none (it manages them all)
        assert sorted(q["metadata"]["name"] for q in mine) == sorted([t.name, "default"])
        assert {q["spec"]["clusterQueue"] for q in mine} == {t.name}
        cq = cqs[t.name]
        assert cq["spec"]["namespaceSelector"]["matchLabels"] == {k8s.NAMESPACE_NAME_LABEL: t.name}
        assert cq["spec"]["cohortName"] == t.cohort
        assert pcs[k8s.priority_class(t)] == t.priority
    for f in (d for d in objs if d["kind"] == "ResourceFlavor"):   # its own pool's taint
        assert f["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal",
                                             "value": f["metadata"]["name"],
                                             "effect": "NoSchedule"}]


def test_nfs_volumes_point_at_the_export_server_on_its_segment(stack):
    estate, arts = stack
    exports = {e.name: e for e in estate.spec.storage.exports}
    pvs = [d for d in manifests(arts) if d["kind"] == "PersistentVolume"]
    assert pvs
    for pv in pvs:
        claim = pv["spec"]["claimRef"]
        export = exports[claim["name"]]
        assert pv["spec"]["nfs"] == {"server": str(estate.address(export.server, export.segment)),
                                     "path": export.path, "readOnly": True}
        pvc = tenant_objects(arts, claim["namespace"])[("PersistentVolumeClaim", claim["name"])]
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert "_netdev" not in pv["spec"].get("mountOptions", [])


def _volumes(data: dict) -> dict[str, dict]:
    """PersistentVolume name -> (PV, its claim) of a spec given as a dict."""
    arts = rendered(estate_of(data))
    out = {}
    for pv in (d for d in manifests(arts) if d["kind"] == "PersistentVolume"):
        ref = pv["spec"]["claimRef"]
        out[pv["metadata"]["name"]] = (pv, tenant_objects(arts, ref["namespace"])[
            ("PersistentVolumeClaim", ref["name"])])
    return out


def test_tenants_get_volumes_for_their_grants_only():
    """The lab's Kubernetes nodes used to mount the Slurm users' share and every tenant got
    it read-write; now a mount gives no tenant anything, and a grant is read-only."""
    data = spec_dict("lab")
    data["storage"]["mounts"][0]["clients"] += ",k8s[1-2]"    # home, on the plane's nodes too
    data["kubernetes"]["tenants"].append({"name": "portal", "gpus": {"l4": 0}})
    volumes = _volumes(data)
    assert set(volumes) == {"models-inference"}
    pv, pvc = volumes["models-inference"]
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["nfs"]["readOnly"] is True


def test_a_read_write_grant_is_a_read_write_volume():
    data = spec_dict("lab")
    data["storage"]["mounts"][0]["clients"] += ",k8s2"
    data["kubernetes"]["tenants"][0]["storage"] = [
        {"export": "models"}, {"export": "home", "access": "rw", "reason": "notebooks"}]
    volumes = _volumes(data)
    assert set(volumes) == {"models-inference", "home-inference"}
    pv, pvc = volumes["home-inference"]
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["nfs"]["readOnly"] is False
    assert volumes["models-inference"][0]["spec"]["nfs"]["readOnly"] is True


def test_kind_config_mirrors_the_plane(stack):
    estate, arts = stack
    [cluster] = docs(arts["kubernetes/kind-config.yaml"])
    nodes = kcheck.rendered_nodes(arts)
    assert [n["role"] for n in cluster["nodes"]].count("control-plane") == \
        len(estate.spec.kubernetes.control_plane)
    assert len(cluster["nodes"]) == len(nodes)
    assert cluster["networking"]["podSubnet"] == str(estate.spec.kubernetes.pod_cidr)
    for node in cluster["nodes"]:
        for patch in node.get("kubeadmConfigPatches", []):
            [model] = {c.gpus.model for c in estate.spec.node_classes
                       if c.gpus and c.gpus.product == node["labels"][k8s.GPU_PRODUCT]}
            assert yaml.safe_load(patch)["nodeRegistration"]["taints"] == [k8s.gpu_taint(model)]
        if node.get("labels", {}).get(k8s.GPU_PRESENT) == "true":
            assert node["kubeadmConfigPatches"]
    mounts = {m["containerPath"] for n in cluster["nodes"] for m in n.get("extraMounts", [])}
    assert mounts == {m.path for m in estate.spec.storage.mounts
                      if any(c in nodes for c in Hostlist.parse(m.clients))}


# --- purity ------------------------------------------------------------------------------------

def test_render_is_deterministic(stack):
    estate, arts = stack
    again = rendered(estate_of(yaml.safe_load(yaml.safe_dump(estate.spec.model_dump(
        mode="json", by_alias=True)))))
    assert {p: a.content for p, a in again.items()} == {p: a.content for p, a in arts.items()}


def test_no_kubernetes_section_renders_nothing():
    data = spec_dict("lab")
    del data["kubernetes"]
    data["nodes"] = [g for g in data["nodes"] if g.get("plane") != "kubernetes"]
    data["storage"]["mounts"][0]["clients"] = "login1,gpu[1-2]"
    assert render_kubernetes(estate_of(data)) == []


def test_a_tenant_without_gpu_quota_gets_a_valid_cluster_queue(tmp_path):
    """A plane with no GPU nodes and a tenant with `gpus: {}` once rendered a ClusterQueue
    with `flavors: null`, which the schema check reported as the renderer's fault."""
    from estate.pipeline import build
    data = spec_dict("lab")
    data["nodes"] = [n for n in data["nodes"] if n["hosts"] != "k8s2"]
    data["kubernetes"]["tenants"] = [{"name": "inference", "gpus": {}, "priority": 1000}]
    data["storage"]["mounts"] = [m for m in data["storage"]["mounts"] if "k8s" not in m["clients"]]
    path = tmp_path / "nogpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = build(path)
    assert not [f for f in result.findings if f.severity.name == "ERROR"], \
        [f.message for f in result.findings]
    queues = [d for d in yaml.safe_load_all(
        result.artifacts["kubernetes/manifests/50-kueue.yaml"].content)
        if d and d["kind"] == "ClusterQueue"]
    assert [q["spec"]["resourceGroups"] for q in queues] == [[]]


def test_every_tenant_namespace_enforces_pod_security(stack):
    """Root in a tenant pod must not get a privileged container or a hostPath to a node's
    NFS mounts: Pod Security Admission enforces baseline on every tenant namespace."""
    estate, arts = stack
    spaces = {d["metadata"]["name"]: d["metadata"].get("labels", {})
              for d in manifests(arts) if d["kind"] == "Namespace"}
    for tenant in estate.spec.kubernetes.tenants:
        labels = spaces[tenant.name]
        assert labels.get("pod-security.kubernetes.io/enforce") in ("baseline", "restricted")
        assert labels.get("pod-security.kubernetes.io/warn") == "restricted"


def test_time_slicing_refuses_requests_for_more_than_one_replica():
    """Two replicas of one GPU are no more GPU than one: the device plugin refuses them
    unless the spec says otherwise, and the config stays valid either way."""
    from estate.render.kubernetes import _plugin_config
    from estate.spec.model import GpuSharing
    on = _plugin_config(GpuSharing(mode="time-slicing", replicas=4))
    assert on["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is True
    off = _plugin_config(GpuSharing(mode="time-slicing", replicas=4,
                                    fail_requests_greater_than_one=False))
    assert off["sharing"]["timeSlicing"]["failRequestsGreaterThanOne"] is False
    assert kcheck.validate_device_plugin_config(on) == []
    assert kcheck.validate_device_plugin_config(off) == []


def test_vendored_schemas_accept_no_field_upstream_lacks():
    """kind's `nodes[].gpus` and the device plugin's `flags.restartOnDeviceUnhealthy` exist
    only in unmerged upstream pull requests: the closed schemas refuse them."""
    plugin = {"version": "v1", "flags": {"migStrategy": "none",
                                          "restartOnDeviceUnhealthy": True}}
    assert kcheck.validate_device_plugin_config(plugin)
    kind = {"apiVersion": k8s.KIND_API, "kind": "Cluster",
            "nodes": [{"role": "worker", "gpus": "all"}]}
    assert kcheck.validate_config(kind)
    del kind["nodes"][0]["gpus"]
    assert kcheck.validate_config(kind) == []


# --- the timers' scripts, run: a private mount namespace puts temporary directories where
# they write (/var/lib, /var/backups, /etc), and fake crictl/kubeadm/sleep log their calls

def _namespaced(script: bytes, binds: dict, bin_dir, tmp_path):
    import shutil
    import subprocess
    if not shutil.which("unshare"):
        pytest.skip("unshare is not installed (util-linux)")
    (tmp_path / "script").write_bytes(script)
    mounts = " && ".join(f"mount --bind {src} {dst}" for dst, src in binds.items())
    cmd = f"{mounts} && PATH={bin_dir}:/usr/bin:/bin sh {tmp_path / 'script'}"
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"no private mount namespace here: {probe.stderr.decode().strip()}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", cmd], capture_output=True, text=True)


def _bin(tmp_path, **scripts):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_etcd_snapshot_saves_through_the_etcd_container_and_keeps_seven(tmp_path):
    import os
    arts = rendered(estate_of(spec_dict("ha")))
    lib, backups, log = tmp_path / "lib", tmp_path / "backups", tmp_path / "log"
    (lib / "etcd").mkdir(parents=True)
    (backups / "etcd").mkdir(parents=True)
    for i in range(8):   # older snapshots, oldest first
        old = backups / "etcd" / f"etcd-2026010{i}T000000Z.db"
        old.write_text("old")
        os.utime(old, (1_700_000_000 + i, 1_700_000_000 + i))
    bin_dir = _bin(tmp_path, crictl=(
        f'echo "$*" >> {log}\n'
        'case "$3" in ps) echo c0ffee;; exec) for a; do last=$a; done; echo snap > "$last";; '
        'esac\n'))
    run = _namespaced(arts["kubernetes/sbin/estate-etcd-snapshot"].content,
                      {"/var/lib": lib, "/var/backups": backups}, bin_dir, tmp_path)
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    assert "ps --name ^etcd$ --state running -q" in calls[0]
    assert "exec c0ffee etcdctl --endpoints=https://127.0.0.1:2379" in calls[1]
    assert "snapshot save /var/lib/etcd/estate-snapshot.db" in calls[1]
    kept = sorted(p.name for p in (backups / "etcd").iterdir())
    assert len(kept) == 7, kept
    assert [p for p in (backups / "etcd").iterdir() if p.read_text() == "snap\n"]
    assert "etcd-20260100T000000Z.db" not in kept and "etcd-20260101T000000Z.db" not in kept
    assert not (lib / "etcd" / "estate-snapshot.db").exists()


def _renew_setup(tmp_path, sleep_body: str = "true\n"):
    etc, log = tmp_path / "etc", tmp_path / "log"
    manifests = etc / "kubernetes" / "manifests"
    manifests.mkdir(parents=True)
    pods = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-vip")
    for pod in pods:
        (manifests / f"{pod}.yaml").write_text(pod)
    bin_dir = _bin(tmp_path, kubeadm=f'echo "kubeadm $*" >> {log}\n',
                   crictl=f'echo "crictl $*" >> {log}\necho c0ffee\n',
                   sleep=f'echo "sleep $*" >> {log}\n{sleep_body}')
    return etc, manifests, log, pods, bin_dir


def test_cert_renewal_renews_then_restarts_each_static_pod_in_turn(tmp_path):
    arts = rendered(estate_of(spec_dict("ha")))
    etc, manifests, log, pods, bin_dir = _renew_setup(tmp_path)
    run = _namespaced(arts["kubernetes/sbin/estate-cert-renew"].content, {"/etc": etc},
                      bin_dir, tmp_path)
    assert run.returncode == 0, run.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "kubeadm certs renew all"
    restarted = [c.split("--name ^", 1)[1].split("$")[0] for c in calls if " ps " in c]
    assert restarted == list(pods)
    assert calls.count("sleep 20") == len(pods)
    assert sorted(p.name for p in manifests.iterdir()) == sorted(f"{p}.yaml" for p in pods)


def test_cert_renewal_stopped_midway_puts_every_manifest_back(tmp_path):
    arts = rendered(estate_of(spec_dict("ha")))
    etc, manifests, log, pods, bin_dir = _renew_setup(tmp_path, sleep_body="exit 1\n")
    run = _namespaced(arts["kubernetes/sbin/estate-cert-renew"].content, {"/etc": etc},
                      bin_dir, tmp_path)
    assert run.returncode != 0
    assert sorted(p.name for p in manifests.iterdir()) == sorted(f"{p}.yaml" for p in pods)


def test_an_object_held_twice_is_written_out_twice_not_as_an_alias():
    from estate.render.kubernetes import to_yaml
    shared = {"key": "value"}
    text = to_yaml({"a": shared, "b": shared})
    assert "&" not in text and "*" not in text
    assert yaml.safe_load(text) == {"a": shared, "b": shared}
