"""Status pages: one per compute plane, Prometheus console templates it serves itself at
/consoles/estate-<plane>.html, on the library (prom.lib, menu.lib) that Debian's
prometheus package ships. Each shows what a platform owner looks at first: the alerts
firing on the plane (with its shared filesystems and the monitoring itself), each with its
cause, tenant, where and what to look at first; the queue; GPUs allocated per tenant
beside what the spec entitles it to; and the shared filesystems' health.

The pages are Go html/template text. Spec values in them are names (the spec's Name type:
letters, digits, `_ . -`) and numbers, and each is still written escaped: HTML-escaped in
text, and a Go string literal (JSON's escapes, which Go reads alike) inside a template
action. The alerts' look-first hints are the rendered rules' own annotations, their
`{{ $labels.x }}` read as the console's `{{ .Labels.x }}` (html/template escapes those).
"""
from __future__ import annotations

import html
import re
from json.encoder import encode_basestring_ascii as _go

from estate.model.entitlement import LIMIT_KIND, entitled_gpus
from estate.model.monitoring import MONITORING_PLANE, WATCHDOG
from estate.render.artifacts import Artifact
from estate.spec.hostlist import Hostlist
from estate.spec.resolved import Estate

CONSOLES = "monitoring/consoles/"
TEMPLATES_DIR = "/etc/prometheus/consoles"       # Debian's default, said explicitly
LIBRARIES_DIR = "/usr/share/doc/prometheus/examples/console_libraries"   # Debian's prom.lib
PLANES = ("slurm", "kubernetes")
TITLES = {"slurm": "the Slurm plane", "kubernetes": "the Kubernetes plane"}
# the labels that say where an alert is, in the order a reader wants them
WHERE = ("partition", "account", "reason", "namespace", "deployment", "pod", "container",
         "node", "export", "mountaddr", "job", "instance", "rule_group", "integration")
_LABELS = re.compile(r"\{\{ \$labels\.([A-Za-z_][A-Za-z0-9_]*) \}\}")


def page(plane: str) -> str:
    return f"{CONSOLES}estate-{plane}.html"


def planes(estate: Estate) -> list[str]:
    return [p for p in PLANES if p != "kubernetes" or estate.spec.kubernetes]


def _text(value) -> str:
    return html.escape(str(value), quote=True)


def _query(promql: str) -> str:
    """A `query` action's argument: PromQL as a Go string literal."""
    return f"query {_go(promql)}"


def _hint(text: str) -> str:
    """A rule's annotation as console text: literal parts escaped, its labels the sample's."""
    out, last = [], 0
    for m in _LABELS.finditer(text):
        out += [_text(text[last:m.start()]), f"{{{{ .Labels.{m.group(1)} }}}}"]
        last = m.end()
    out.append(_text(text[last:]))
    rendered = "".join(out)
    assert "{{ $" not in rendered, text    # a template the console could not read
    return rendered


def _alert_rules(rules: dict, shown: set[str]) -> list[dict]:
    return [r for g in rules["groups"] for r in g["rules"]
            if "alert" in r and r["alert"] != WATCHDOG
            and r["labels"].get("plane", "target") in shown | {"target"}]


def _look_first(rules: list[dict]) -> str:
    """The firing sample's hint: its rule's, chosen by alert name and cause."""
    return "".join(
        f'{{{{ if and (eq .Labels.alertname {_go(r["alert"])}) (eq .Labels.cause '
        f'{_go(r["labels"]["cause"])}) }}}}{_hint(r["annotations"]["look_first"])}{{{{ end }}}}'
        for r in rules)


def alerts_section(plane: str, rules: dict) -> str:
    # a node of neither plane (the NFS server: plane `shared`) fails both planes
    shown = {plane, "storage", "shared", MONITORING_PLANE}
    firing = (f'ALERTS{{alertstate="firing", alertname!="{WATCHDOG}", '
              f'plane=~"{"|".join(sorted(shown))}"}}')
    where = "".join(f'{{{{ with .Labels.{k} }}}}<span class="where">{k}={{{{ . }}}}</span> '
                    f"{{{{ end }}}}" for k in WHERE)
    return f"""<h2>Alerts firing</h2>
<p id="watchdog">{{{{ if {_query(f'ALERTS{{alertname="{WATCHDOG}", alertstate="firing"}}')} }}}}\
Watchdog firing: Prometheus evaluates its rules.{{{{ else }}}}\
<strong>Watchdog not firing: Prometheus evaluates no rules.</strong>{{{{ end }}}}</p>
<table class="table table-sm table-bordered" id="alerts">
<tr><th>Alert</th><th>Cause</th><th>Plane</th><th>Tenant</th><th>Where</th><th>Look first at</th></tr>
{{{{ range {_query(firing)} | sortByLabel "alertname" }}}}
<tr class="alert-firing"><td class="alertname">{{{{ .Labels.alertname }}}}</td>\
<td class="cause">{{{{ .Labels.cause }}}}</td><td>{{{{ .Labels.plane }}}}</td>\
<td class="tenant">{{{{ .Labels.tenant }}}}</td><td>{where}</td>\
<td class="look-first">{_look_first(_alert_rules(rules, shown))}</td></tr>
{{{{ else }}}}
<tr><td colspan="6" id="no-alerts">No alert firing on {_text(TITLES[plane])}, the \
shared filesystems and nodes or the monitoring.</td></tr>
{{{{ end }}}}
</table>
"""


def _rows(query: str, cells: list[str], empty: str, columns: int) -> str:
    tds = "".join(f"<td>{c}</td>" for c in cells)
    return (f"{{{{ range {_query(query)} }}}}\n<tr>{tds}</tr>\n{{{{ else }}}}\n"
            f'<tr><td colspan="{columns}">{_text(empty)}</td></tr>\n{{{{ end }}}}\n')


def _each(promql_format: str, *labels: str) -> str:
    """A query built from the row's own labels (printf's %q quotes each as PromQL reads
    a string), and its first value."""
    args = " ".join(f".Labels.{k}" for k in labels)
    return (f"{{{{ with query (printf {_go(promql_format)} {args}) }}}}"
            f"{{{{ . | first | value }}}}{{{{ end }}}}")


def queue_section(plane: str) -> str:
    if plane == "slurm":
        head = ("<th>Partition</th><th>Account</th><th>Reason</th><th>Longest wait</th>"
                "<th>Jobs</th>")
        body = _rows("slurm:job_pending_seconds:max",
                     ["{{ .Labels.partition }}", '<span class="account">{{ .Labels.account }}'
                      "</span>", "{{ .Labels.reason }}", "{{ humanizeDuration .Value }}",
                      _each("max(slurm_jobs_pending{partition=%q, account=%q, reason=%q})",
                            "partition", "account", "reason")],
                     "No job pending.", 5)
    else:
        head = "<th>Namespace</th><th>Pods pending, not scheduled</th>"
        body = _rows("count by (namespace) (pod:unscheduled:max)",
                     ['<span class="namespace">{{ .Labels.namespace }}</span>',
                      "{{ .Value }}"], "No pod waiting for capacity.", 2)
    return (f'<h2>Queue</h2>\n<table class="table table-sm table-bordered" id="queue">\n'
            f"<tr>{head}</tr>\n{body}</table>\n")


def allocation_section(estate: Estate, plane: str) -> str:
    """A row per tenant the spec names, its GPUs allocated now beside its quota or fair
    share; then any tenant allocated GPUs that the spec does not name."""
    entitled = entitled_gpus(estate).get(plane, {})
    kind = LIMIT_KIND[plane]
    rule = f'tenant:gpus_allocated:sum{{plane="{plane}"}}'
    rows = "".join(
        f'<tr data-tenant="{_text(t)}"><td>{_text(t)}</td><td class="allocated">'
        f'{{{{ with {_query(f"{rule[:-1]}, tenant={_go(t)}}}")} }}}}{{{{ . | first | value }}}}'
        f"{{{{ else }}}}0{{{{ end }}}}</td><td class=\"entitled\">{gpus:g}</td></tr>\n"
        for t, gpus in sorted(entitled.items()))
    named = "|".join(re.escape(t) for t in sorted(entitled)) or "$^"
    others = (f"{{{{ range {_query(f'{rule[:-1]}, tenant!~{_go(named)}}}')} }}}}\n"
              "<tr><td>{{ .Labels.tenant }}</td><td class=\"allocated\">{{ .Value }}</td>"
              "<td>-</td></tr>\n{{ end }}\n")
    return (f'<h2>GPUs allocated</h2>\n<table class="table table-sm table-bordered" '
            f'id="allocation">\n<tr><th>Tenant</th><th>GPUs allocated</th>'
            f"<th>{_text(kind.capitalize())} (GPUs)</th></tr>\n{rows}{others}</table>\n")


def storage_section(exports: list[tuple[str, str, str]]) -> str:
    """Each NFS export (its label as the clients' mountstats write it, its server): the
    server answering or not, and the mounts that are degraded or stalled."""
    rows = "".join(
        f'<tr data-export="{_text(export)}"><td>{_text(export)}</td><td>{_text(server)}</td>'
        f'<td class="server">{{{{ if {_query(f"export:nfs_server_down:count{{export={_go(export)}}}")}'
        f" }}}}<strong>down</strong>{{{{ else }}}}answering{{{{ end }}}}</td></tr>\n"
        for export, server, _ in exports)
    unhealthy = _rows("max by (node, export) (node:nfs_mount_unhealthy:max)",
                      ["{{ .Labels.node }}", "{{ .Labels.export }}"],
                      "Every NFS mount healthy.", 2)
    return (f'<h2>Shared filesystems</h2>\n<table class="table table-sm table-bordered" '
            f'id="exports">\n<tr><th>Export</th><th>Server</th><th>State</th></tr>\n'
            f'{rows or "<tr><td colspan=3>No NFS export in the spec.</td></tr>"}'
            f'</table>\n<table class="table table-sm table-bordered" id="mounts">\n'
            f"<tr><th>Node</th><th>Mount degraded or stalled</th></tr>\n{unhealthy}</table>\n")


def console(estate: Estate, plane: str, rules: dict, exports: list[tuple[str, str, str]]
            ) -> str:
    others = " ".join(f'<a href="estate-{p}.html">{_text(TITLES[p])}</a>'
                      for p in planes(estate) if p != plane)
    return (HEADER + '{{ template "head" . }}\n{{ template "prom_content_head" . }}\n'
            f'<h1>Estate: {_text(TITLES[plane])}</h1>\n'
            f'<p class="planes">{others}</p>\n'
            + alerts_section(plane, rules) + queue_section(plane)
            + allocation_section(estate, plane) + storage_section(exports)
            + '{{ template "prom_content_tail" . }}\n{{ template "tail" }}\n')


HEADER = "{{/* Generated by Estate from the spec. Do not edit. */}}\n"


def render_consoles(estate: Estate, rules: dict, exports: list[tuple[str, str, str]],
                    host: Hostlist, plane_tag: str) -> list[Artifact]:
    """The pages, from the rendered rules and estate.render.monitoring's NFS exports."""
    return [Artifact(page(p), console(estate, p, rules, exports).encode(), host, plane_tag)
            for p in planes(estate)]
