"""The vendored add-ons run as rendered: each flag whose upstream default decides whether the
container starts is resolved here as upstream's code resolves it, at the vendored version.

GPU Feature Discovery (k8s-device-plugin v0.20.0, commit 1b826acc6af3079d8923bac395c3124b8861a9a6):
- cmd/gpu-feature-discovery/main.go: `use-node-feature-api` defaults to true (env
  GFD_USE_NODE_FEATURE_API, USE_NODE_FEATURE_API); `output-file` defaults to
  /etc/kubernetes/node-feature-discovery/features.d/gfd (env GFD_OUTPUT_FILE); the config
  file comes from GFD_CONFIG_FILE or CONFIG_FILE.
- api/config/v1/flags.go updateFromCLIFlag: a flag set on the command line or through its
  environment variable overrides the config file; the config file overrides the default.
- internal/lm/output.go NewOutputer: with the NodeFeature API on, "required flag node-name
  not set" unless NODE_NAME (internal/flags/node.go) is set, and NAMESPACE; with it off,
  the labels go to the output file.
The upstream static DaemonSet (deployments/static/gpu-feature-discovery-daemonset.yaml, as
vendored) sets none of these: it stops at start. These tests fail on it.
"""
from __future__ import annotations

import yaml

from estate.model import kubernetes as k8s
from estate.render import gpu_addons
from tests.unit.checkutil import ROOT
from tests.unit.test_kubernetes_check import lab  # noqa: F401

GFD = "kubernetes/manifests/24-gpu-feature-discovery.yaml"
NFD = "kubernetes/manifests/23-node-feature-discovery.yaml"
PLUGIN = "kubernetes/manifests/20-device-plugin.yaml"

# upstream's flags as main.go declares them at v0.20.0: name -> (default, environment variables)
GFD_FLAGS = {
    "use-node-feature-api": (True, ("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API")),
    "output-file": ("/etc/kubernetes/node-feature-discovery/features.d/gfd",
                    ("GFD_OUTPUT_FILE",)),
    "config-file": ("", ("GFD_CONFIG_FILE", "CONFIG_FILE")),
}
CONFIG_KEYS = {"use-node-feature-api": ("useNodeFeatureAPI",),
               "output-file": ("gfd", "outputFile")}


def _bool(text: str) -> bool:
    return text.strip().lower() in ("1", "t", "true")     # Go's strconv.ParseBool


def _from_config(config: dict, keys: tuple):
    node = (config or {}).get("flags") or {}
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node


def resolve(container: dict, config: dict) -> dict:
    """GFD's effective flags: environment (c.IsSet) > config file > main.go's default."""
    env = {e["name"]: e.get("value") for e in container.get("env") or [] if "value" in e}
    refs = {e["name"] for e in container.get("env") or [] if "valueFrom" in e}
    out = {}
    for flag, (default, names) in GFD_FLAGS.items():
        set_by_env = next((env[n] for n in names if n in env), None)
        from_file = _from_config(config, CONFIG_KEYS.get(flag, ("-",)))
        value = set_by_env if set_by_env is not None else (
            from_file if from_file is not None else default)
        out[flag] = _bool(value) if isinstance(default, bool) and isinstance(value, str) \
            else value
    out["node-name"] = "NODE_NAME" in refs or bool(env.get("NODE_NAME"))
    return out


def start_error(container: dict, config: dict, mounts: dict[str, str]) -> str | None:
    """internal/lm/output.go NewOutputer, as a predicate: why GFD stops at start, if it does."""
    flags = resolve(container, config)
    if flags["use-node-feature-api"]:
        if not flags["node-name"]:
            return "required flag node-name not set"
        return None
    out = flags["output-file"]
    if not any(out.startswith(path.rstrip("/") + "/") for path in mounts):
        return f"the output file {out} is not on a mounted host path"
    return None


def docs(arts, path) -> list[dict]:
    return [d for d in yaml.safe_load_all(arts[path].content) if d]


def plugin_configs(arts) -> dict[str, dict]:
    [cm] = [d for d in docs(arts, PLUGIN) if d["kind"] == "ConfigMap"]
    return {k: yaml.safe_load(v) for k, v in cm["data"].items()}


def host_mounts(pod: dict, container: dict) -> dict[str, str]:
    """mountPath -> host path, for the container's hostPath volumes."""
    host = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes") or []
            if "hostPath" in v}
    return {m["mountPath"]: host[m["name"]] for m in container.get("volumeMounts") or []
            if m["name"] in host}


def test_upstreams_static_daemonset_stops_at_start():
    """The fault the issue names, on the vendored file as it is: no NODE_NAME, API on."""
    [ds] = [d for d in gpu_addons.vendored(k8s.GFD_MANIFEST, k8s.GFD_SHA256)
            if d["kind"] == "DaemonSet"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    assert start_error(c, {}, host_mounts(ds["spec"]["template"]["spec"], c)) == \
        "required flag node-name not set"


def test_rendered_gfd_starts_and_writes_where_nfd_worker_reads(lab):
    _, arts = lab
    configs = plugin_configs(arts)
    [worker] = [d for d in docs(arts, NFD) if d["kind"] == "DaemonSet"]
    wpod = worker["spec"]["template"]["spec"]
    read = {host.rstrip("/") for c in wpod["containers"]
            for host in host_mounts(wpod, c).values()}
    daemonsets = [d for d in docs(arts, GFD) if d["kind"] == "DaemonSet"]
    assert daemonsets
    for ds in daemonsets:
        pod = ds["spec"]["template"]["spec"]
        [c] = pod["containers"]
        config = configs[ds["spec"]["selector"]["matchLabels"][k8s.DEVICE_PLUGIN_CONFIG_LABEL]]
        mounts = host_mounts(pod, c)
        assert start_error(c, config, mounts) is None
        flags = resolve(c, config)
        assert flags["use-node-feature-api"] is False
        out_dir = flags["output-file"].rsplit("/", 1)[0]
        assert mounts[out_dir].rstrip("/") in read        # nfd-worker's features.d


def test_a_config_file_turning_the_api_back_on_loses_to_the_environment(lab):
    _, arts = lab
    [ds, *_] = [d for d in docs(arts, GFD) if d["kind"] == "DaemonSet"]
    [c] = ds["spec"]["template"]["spec"]["containers"]
    assert resolve(c, {"flags": {"useNodeFeatureAPI": True}})["use-node-feature-api"] is False
    bare = {**c, "env": [e for e in c["env"] if e["name"] != "USE_NODE_FEATURE_API"]}
    assert start_error(bare, {}, {}) == "required flag node-name not set"


def test_the_readmes_record_each_addons_version_and_source():
    for folder, version in (("gfd", "v0.20.0"), ("nfd", k8s.NFD_VERSION),
                            ("dcgm-exporter", k8s.DCGM_VERSION),
                            ("kube-state-metrics", k8s.KSM_VERSION),
                            ("kueue", k8s.KUEUE_VERSION)):
        text = (ROOT / "k8s" / folder / "README.md").read_text()
        assert version in text and "https://github.com/" in text, folder
        assert "Flag defaults" in text, f"k8s/{folder}/README.md: no flag-default review"
