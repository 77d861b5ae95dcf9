"""Storage validators: NFS exports, their servers and the clients that mount them."""
from __future__ import annotations

from estate.check._common import (
    all_hosts, duplicates, group_of, groups_touching, hostset, overlapping, problem, short,
)
from estate.check.findings import Severity
from estate.check.registry import validator

E, W = Severity.ERROR, Severity.WARNING


@validator("storage.duplicate_export", E, "storage", "two exports share a name")
def duplicate_export(estate):
    for i, export, first in duplicates(estate.spec.storage.exports, lambda x: x.name):
        yield problem(("storage", "exports", i, "name"), f"export '{export.name}' is defined "
                      f"twice (first at storage.exports[{first}])", "rename or remove one")


@validator("storage.unknown_export", E, "storage", "a mount names an export that is not defined")
def unknown_export(estate):
    known = {x.name for x in estate.spec.storage.exports}
    for i, mount in enumerate(estate.spec.storage.mounts):
        if mount.export not in known:
            yield problem(("storage", "mounts", i, "export"), f"unknown export '{mount.export}'",
                          f"use one of: {', '.join(sorted(known)) or '(none defined)'}")


@validator("storage.unknown_server", E, "storage", "an export's server is not a defined host")
def unknown_server(estate):
    for i, export in enumerate(estate.spec.storage.exports):
        if group_of(estate, export.server) is None:
            yield problem(("storage", "exports", i, "server"), f"server '{export.server}' is "
                          "not a host of any node group", "name a node with the storage role")


@validator("storage.server_role", E, "storage", "an export's server lacks the storage role")
def server_role(estate):
    for i, export in enumerate(estate.spec.storage.exports):
        group = group_of(estate, export.server)
        if group is not None and "storage" not in group.roles:
            yield problem(("storage", "exports", i, "server"), f"'{export.server}' has no "
                          "storage role, so no NFS server is installed there",
                          "add the storage role to its group, or pick a storage node")


@validator("storage.server_not_on_segment", E, "storage",
           "an export's server has no address on the export's segment")
def server_not_on_segment(estate):
    for i, export in enumerate(estate.spec.storage.exports):
        group = group_of(estate, export.server)
        if group is not None and export.segment not in group.addresses:
            yield problem(("storage", "exports", i, "segment"), f"server '{export.server}' has "
                          f"no address on '{export.segment}', so it cannot serve there",
                          f"add '{export.segment}: auto' to the server's addresses")


@validator("storage.unknown_client", E, "storage", "a mount names hosts that do not exist")
def unknown_client(estate):
    for i, mount in enumerate(estate.spec.storage.mounts):
        if missing := hostset(mount.clients) - all_hosts(estate):
            yield problem(("storage", "mounts", i, "clients"), f"unknown hosts {short(missing)}",
                          "list only hosts defined under 'nodes'")


@validator("storage.client_unreachable", E, "storage",
           "mount clients with no address on the export's segment")
def client_unreachable(estate):
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
def relative_path(estate):
    storage = estate.spec.storage
    paths = [(("storage", "exports", i, "path"), x.path) for i, x in enumerate(storage.exports)]
    paths += [(("storage", "mounts", i, "path"), m.path) for i, m in enumerate(storage.mounts)]
    for loc, path in paths:
        if not path.startswith("/") or "/../" in path + "/":
            yield problem(loc, f"'{path}' is not an absolute path", "start it with '/'")


@validator("storage.duplicate_mount", E, "storage", "two mounts at one path on the same hosts")
def duplicate_mount(estate):
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
def export_segment_purpose(estate):
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
def insecure_export(estate):
    for i, export in enumerate(estate.spec.storage.exports):
        unsafe = sorted(INSECURE_EXPORT_OPTIONS & set(export.options.split(",")))
        if unsafe:
            yield problem(("storage", "exports", i, "options"), f"'{export.name}' is exported "
                          f"with {', '.join(unsafe)}: any user on a client in its segment can "
                          "send NFS requests as that client (and, with AUTH_SYS, as any uid)",
                          "remove the option unless a client truly cannot use a reserved port")
