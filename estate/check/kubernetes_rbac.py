"""Who may change what, read back from the rendered RBAC and Namespaces.

- No identity inside a tenant (its groups, its namespace's ServiceAccounts, and the groups
  that include them: system:authenticated, system:serviceaccounts) may change a boundary
  the estate owns: NetworkPolicies, ResourceQuotas and LimitRanges in its namespace, the
  bridge's Role and RoleBinding, the admission policies and their bindings, Namespaces
  (their Pod Security labels and toleration whitelist), or impersonate anyone.
- No identity outside a tenant may read that tenant's Secrets (the bridge's token), except
  the grants named in SECRET_READERS, each with its reason.
- Every system namespace Estate renders or places pods in carries an explicit Pod Security
  level (one without falls back to the API server's default, privileged).

Bindings to a ClusterRole Estate does not render are judged from BUILTIN_ROLES (Kubernetes'
bootstrap policy, plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go); a role known
to neither is refused: nothing can be proven of it.
"""
from __future__ import annotations

from estate.check.kubernetes_schema import _dicts, plane_artifacts
from estate.check.registry import ArtifactContext, Problem, Problems, validator
from estate.findings import Severity
from estate.model import bridge
from estate.model import kubernetes as k8s
from estate.model.services import MANIFESTS

E = Severity.ERROR
WRITE = {"create", "update", "patch", "delete", "deletecollection", "*"}
READ = {"get", "list", "watch", "*"}
ESCALATE = {"impersonate", "escalate", "bind"}
# (api group, resource) the estate owns inside a tenant namespace
NAMESPACED_BOUNDARIES = {("networking.k8s.io", "networkpolicies"), ("", "resourcequotas"),
                         ("", "limitranges"), ("rbac.authorization.k8s.io", "roles"),
                         ("rbac.authorization.k8s.io", "rolebindings")}
# cluster-scoped objects that are boundaries (a ClusterRoleBinding reaches them)
CLUSTER_BOUNDARIES = {("admissionregistration.k8s.io", "validatingadmissionpolicies"),
                      ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"),
                      ("rbac.authorization.k8s.io", "clusterroles"),
                      ("rbac.authorization.k8s.io", "clusterrolebindings"),
                      ("", "namespaces")}
_ALL = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]
# The bootstrap ClusterRoles a binding may name without Estate rendering them. `edit` and
# `admin` write NetworkPolicies (and admin RBAC): as far as this proof goes, everything.
BUILTIN_ROLES = {
    "cluster-admin": _ALL, "admin": _ALL, "edit": _ALL,
    "view": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
}
# Identities outside the tenants that may read a tenant's Secrets, and why.
SECRET_READERS = {
    ("ServiceAccount", "tigera-operator", "tigera-operator"):
        "Calico's operator (k8s/cni/tigera-operator.yaml, v1.42.3, ClusterRole "
        "tigera-operator: secrets list/get/watch in every namespace) copies the pull secrets "
        "and TLS material an Installation names into the namespaces it manages; upstream "
        "offers no namespaced variant",
}
# groups every tenant identity is a member of
WIDE_GROUPS = ("system:authenticated", "system:serviceaccounts")
POD_SECURITY = "pod-security.kubernetes.io/enforce"


def _docs(artifacts) -> list[tuple[str, dict]]:
    return [(a.path, d) for a in plane_artifacts(artifacts, MANIFESTS) for d in _dicts(a)]


def _key(doc: dict) -> tuple:
    meta = doc.get("metadata") or {}
    return doc.get("kind"), meta.get("namespace"), meta.get("name")


def _roles(docs) -> dict[tuple, list]:
    """(kind, namespace, name) -> rules, aggregated ClusterRoles with what they select."""
    roles = {_key(d): list(d.get("rules") or []) for _, d in docs
             if d.get("kind") in ("Role", "ClusterRole")}
    for _, d in docs:
        agg = d.get("aggregationRule") if d.get("kind") == "ClusterRole" else None
        for sel in (agg or {}).get("clusterRoleSelectors") or []:
            want = sel.get("matchLabels") or {}
            for _, other in docs:
                labels = (other.get("metadata") or {}).get("labels") or {}
                if other.get("kind") == "ClusterRole" and other is not d and \
                        all(labels.get(k) == v for k, v in want.items()):
                    roles[_key(d)] += list(other.get("rules") or [])
    return roles


def _rules(binding: dict, roles: dict) -> list | None:
    ref = binding.get("roleRef") or {}
    ns = (binding.get("metadata") or {}).get("namespace")
    if ref.get("kind") == "Role":
        return roles.get(("Role", ns, ref.get("name")))
    found = roles.get(("ClusterRole", None, ref.get("name")))
    return found if found is not None else BUILTIN_ROLES.get(ref.get("name"))


def _grants(rules: list, group: str, resource: str, verbs: set, named: bool = False) -> bool:
    """Whether the rules allow one of verbs on (group, resource); named: a rule limited to
    resourceNames counts too."""
    for r in rules:
        if not (set(r.get("verbs") or []) & verbs):
            continue
        if r.get("resourceNames") and not named:
            continue
        groups, resources = r.get("apiGroups") or [], r.get("resources") or []
        if ("*" in groups or group in groups) and ("*" in resources or resource in resources):
            return True
    return False


def tenant_identities(estate) -> dict[str, set[tuple]]:
    """tenant -> its (kind, name, namespace) subjects; groups carry no namespace."""
    out = {}
    for t in estate.spec.kubernetes.tenants:
        ids = {("Group", g, None) for g in t.groups}
        ids |= {("Group", f"system:serviceaccounts:{t.name}", None)}
        ids |= {("Group", g, None) for g in WIDE_GROUPS}
        out[t.name] = ids
    return out


def _subject(s: dict) -> tuple:
    return s.get("kind"), s.get("name"), s.get("namespace") if s.get("kind") == \
        "ServiceAccount" else None


def _inside(subject: tuple, tenant: str, ids: set) -> bool:
    kind, _, ns = subject
    return subject in ids or (kind == "ServiceAccount" and ns == tenant)


def _what(binding: dict) -> str:
    kind, ns, name = _key(binding)
    return f"{kind} {ns + '/' if ns else ''}{name}"


def _tenant_bindings(ctx) -> tuple[dict, dict, list]:
    """(rendered roles, each tenant's identities, [(path, binding, its namespace)]) that
    both tenant checks read; no bindings where the spec has no tenants."""
    k = ctx.estate.spec.kubernetes
    if not k or not k.tenants:
        return {}, {}, []
    docs = _docs(ctx.artifacts)
    bindings = [(path, b, (b.get("metadata") or {}).get("namespace")) for path, b in docs
                if b.get("kind") in ("RoleBinding", "ClusterRoleBinding")]
    return _roles(docs), tenant_identities(ctx.estate), bindings


@validator("kubernetes.tenant_boundary_writable", E, "kubernetes",
           "a rendered binding lets an identity inside a tenant change a boundary the estate "
           "owns (NetworkPolicies, quotas, LimitRanges, RBAC, admission policies)",
           stage="artifacts")
def tenant_boundary_writable(ctx: ArtifactContext) -> Problems:
    hint = ("bind tenants to estate.model.kubernetes.TENANT_ROLE, which reads the "
            "boundaries and writes none")
    roles, identities, bindings = _tenant_bindings(ctx)
    for path, b, ns in bindings:
        for t, ids in identities.items():
            if b["kind"] == "RoleBinding" and ns != t:
                continue
            who = [_subject(s) for s in b.get("subjects") or []
                   if _inside(_subject(s), t, ids)]
            if not who:
                continue
            rules = _rules(b, roles)
            name = ", ".join(f"{k_} {n}" for k_, n, _ in who)
            if rules is None:
                yield Problem(path, f"{_what(b)} binds {name} (inside tenant '{t}') to "
                              f"{(b.get('roleRef') or {}).get('name')}, a role neither "
                              "rendered nor built in: what it grants cannot be proven", hint)
                continue
            reach = NAMESPACED_BOUNDARIES | (CLUSTER_BOUNDARIES if b["kind"] ==
                                             "ClusterRoleBinding" else set())
            bad = sorted(f"{r}" for g, r in reach if _grants(rules, g, r, WRITE, named=True))
            bad += sorted(f"{v}" for v in ESCALATE
                          if any(v in (r.get("verbs") or []) for r in rules))
            if bad:
                yield Problem(path, f"{_what(b)} lets {name} (inside tenant '{t}') change "
                              f"what the estate owns in '{t}': {', '.join(bad)}", hint)


@validator("kubernetes.tenant_secrets_readable", E, "kubernetes",
           "a rendered identity outside a tenant can read that tenant's Secrets",
           stage="artifacts")
def tenant_secrets_readable(ctx: ArtifactContext) -> Problems:
    roles, identities, bindings = _tenant_bindings(ctx)
    for path, b, ns in bindings:
        tenants = [t for t in identities if b["kind"] == "ClusterRoleBinding" or ns == t]
        rules = _rules(b, roles) or []
        for t in tenants:
            for s in b.get("subjects") or []:
                subject = _subject(s)
                if _inside(subject, t, identities[t]) or subject in SECRET_READERS:
                    continue
                if _minter_of(subject, t, rules):
                    continue
                if _grants(rules, "", "secrets", READ, named=True):
                    yield Problem(path, f"{_what(b)} lets {subject[0]} {subject[1]} "
                                  f"(outside tenant '{t}') read Secrets in '{t}', among "
                                  "them the bridge's token",
                                  "drop the secrets rule, or name the grant and its "
                                  "reason in estate.check.kubernetes_rbac.SECRET_READERS")
                    break


def _minter_of(subject: tuple, tenant: str, rules: list) -> bool:
    """The bridge's minter, limited by resourceNames to the one Secret it writes."""
    if subject != ("User", bridge.minter_user(tenant), None):
        return False
    return all(r.get("resourceNames") == [bridge.SECRET] for r in rules
               if "secrets" in (r.get("resources") or []))


def pod_namespaces(docs) -> set[str]:
    """Namespaces the rendered workloads run in."""
    return {(d.get("metadata") or {}).get("namespace") or "default" for _, d in docs
            if d.get("kind") in ("Deployment", "DaemonSet", "StatefulSet", "Job")}


@validator("kubernetes.namespace_pod_security_implicit", E, "kubernetes",
           "a namespace Estate runs pods in has no explicit Pod Security level",
           stage="artifacts")
def namespace_pod_security_implicit(ctx: ArtifactContext) -> Problems:
    if not ctx.estate.spec.kubernetes:
        return
    docs = _docs(ctx.artifacts)
    labelled = {(d.get("metadata") or {}).get("name"): ((d.get("metadata") or {})
                                                         .get("labels") or {}).get(POD_SECURITY)
                for _, d in docs if d.get("kind") == "Namespace"}
    for ns in sorted(pod_namespaces(docs) | set(labelled)):
        if not labelled.get(ns):
            yield Problem(f"{MANIFESTS}", f"namespace '{ns}' has no "
                          f"{POD_SECURITY} label: Pod Security falls back to the API "
                          "server's default, privileged",
                          "render the Namespace with an explicit level (restricted where "
                          "its pods pass it)")
