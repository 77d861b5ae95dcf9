"""One identity on both planes: the admission policy a tenant's run_as renders, evaluated as
rendered (its CEL expressions read from the manifest, run by cel-python on sample pods) and
held to the upstream schema in strict mode, as `estate check` holds every manifest."""
from __future__ import annotations

import copy

import celpy
import pytest
import yaml

from estate.check.kubernetes_schema import documents, validate_object
from estate.model.kubernetes import NAMESPACE_NAME_LABEL
from estate.render import assemble, render_each
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import findings_for, spec_dict
from tests.unit.test_check_validators import put
from tests.unit.test_kubernetes_check import artifact_findings, tampered

TENANT_FILE = "kubernetes/manifests/30-tenant-inference.yaml"
BOB, ALICE = 20002, 20001      # the lab's users' UIDs: inference runs as bob
OPS, RESEARCH = 30002, 20001   # GIDs; ops moved off 20002 so a UID never passes as a GID


def lab_data(**tenant) -> dict:
    data = spec_dict("lab")
    [ops] = [g for g in data["identity"]["groups"] if g["name"] == "ops"]
    ops["gid"] = OPS
    data["kubernetes"]["tenants"][0].update(tenant)
    return data


def render(data: dict):
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, loaded.findings
    estate = Estate(loaded.spec)   # the Kubernetes plane's files are all these tests read
    return estate, assemble(render_each(estate, "<test>", ["estate.render.kubernetes"]))


@pytest.fixture(scope="module")
def lab():
    return render(lab_data())


def kinds(arts, kind: str) -> list[dict]:
    return [d for d in documents(arts[TENANT_FILE]) if d.get("kind") == kind]


@pytest.fixture(scope="module")
def policy(lab):
    [doc] = kinds(lab[1], "ValidatingAdmissionPolicy")
    return doc


def refused_by(policy: dict, pod: dict) -> set[str]:
    """The validations of the rendered policy that refuse pod, each by the first word of its
    message (the field it holds); every expression must evaluate to a bool."""
    env, activation = celpy.Environment(), {"object": celpy.json_to_cel(pod)}
    out = set()
    for v in policy["spec"]["validations"]:
        result = env.program(env.compile(v["expression"])).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (v["expression"], result)
        if not result:
            out.add(v["message"].split(" ", 1)[0])
    return out


ALLOWED = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "serve", "namespace": "inference"},
    "spec": {
        "securityContext": {"runAsUser": BOB, "runAsGroup": OPS, "fsGroup": OPS,
                            "supplementalGroups": [OPS], "supplementalGroupsPolicy": "Strict"},
        "initContainers": [{"name": "fetch", "image": "busybox",
                            "securityContext": {"runAsUser": BOB}}],
        "containers": [{"name": "serve", "image": "vllm/vllm-openai",
                        "securityContext": {"runAsGroup": OPS,
                                            "allowPrivilegeEscalation": False}}]}}
DEBUG = {"name": "debug", "image": "busybox", "securityContext": {"runAsUser": 0}}

# (case, edits to ALLOWED {spec path: value, DROP removes}, validations expected to refuse it)
DROP = object()
REFUSED = [
    ("runAsUser outside", {"spec.securityContext.runAsUser": ALICE},
     {"spec.securityContext.runAsUser"}),
    ("runAsUser a granted GID", {"spec.securityContext.runAsUser": OPS},
     {"spec.securityContext.runAsUser"}),
    ("runAsGroup outside", {"spec.securityContext.runAsGroup": RESEARCH},
     {"spec.securityContext.runAsGroup"}),
    ("fsGroup outside", {"spec.securityContext.fsGroup": 0}, {"spec.securityContext.fsGroup"}),
    ("a supplemental group outside", {"spec.securityContext.supplementalGroups": [OPS, RESEARCH]},
     {"spec.securityContext.supplementalGroups"}),
    ("container runAsUser override", {"spec.containers[0].securityContext.runAsUser": 0},
     {"spec.containers[].securityContext.runAsUser"}),
    ("container runAsGroup override", {"spec.containers[0].securityContext.runAsGroup": 0},
     {"spec.containers[].securityContext.runAsGroup"}),
    ("initContainer outside", {"spec.initContainers[0].securityContext.runAsUser": ALICE},
     {"spec.initContainers[].securityContext.runAsUser"}),
    ("initContainer group outside", {"spec.initContainers[0].securityContext.runAsGroup": 0},
     {"spec.initContainers[].securityContext.runAsGroup"}),
    ("ephemeral container as root", {"spec.ephemeralContainers": [DEBUG]},
     {"spec.ephemeralContainers[].securityContext.runAsUser"}),
    ("ephemeral container group outside", {"spec.ephemeralContainers": [
        {**DEBUG, "securityContext": {"runAsGroup": RESEARCH}}]},
     {"spec.ephemeralContainers[].securityContext.runAsGroup"}),
    # the image's user would run: serve sets no runAsUser and the pod none
    ("runAsUser unset", {"spec.securityContext.runAsUser": DROP}, {"runAsUser"}),
    ("runAsGroup unset", {"spec.securityContext.runAsGroup": DROP,
                          "spec.containers[0].securityContext.runAsGroup": DROP},
     {"runAsGroup"}),
    ("the image's /etc/group merged", {"spec.securityContext.supplementalGroupsPolicy": "Merge"},
     {"spec.securityContext.supplementalGroupsPolicy"}),
    ("no securityContext at all", {"spec.securityContext": DROP,
                                   "spec.initContainers": DROP, "spec.containers[0]":
                                   {"name": "serve", "image": "vllm/vllm-openai"}},
     {"runAsUser", "runAsGroup", "spec.securityContext.supplementalGroupsPolicy"}),
]


def pod(edits: dict) -> dict:
    out = copy.deepcopy(ALLOWED)
    for where, value in edits.items():
        if value is DROP:
            head, last = where.rsplit(".", 1)
            del _at(out, head)[last]
        else:
            put(out, where, value)
    return out


def _at(data, path: str):
    for part in path.replace("]", "").replace("[", ".").split("."):
        data = data[int(part) if part.isdigit() else part]
    return data


def test_the_allowed_pod_passes_every_validation(policy):
    assert refused_by(policy, ALLOWED) == set()


@pytest.mark.parametrize("case,edits,expected", REFUSED, ids=[c[0] for c in REFUSED])
def test_each_refused_pod_is_refused_by_exactly_the_expected_validation(policy, case, edits,
                                                                          expected):
    assert refused_by(policy, pod(edits)) == expected


def test_runAsUser_set_by_every_container_instead_of_the_pod_is_admitted(policy):
    sample = pod({"spec.securityContext.runAsUser": DROP,
                  "spec.containers[0].securityContext.runAsUser": BOB})
    assert refused_by(policy, sample) == set()


def test_every_validation_names_its_own_field_and_refuses_some_case(policy):
    fields = [v["message"].split(" ", 1)[0] for v in policy["spec"]["validations"]]
    assert len(fields) == len(set(fields)), fields
    assert set(fields) == set().union(*(expected for *_, expected in REFUSED))


def test_messages_say_what_is_allowed(policy):
    messages = {v["message"].split(" ", 1)[0]: v["message"]
                for v in policy["spec"]["validations"]}
    assert f"{BOB} (bob)" in messages["spec.securityContext.runAsUser"]
    assert str(ALICE) not in messages["runAsUser"]
    assert f"{OPS} (ops)" in messages["spec.securityContext.fsGroup"]
    assert "often root" in messages["runAsUser"]


def test_sample_pods_are_pods_kubernetes_accepts(lab):
    version = lab[0].spec.kubernetes.version
    for sample in [ALLOWED] + [pod(edits) for _, edits, _ in REFUSED]:
        assert validate_object(sample, version) == [], sample


def test_a_granted_users_primary_group_is_granted_with_it():
    """bob's primary group is ops: a grant of the user alone admits ops as his group."""
    _, arts = render(lab_data(run_as={"users": ["bob"]}))
    [doc] = kinds(arts, "ValidatingAdmissionPolicy")
    assert refused_by(doc, ALLOWED) == set()
    assert refused_by(doc, pod({"spec.securityContext.fsGroup": RESEARCH})) == \
        {"spec.securityContext.fsGroup"}
    _, arts = render(lab_data(run_as={"users": ["bob"], "groups": ["research"]}))
    [doc] = kinds(arts, "ValidatingAdmissionPolicy")
    assert refused_by(doc, pod({"spec.securityContext.fsGroup": RESEARCH})) == set()


def test_before_1_33_strict_supplemental_groups_are_not_required():
    """The API server drops supplementalGroupsPolicy before 1.33: requiring it there would
    refuse every pod."""
    data = lab_data()
    data["kubernetes"]["version"] = "1.32.4"
    _, arts = render(data)
    [doc] = kinds(arts, "ValidatingAdmissionPolicy")
    assert refused_by(doc, pod({"spec.securityContext.supplementalGroupsPolicy": DROP})) == set()
    assert refused_by(doc, pod({"spec.securityContext.runAsUser": ALICE})) == \
        {"spec.securityContext.runAsUser"}


def test_the_binding_denies_in_the_tenants_namespace_only(lab, policy):
    [binding] = kinds(lab[1], "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"], "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels": {
            NAMESPACE_NAME_LABEL: "inference"}}}}
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {(tuple(r["operations"]), tuple(r["resources"])) for r in rules} == \
        {(("CREATE",), ("pods",)), (("UPDATE",), ("pods/ephemeralcontainers",))}


def test_the_rbac_subjects_stay_the_tenants_groups(lab):
    [binding] = [b for b in kinds(lab[1], "RoleBinding")
                 if b["metadata"]["name"] == "tenant-admins"]
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "ops"}]


def test_a_tenant_without_a_grant_gets_no_policy():
    data = lab_data()
    del data["kubernetes"]["tenants"][0]["run_as"]
    _, arts = render(data)
    assert not kinds(arts, "ValidatingAdmissionPolicy")
    assert not kinds(arts, "ValidatingAdmissionPolicyBinding")


# --- the upstream schema, strict ---------------------------------------------------------

def test_policy_and_binding_pass_the_strict_upstream_schema(lab):
    version = lab[0].spec.kubernetes.version
    for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
        [doc] = kinds(lab[1], kind)
        assert validate_object(doc, version) == [], kind


def _misspell(kind: str, key: str, wrong: str):
    def edit(docs):
        [doc] = [d for d in docs if d.get("kind") == kind]
        doc["spec"][wrong] = doc["spec"].pop(key)
    return edit


@pytest.mark.parametrize("kind,key,wrong", [
    ("ValidatingAdmissionPolicy", "validations", "validation"),
    ("ValidatingAdmissionPolicyBinding", "validationActions", "validationAction")])
def test_estate_check_validates_the_new_kinds_strictly(lab, kind, key, wrong):
    """A misspelt field in either object is the artifact check's finding (no kind skipped)."""
    estate, arts = lab
    assert "kubernetes.manifest_invalid" not in artifact_findings(estate, arts)
    found = artifact_findings(estate, tampered(arts, TENANT_FILE, _misspell(kind, key, wrong)))
    messages = [f.message for f in found.get("kubernetes.manifest_invalid", [])]
    assert any(kind in m and wrong in m for m in messages), messages


# --- the spec's names (the validators' seeded cases: tests/unit/test_check_validators.py) --

def test_the_lab_grant_is_clean():
    assert not [f for f in findings_for(lab_data()) if f.id.startswith("identity.")]


def test_a_grant_names_at_least_one_user():
    found = findings_for(lab_data(run_as={"groups": ["ops"]}))
    assert any(f.path == "kubernetes.tenants[0].run_as.users" for f in found), found
