"""The identity a tenant's pods run as, enforced at admission (kubernetes.tenants[].run_as).

A ValidatingAdmissionPolicy per granted tenant admits a pod only when runAsUser and
runAsGroup are set (an image's default user, often root, never runs) and every UID and
GID its pod- and container-level securityContexts name is one the grant holds. Each rule
is its own validation, so a refusal names the field and what is allowed. The expressions
are standard CEL only (has, all, in, ==), no Kubernetes library function, so that
tests/unit/test_identity_policy.py evaluates exactly what is rendered here.
"""
from __future__ import annotations

import json

from estate.kubernetes_releases import minor_of
from estate.model.kubernetes import STRICT_GROUPS_SINCE, RunAsIds, run_as_ids
from estate.spec.model import Tenant
from estate.spec.resolved import Estate

SC = "object.spec.securityContext"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# A pod's securityContexts cannot change once it exists; ephemeral containers arrive later,
# through their subresource (an UPDATE whose object is the whole pod).
MATCH = {"resourceRules": [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
     "resources": ["pods"]},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers"]}]}


def policy_name(tenant: Tenant) -> str:
    return f"{tenant.name}-run-as"   # cluster-scoped: one per tenant


def run_as_policy(estate: Estate, tenant: Tenant) -> dict | None:
    """The template's context for the tenant's policy and binding; None without a grant."""
    ids = run_as_ids(estate, tenant)
    if ids is None:
        return None
    strict = (minor_of(estate.spec.kubernetes.version) or (0, 0)) >= STRICT_GROUPS_SINCE
    return {"name": policy_name(tenant), "match": MATCH,
            "validations": validations(tenant.name, ids, strict)}


def validations(tenant: str, ids: RunAsIds, strict: bool) -> list[dict]:
    uids, gids = _ids(ids.users), _ids(ids.groups)
    users = f"the UIDs tenant {tenant} runs as: {_named(ids.users)}"
    groups = f"the GIDs tenant {tenant} runs as: {_named(ids.groups)}"
    out = [_rule(_set_everywhere(f), f"{f} must be set, in spec.securityContext or in every "
                 f"container's securityContext, to one of {allowed}; the image's default "
                 "(often root) is refused")
           for f, allowed in (("runAsUser", users), ("runAsGroup", groups))]
    out += [_rule(_pod_unset_or(f, f"{SC}.{f} in {want}"),
                  f"spec.securityContext.{f} must be one of {allowed}")
            for f, want, allowed in (("runAsUser", uids, users), ("runAsGroup", gids, groups),
                                     ("fsGroup", gids, groups))]
    out.append(_rule(_pod_unset_or("supplementalGroups",
                                   f"{SC}.supplementalGroups.all(g, g in {gids})"),
                     f"spec.securityContext.supplementalGroups must each be one of {groups}"))
    out += [_rule(_containers_unset_or(lst, f, want),
                  f"spec.{lst}[].securityContext.{f} must be one of {allowed}")
            for lst in CONTAINER_LISTS
            for f, want, allowed in (("runAsUser", uids, users), ("runAsGroup", gids, groups))]
    if strict:
        out.append(_rule(f"has({SC}) && has({SC}.supplementalGroupsPolicy) && "
                         f"{SC}.supplementalGroupsPolicy == 'Strict'",
                         "spec.securityContext.supplementalGroupsPolicy must be Strict: under "
                         "Merge, the default, the groups the image's /etc/group gives the user "
                         f"join {groups}"))
    return out


def _rule(expression: str, message: str) -> dict:
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def _ids(pairs) -> str:
    """A CEL list literal of the ids, ascending."""
    return json.dumps(sorted({i for _, i in pairs}))


def _named(pairs) -> str:
    return ", ".join(f"{i} ({name})" for name, i in pairs) or "none"


def _pod_unset_or(field: str, test: str) -> str:
    return f"!has({SC}) || !has({SC}.{field}) || {test}"


def _containers_unset_or(lst: str, field: str, want: str) -> str:
    c = "c.securityContext"
    return (f"!has(object.spec.{lst}) || object.spec.{lst}.all(c, !has({c}) || "
            f"!has({c}.{field}) || {c}.{field} in {want})")


def _set_everywhere(field: str) -> str:
    """field set for the pod, or by every container (a container's value overrides the
    pod's, so a container without one runs as the pod's, or the image's)."""
    each = " && ".join(f"(!has(object.spec.{lst}) || object.spec.{lst}.all(c, "
                       f"has(c.securityContext) && has(c.securityContext.{field})))"
                       for lst in CONTAINER_LISTS)
    return f"(has({SC}) && has({SC}.{field})) || ({each})"
