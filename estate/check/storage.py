"""Storage validators: NFS exports, their servers and the clients that mount them."""
from __future__ import annotations

from estate.check._common import (
    all_hosts, duplicates, group_of, groups_touching, hostset, overlapping, problem, short,
)
from estate.check.registry import Problems, validator
from estate.findings import Severity
from estate.model.storage import (KUBERNETES, client_planes, cross_plane, grants, slurm_home,
                                  squashes_root)
from estate.spec.resolved import Estate

E, W = Severity.ERROR, Severity.WARNING


@validator("storage.duplicate_export", E, "storage", "two exports share a name")
def duplicate_export(estate: Estate) -> Problems:
    for i, export, first in duplicates(estate.spec.storage.exports, lambda x: x.name):
        yield problem(("storage", "exports", i, "name"), f"export '{export.name}' is defined "
                      f"twice (first at storage.exports[{first}])", "rename or remove one")


@validator("storage.unknown_export", E, "storage", "a mount names an export that is not defined")
def unknown_export(estate: Estate) -> Problems:
    known = {x.name for x in estate.spec.storage.exports}
    for i, mount in enumerate(estate.spec.storage.mounts):
        if mount.export not in known:
            yield problem(("storage", "mounts", i, "export"), f"unknown export '{mount.export}'",
                          f"use one of: {', '.join(sorted(known)) or '(none defined)'}")


@validator("storage.unknown_server", E, "storage", "an export's server is not a defined host")
def unknown_server(estate: Estate) -> Problems:
    for i, export in enumerate(estate.spec.storage.exports):
        if group_of(estate, export.server) is None:
            yield problem(("storage", "exports", i, "server"), f"server '{export.server}' is "
                          "not a host of any node group", "name a node with the storage role")


@validator("storage.server_role", E, "storage", "an export's server lacks the storage role")
def server_role(estate: Estate) -> Problems:
    for i, export in enumerate(estate.spec.storage.exports):
        group = group_of(estate, export.server)
        if group is not None and "storage" not in group.roles:
            yield problem(("storage", "exports", i, "server"), f"'{export.server}' has no "
                          "storage role, so no NFS server is installed there",
                          "add the storage role to its group, or pick a storage node")


@validator("storage.server_not_on_segment", E, "storage",
           "an export's server has no address on the export's segment")
def server_not_on_segment(estate: Estate) -> Problems:
    for i, export in enumerate(estate.spec.storage.exports):
        group = group_of(estate, export.server)
        if group is not None and export.segment not in group.addresses:
            yield problem(("storage", "exports", i, "segment"), f"server '{export.server}' has "
                          f"no address on '{export.segment}', so it cannot serve there",
                          f"add '{export.segment}: auto' to the server's addresses")


@validator("storage.unknown_client", E, "storage", "a mount names hosts that do not exist")
def unknown_client(estate: Estate) -> Problems:
    for i, mount in enumerate(estate.spec.storage.mounts):
        if missing := hostset(mount.clients) - all_hosts(estate):
            yield problem(("storage", "mounts", i, "clients"), f"unknown hosts {short(missing)}",
                          "list only hosts defined under 'nodes'")


@validator("storage.client_unreachable", E, "storage",
           "mount clients with no address on the export's segment")
def client_unreachable(estate: Estate) -> Problems:
    exports = {x.name: x for x in estate.spec.storage.exports}
    for i, mount in enumerate(estate.spec.storage.mounts):
        export = exports.get(mount.export)
        if export is None:
            continue
        for gi, part in groups_touching(estate, hostset(mount.clients)):
            if export.segment not in estate.spec.nodes[gi].addresses:
                yield problem(("storage", "mounts", i, "clients"), f"{short(part)} (nodes[{gi}]) "
                              f"have no address on '{export.segment}', where '{export.server}' "
                              f"serves '{export.name}'", f"add '{export.segment}: auto' to "
                              f"nodes[{gi}].addresses, or drop them from the mount")


@validator("storage.relative_path", E, "storage", "an export or mount path that is not absolute")
def relative_path(estate: Estate) -> Problems:
    storage = estate.spec.storage
    paths = [(("storage", "exports", i, "path"), x.path) for i, x in enumerate(storage.exports)]
    paths += [(("storage", "mounts", i, "path"), m.path) for i, m in enumerate(storage.mounts)]
    for loc, path in paths:
        if not path.startswith("/") or "/../" in path + "/":
            yield problem(loc, f"'{path}' is not an absolute path", "start it with '/'")


@validator("storage.duplicate_mount", E, "storage", "two mounts at one path on the same hosts")
def duplicate_mount(estate: Estate) -> Problems:
    mounts = estate.spec.storage.mounts
    by_path: dict[str, list[int]] = {}
    for j, mount in enumerate(mounts):
        by_path.setdefault(mount.path.rstrip("/"), []).append(j)
    pairs = []
    for same in by_path.values():
        earlier = overlapping([hostset(mounts[j].clients) for j in same])
        pairs += [(same[b], same[a]) for b, firsts in earlier.items() for a in firsts]
    for j, i in sorted(pairs):
        mount = mounts[j]
        both = hostset(mount.clients) & hostset(mounts[i].clients)
        yield problem(("storage", "mounts", j, "path"), f"{short(both)} already mount "
                      f"storage.mounts[{i}] at {mount.path}", "use another mount point")


@validator("storage.export_segment_purpose", W, "storage",
           "an export served on a segment whose purpose is not storage")
def export_segment_purpose(estate: Estate) -> Problems:
    purpose = {s.name: s.purpose for s in estate.spec.segments}
    for i, export in enumerate(estate.spec.storage.exports):
        if purpose.get(export.segment, "storage") != "storage":
            yield problem(("storage", "exports", i, "segment"), f"'{export.name}' is served on "
                          f"the {purpose[export.segment]} segment '{export.segment}'; NFS "
                          "traffic will compete with it", "serve exports on a storage segment")


# exports(5) options that let an unprivileged process on any client in the segment speak
# for the client (source ports above 1024, no lock authentication)
INSECURE_EXPORT_OPTIONS = {"insecure", "insecure_locks", "no_auth_nlm"}


@validator("storage.insecure_export", W, "storage",
           "an export accepts requests from unprivileged client ports")
def insecure_export(estate: Estate) -> Problems:
    for i, export in enumerate(estate.spec.storage.exports):
        unsafe = sorted(INSECURE_EXPORT_OPTIONS & set(export.options.split(",")))
        if unsafe:
            yield problem(("storage", "exports", i, "options"), f"'{export.name}' is exported "
                          f"with {', '.join(unsafe)}: any user on a client in its segment can "
                          "send NFS requests as that client (and, with AUTH_SYS, as any uid)",
                          "remove the option unless a client truly cannot use a reserved port")


@validator("storage.no_root_squash", W, "storage",
           "an export lets root on its clients act as root on it, without a reason")
def no_root_squash(estate: Estate) -> Problems:
    for i, export in enumerate(estate.spec.storage.exports):
        if not squashes_root(export) and not export.reason:
            yield problem(("storage", "exports", i, "options"), f"'{export.name}' is exported "
                          "with no_root_squash: root on any of its clients can create and "
                          "change files as root there (another user's ~/.ssh, setuid files)",
                          "drop no_root_squash (root_squash is the default), or say why it is "
                          f"needed in storage.exports[{i}].reason")


@validator("storage.unmounted_export", W, "storage", "an export no mount names")
def unmounted_export(estate: Estate) -> Problems:
    mounted = {m.export for m in estate.spec.storage.mounts}
    for i, export in enumerate(estate.spec.storage.exports):
        if export.name not in mounted:
            yield problem(("storage", "exports", i, "name"), f"no mount names '{export.name}', "
                          "and an export is served only to the clients its mounts name, so it "
                          "is exported to no one", "add a mount of it, or remove it")


# --- grants to Kubernetes tenants (kubernetes.tenants[].storage) ---------------------

def _grant_loc(g, *rest) -> tuple:
    return ("kubernetes", "tenants", g.index[0], "storage", g.index[1], *rest)


@validator("storage.unknown_grant", E, "storage", "a tenant is granted an export that is "
           "not defined")
def unknown_grant(estate: Estate) -> Problems:
    known = sorted(x.name for x in estate.spec.storage.exports)
    for g in grants(estate):
        if g.export is None:
            yield problem(_grant_loc(g, "export"), f"tenant '{g.tenant}' is granted unknown "
                          f"export '{g.grant.export}'",
                          f"use one of: {', '.join(known) or '(none defined)'}")


@validator("storage.duplicate_grant", E, "storage", "a tenant is granted one export twice")
def duplicate_grant(estate: Estate) -> Problems:
    by_tenant: dict[int, list] = {}
    for g in grants(estate):
        by_tenant.setdefault(g.index[0], []).append(g)
    for same in by_tenant.values():
        # a tenant's grants are in order, so an index into `same` is the grant's own
        for _, g, first in duplicates(same, lambda x: x.grant.export):
            yield problem(_grant_loc(g, "export"), f"tenant '{g.tenant}' is granted "
                          f"'{g.grant.export}' twice (first at storage[{first}]); "
                          "each grant is one claim of that name", "keep one grant")


@validator("storage.grant_not_mounted", E, "storage",
           "a granted export that no Kubernetes-plane node mounts")
def grant_not_mounted(estate: Estate) -> Problems:
    for g in grants(estate):
        if g.export is not None and KUBERNETES not in client_planes(estate, g.export.name):
            yield problem(_grant_loc(g, "export"), f"no Kubernetes-plane node mounts "
                          f"'{g.export.name}', so it is not exported to any node that could "
                          f"run tenant '{g.tenant}'s pods", "add the nodes that run the "
                          "tenant's pods to a mount of it in storage.mounts")


@validator("storage.no_root_squash_granted", E, "storage",
           "an export granted to a Kubernetes tenant does not squash root")
def no_root_squash_granted(estate: Estate) -> Problems:
    for g in grants(estate):
        if g.export is not None and not squashes_root(g.export):
            yield problem(_grant_loc(g, "export"), f"'{g.export.name}' is exported with "
                          f"no_root_squash: root in any pod of tenant '{g.tenant}' would be "
                          "root on the export", "drop no_root_squash from the export's "
                          "options, or do not grant it")


@validator("storage.cross_plane_grant", E, "storage",
           "a Kubernetes tenant is granted a Slurm-plane export without a reason")
def cross_plane_grant(estate: Estate) -> Problems:
    for g in grants(estate):
        if g.export is None or g.grant.reason or not cross_plane(estate, g.export):
            continue
        what = ("holds the Slurm users' homes" if slurm_home(estate, g.export)
                else "is mounted by Slurm-plane nodes")
        yield problem(_grant_loc(g), f"'{g.export.name}' {what}: granting it {g.grant.access} "
                      f"to tenant '{g.tenant}' lets its pods reach Slurm users' files",
                      "say why the tenant needs it in the grant's reason, or remove the grant")
