"""Restricted text types for every free-text field of the spec.

Spec values end up in shell commands run as root, in config files read line by line
(slurm.conf, gres.conf, exports, systemd units) and in Kubernetes manifests. Each
type here accepts only what its sink can take as one value: no control characters
anywhere, no whitespace where the sink splits on it, no separator the sink gives a
meaning to. What is refused comes back from the loader as a finding at the field's
spec path (``schema.<error type>``), with a message that says what to write instead.

The semantic checks (is this a Slurm time Slurm can parse, is this a Kubernetes
version Estate can render) stay in the validators (estate.check), which report with
their own ids; these types only make sure that nothing a validator lets through can
change the structure of a rendered file or a command.
"""
from __future__ import annotations

import posixpath
import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (YAML and some
# editors break lines there too).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _schema(pattern: str, description: str, **extra) -> WithJsonSchema:
    """What `estate schema` tells editors; the validator stays the authority."""
    return WithJsonSchema({"type": "string", "pattern": pattern, "description": description,
                           **extra})


def _error(kind: str, message: str) -> PydanticCustomError:
    # The message is pre-formatted: '{reason}' keeps braces in values from being read
    # as template fields.
    return PydanticCustomError(kind, "{reason}", {"reason": message})


def control_problem(value: str) -> str | None:
    """Why value cannot be printed as one line of a config file (None if it can)."""
    m = CONTROL.search(value)
    if m:
        return (f"{value!r} contains the control character {m.group()!r} at position "
                f"{m.start()}; a newline or other control character would start a new line "
                "(a new setting) in the rendered files")
    return None


def _single_line(value: str) -> str:
    problem = control_problem(value)
    if problem:
        raise _error("control_character", problem + "; write the value on one line")
    return value


def _token(kind: str, charset: str, what: str, example: str, max_length: int = 255):
    """A validator for one whitespace-free token of the given character class."""
    pattern = re.compile(rf"[{charset}]+")

    def check(value: str) -> str:
        _single_line(value)
        if not value or len(value) > max_length or not pattern.fullmatch(value):
            bad = sorted({c for c in value if not pattern.fullmatch(c)})
            why = (f"characters {''.join(bad)!r} are not allowed" if bad else
                   "it is empty" if not value else f"it is longer than {max_length}")
            raise _error(kind, f"{value!r} is not {what}: {why}; use e.g. {example}")
        return value
    return check


# --- free text -----------------------------------------------------------------------

def _free_text(value: str) -> str:
    _single_line(value)
    if len(value) > 1024:
        raise _error("text_too_long", f"{value[:40]!r}... is longer than 1024 characters")
    return value


FreeText = Annotated[str, AfterValidator(_free_text), _schema(
    "^[^\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]*$", "One line of text.", maxLength=1024)]
"""Descriptions and product strings: one line of printable text."""


# --- paths -----------------------------------------------------------------------------

PATH_SEGMENT = re.compile(r"[A-Za-z0-9._+@-]+")


def _path_text(value: str) -> str:
    _single_line(value)
    parts = value.split("/")
    if ".." in parts or "." in parts[1:]:
        raise _error("path_traversal", f"{value!r} has '.' or '..' segments; write the "
                     f"directory it means, e.g. {posixpath.normpath('/' + value.lstrip('/'))}")
    bad = sorted({c for p in parts for c in p if not PATH_SEGMENT.fullmatch(c)})
    if bad:
        raise _error("path_characters", f"{value!r} contains {''.join(bad)!r}: paths may "
                     "use letters, digits, '.', '_', '+', '@' and '-' only (no whitespace, "
                     "quotes, '%', '$' or separators the rendered files give a meaning to)")
    if not value or len(value) > 4096:
        raise _error("path_length", f"{value[:40]!r} is empty or longer than 4096 characters")
    return value


def _absolute_path(value: str) -> str:
    _path_text(value)
    if not value.startswith("/"):
        raise _error("path_not_absolute", f"{value!r} is not an absolute path; write it "
                     "from the root, e.g. /srv/data")
    if value != "/" and (value.endswith("/") or "//" in value):
        raise _error("path_not_normalised", f"{value!r} is not normalised (empty segment "
                     f"or trailing '/'); write {'/' + '/'.join(p for p in value.split('/') if p)}")
    return value


_PATH = "(/[A-Za-z0-9._+@-]+)+"
AbsolutePath = Annotated[str, AfterValidator(_absolute_path), _schema(
    f"^(/|{_PATH})$", "A normalised absolute path (letters, digits, . _ + @ -).")]
"""A normalised absolute path: no '..', no whitespace, no control characters."""

def _relative_file(value: str) -> str:
    _path_text(value)
    if value.startswith("/") or value.endswith("/") or "//" in value or value.startswith("./"):
        raise _error("path_not_relative", f"{value!r} is not a relative file path; name the "
                     "file from the spec's directory, e.g. hooks/prolog.sh")
    return value


RelativeFile = Annotated[str, AfterValidator(_relative_file), _schema(
    "^[A-Za-z0-9._+@-]+(/[A-Za-z0-9._+@-]+)*$",
    "A file next to the spec: a relative path inside the spec's directory.")]
"""A file the spec brings along (a site's hook script): relative to the spec's directory,
never outside it ('..' is refused), installed byte for byte."""


# Directories a role must never chown or chmod, and trees in which it must not create a
# service's private directory (the system's own files, kernel interfaces, volatile or
# world-writable places).
SYSTEM_DIRECTORIES = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32",
    "/media", "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp",
    "/usr", "/usr/local", "/var", "/var/backups", "/var/cache", "/var/lib", "/var/local",
    "/var/lock", "/var/log", "/var/mail", "/var/opt", "/var/run", "/var/spool", "/var/tmp",
    "/var/www",
})
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/proc", "/run", "/sbin", "/sys",
                "/tmp", "/usr", "/var/tmp", "/var/run", "/var/lock")


def _inside(path: str, tree: str) -> bool:
    if tree == "/lib":  # /lib, /lib32, /lib64, /libx32 and what is under them
        return re.match(r"/lib[^/]*(/|$)", path) is not None
    return path == tree or path.startswith(tree + "/")


def _system_path(path: str, directories: frozenset, trees: tuple) -> str | None:
    if path in directories:
        return f"{path} is a system directory"
    tree = next((t for t in trees if _inside(path, t)), None)
    return f"{path} is inside {tree}, which belongs to the system" if tree else None


def system_directory_problem(path: str) -> str | None:
    """Why a role must not make path a service's own directory (None if it may)."""
    return _system_path(path, SYSTEM_DIRECTORIES, SYSTEM_TREES)


def _owned_directory(value: str) -> str:
    _absolute_path(value)
    problem = system_directory_problem(value)
    if problem:
        raise _error("system_directory", f"{problem}: the role chowns this directory to the "
                     "service's user with mode 0700, which would break the system; use a "
                     "dedicated subdirectory, e.g. /var/spool/slurmctld")
    return value


OwnedDirectory = Annotated[str, AfterValidator(_owned_directory), _schema(
    f"^{_PATH}$", "A dedicated directory a role chowns (never /etc, /var/lib, ...).")]
"""A directory a role creates and chowns to a service: never a system directory."""


def _program(value: str) -> str:
    _absolute_path(value)
    if value in SYSTEM_DIRECTORIES or value.endswith("/"):
        raise _error("program_path", f"{value!r} is a directory, not a program; name the "
                     "program's file, e.g. /usr/bin/mail")
    return value


ProgramPath = Annotated[str, AfterValidator(_program), _schema(
    f"^{_PATH}$", "An installed program's absolute path (never a directory).")]
"""An installed program slurmctld or slurmd runs (MailProg): a file, never a directory."""


def _cgroup_mountpoint(value: str) -> str:
    _absolute_path(value)
    if value != "/sys/fs/cgroup" and not re.fullmatch(r"/run/[^/]+/[^/].*", value):
        raise _error("cgroup_mountpoint", f"{value!r}: the workers make directories and "
                     "bind cgroups there, so it is either /sys/fs/cgroup (the default) or a "
                     "dedicated directory under /run, e.g. /run/estate/slurm-cgroup")
    return value


CgroupMountpoint = Annotated[str, AfterValidator(_cgroup_mountpoint), _schema(
    f"^{_PATH}$", "/sys/fs/cgroup, or a dedicated directory under /run.")]
"""Where Slurm's cgroup v1 hierarchies are: the system's, or a per-node bind under /run."""


def _device_prefix(value: str) -> str:
    _absolute_path(value)
    if not value.startswith(("/dev/", "/run/")):
        raise _error("device_prefix", f"{value!r} is neither under /dev (the driver's device "
                     "files, which the roles only check) nor under /run (fake devices for a "
                     "lab): elsewhere the slurm_worker role would create device files "
                     f"{value}0, {value}1, ... as root, replacing files of those names; use "
                     "/dev/nvidia, or e.g. /run/estate/fake-gpu/nvidia for fake GPUs")
    return value


DevicePrefix = Annotated[str, AfterValidator(_device_prefix), _schema(
    "^/(dev|run)(/[A-Za-z0-9._+@-]+)+$", "Device file prefix under /dev or /run.")]
"""The GPU device file prefix: /dev/... (driver's, checked) or /run/... (lab's, created)."""

# Where an NFS mount would shadow, or an export expose, the system's own files.
SYSTEM_MOUNT_POINTS = frozenset({"/", "/root", "/var", "/var/lib", "/var/log", "/var/cache",
                                 "/var/spool", "/var/backups", "/var/mail", "/var/tmp", "/tmp",
                                 "/var/lib/dpkg", "/var/lib/apt"})
SYSTEM_MOUNT_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/proc", "/run", "/sbin", "/sys",
                      "/usr", "/var/run", "/var/lock")


def system_mount_problem(path: str) -> str | None:
    """Why path may not be an NFS mount point or export (None if it may)."""
    return _system_path(path, SYSTEM_MOUNT_POINTS, SYSTEM_MOUNT_TREES)


def _storage_path(value: str) -> str:
    _path_text(value)
    problem = system_mount_problem(value.rstrip("/") or "/") if value.startswith("/") else None
    if problem:
        raise _error("system_directory", f"{problem}: an NFS mount there would hide it on "
                     "every client and an export would hand it to every client in the "
                     "segment; use a dedicated directory, e.g. /export/<name> on the server "
                     "and /mnt/<name> or /home on clients")
    return value


StoragePath = Annotated[str, AfterValidator(_storage_path), _schema(
    "^[A-Za-z0-9._+@/-]+$", "An export or mount path (never a system directory).")]
"""An export or mount path: safe characters, no '..', never a system directory. Whether it
is absolute and distinct is the storage validators' to report (storage.relative_path,
storage.duplicate_mount)."""


# --- option lists --------------------------------------------------------------------

_OPTION = "[A-Za-z0-9_][A-Za-z0-9_.-]*(=[A-Za-z0-9_.:/@+=-]+)?"
OPTION = re.compile(_OPTION)


def _options(value: str) -> str:
    _single_line(value)
    items = value.split(",")
    for item in items:
        if not OPTION.fullmatch(item) or ".." in item:
            raise _error("option_syntax", f"option {item!r} in {value!r} is not 'key' or "
                         "'key=value' (letters, digits, '_', '.', '-'; values also ':', '/', "
                         "'@', '+', '=', no '..'); options are separated by ',' without "
                         "spaces, e.g. rw,sync,no_subtree_check")
    return value


OptionList = Annotated[str, AfterValidator(_options), _schema(
    f"^{_OPTION}(,{_OPTION})*$", "Options: key or key=value, joined by ','.")]
"""mount(8)/exports(5) options: key or key=value items joined by ',' (no spaces, no
parentheses, so an option list can never open a second export or a new unit line)."""


# --- URLs and apt sources ------------------------------------------------------------

URL_CHARS = re.compile(r"[A-Za-z0-9._~:/%+@=-]+")
SUITE = re.compile(r"[A-Za-z0-9._/-]+")


def url_problem(url: str, secrets_go: str = "apt's auth.conf") -> str | None:
    """Why url is not an http(s) URL a rendered file may carry (None if it is);
    secrets_go says where credentials belong instead."""
    if not URL_CHARS.fullmatch(url):
        bad = sorted({c for c in url if not URL_CHARS.fullmatch(c)})
        return f"contains {''.join(bad)!r}"
    try:
        parts = urlsplit(url)
        parts.port
    except ValueError as exc:
        return f"does not parse ({exc})"
    if parts.scheme not in ("http", "https"):
        return "is not an http:// or https:// URL"
    if not parts.hostname:
        return "has no host"
    if parts.username is not None or parts.password is not None:
        return f"carries credentials (user@ or user:password@); put them in {secrets_go}"
    if parts.query or parts.fragment:
        return "has a query or fragment"
    return None


def _apt_source(value: str) -> str:
    _single_line(value)
    url, *rest = value.split(" ")
    problem = url_problem(url)
    if problem:
        raise _error("url", f"{url!r} {problem}; write 'URL [SUITE]', e.g. "
                     "https://pkgs.k8s.io/core:/stable:/v1.36/deb/ /")
    for word in rest:
        if not SUITE.fullmatch(word):
            raise _error("apt_suite", f"suite or component {word!r} in {value!r} must be "
                         "letters, digits, '.', '_', '/' or '-', separated by single spaces")
    return value


AptSource = Annotated[str, AfterValidator(_apt_source), _schema(
    "^https?://[A-Za-z0-9._~:/%+@=-]+( [A-Za-z0-9._/-]+)*$", "'URL [SUITE [COMPONENT...]]'.")]
"""An apt repository: an http(s) URL without credentials, then the suite (and components)."""


def _web_url(value: str) -> str:
    _single_line(value)
    problem = url_problem(value, "the receiving end's own configuration (a rendered tree "
                          "holds no secrets)")
    if problem:
        raise _error("url", f"{value!r} {problem}; write an http:// or https:// URL without "
                     "credentials, query or fragment, e.g. https://hooks.example.org/alerts")
    if {".", ".."} & set(urlsplit(value).path.split("/")):
        raise _error("path_traversal", f"{value!r} has '.' or '..' path segments; write the "
                     "path the endpoint means")
    return value


WebUrl = Annotated[str, AfterValidator(_web_url), _schema(
    "^https?://[A-Za-z0-9._~:/%+@=-]+$", "An http(s) URL without credentials or query.",
    maxLength=2048)]
"""An endpoint a daemon calls (Alertmanager's webhooks): http(s), a host, no credentials,
query or fragment. A URL that needs a secret to be useful cannot be a spec value: the
rendered trees hold no secrets."""


# --- mail ------------------------------------------------------------------------------

# RFC 1123 host names (letters, digits, '-' between them, dot-separated labels)
DNS_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                      r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*")
# The address forms a mail relay takes from anyone: a dot-atom local part (no quoted
# strings, comments or display names), '@', a host name.
EMAIL_LOCAL = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")


def _dns_name(value: str) -> str:
    _single_line(value)
    if not DNS_NAME.fullmatch(value):
        raise _error("dns_name", f"{value!r} is not a host name: dot-separated labels of "
                     "letters, digits and '-' (not at either end), at most 253 characters; "
                     "use e.g. mail.example.org")
    return value


def _email(value: str) -> str:
    _single_line(value)
    local, at, domain = value.rpartition("@")
    if not at or len(value) > 254 or len(local) > 64 or not EMAIL_LOCAL.fullmatch(local) \
            or not DNS_NAME.fullmatch(domain):
        raise _error("email", f"{value!r} is not a mail address of the form local@host "
                     "(no display name, quotes or spaces); use e.g. ops@example.org")
    return value


DnsName = Annotated[str, AfterValidator(_dns_name), _schema(
    "^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$",
    "A host name, e.g. mail.example.org.", maxLength=253)]
"""A host name (or dotted IPv4 address, whose labels are digits)."""

EmailAddress = Annotated[str, AfterValidator(_email), _schema(
    "^[^@\\s\"]+@[A-Za-z0-9.-]+$", "A mail address, local@host.", maxLength=254)]
"""A bare mail address: local@host, the forms every relay accepts."""


# --- tokens the validators then check for meaning -------------------------------------

Version = Annotated[str, AfterValidator(_token(
    "version_syntax", "A-Za-z0-9.+-", "a version", "1.36.1", 64)),
    _schema("^[A-Za-z0-9.+-]+$", "A version, e.g. 1.36.1.")]
"""A version token (the Kubernetes validators check it is one Estate can render)."""

SlurmTime = Annotated[str, AfterValidator(_token(
    "time_syntax", "A-Za-z0-9:-", "a Slurm time", "2-00:00:00 or INFINITE", 32)),
    _schema("^[A-Za-z0-9:-]+$", "A Slurm time: minutes, HH:MM:SS, D-HH:MM:SS or INFINITE.")]
"""A Slurm time token (slurm.time_format checks Slurm's grammar)."""


def _conf_number(value):
    """slurm.conf values are text; a YAML number is written as Slurm reads it. A YAML
    boolean is refused: Slurm's keys spell theirs differently (YES/NO, 1/0)."""
    if isinstance(value, bool):
        raise _error("conf_value_boolean", f"{value!r} is a YAML boolean; write the value "
                     "as slurm.conf(5) spells it, quoted, e.g. 'YES' or '1'")
    return str(value) if isinstance(value, (int, float)) else value


SLURM_CONF_VALUE = "A-Za-z0-9_.,:/=@+%*()\\[\\]-"
_conf_token = _token("conf_value", SLURM_CONF_VALUE, "one slurm.conf value (no whitespace, "
                     "quotes or '#')", "100000 or bf_continue,bf_window=4320", 1024)


def _conf_value(value: str) -> str:
    _conf_token(value)
    if ".." in value:
        raise _error("path_traversal", f"{value!r} contains '..'; a slurm.conf value that "
                     "names a path names it from the root, without '..'")
    return value


SlurmConfValue = Annotated[str, BeforeValidator(_conf_number), AfterValidator(_conf_value),
                           _schema("^[A-Za-z0-9_.,:/=@+%*()\\[\\]-]+$",
                                   "One slurm.conf value (or a number).",
                                   type=["string", "number"])]
"""A slurm.extra value: one token that cannot start a new setting, word or comment."""


def _scheduler_value(value):
    if value is True or (type(value) is int and 0 <= value <= 2**32 - 2):
        return value
    raise _error("scheduler_value", f"{value!r} is neither true (an option without a value) "
                 "nor a whole number from 0; write e.g. bf_continue: true or bf_window: 4320")


SchedulerValue = Annotated[int | bool, PlainValidator(_scheduler_value), WithJsonSchema(
    {"oneOf": [{"const": True}, {"type": "integer", "minimum": 0}],
     "description": "true (a flag) or a number."})]
"""A SchedulerParameters option's value: true for a flag, else a number."""


# --- Kubernetes labels (apimachinery's own rules) ------------------------------------------

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def label_key_problems(key: str) -> list[str]:
    out = []
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        out.append(f"label key prefix {prefix!r} is not a DNS subdomain")
    if not name or len(name) > 63 or not LABEL_NAME.fullmatch(name):
        out.append(f"label name {name!r} must be 1-63 letters, digits, '-', '_' or '.', "
                   "starting and ending alphanumeric")
    return out


def label_value_problems(value: str) -> list[str]:
    if len(value) > 63 or not LABEL_VALUE.fullmatch(value):
        return [f"label value {value!r} must be at most 63 letters, digits, '-', '_' "
                "or '.', starting and ending alphanumeric"]
    return []


def _label_key(value: str) -> str:
    _single_line(value)
    problems = label_key_problems(value)
    if problems:
        raise _error("label_key", "; ".join(problems) + ", e.g. example.com/pool")
    return value


def _label_value(value: str) -> str:
    _single_line(value)
    problems = label_value_problems(value)
    if problems:
        raise _error("label_value", problems[0] + ", e.g. a100-pool")
    return value


LabelKey = Annotated[str, AfterValidator(_label_key), _schema(
    "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    "[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", "A Kubernetes label key.")]
LabelValue = Annotated[str, AfterValidator(_label_value), _schema(
    "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", "A Kubernetes label value.", maxLength=63)]


# --- a directory (LDAP) ----------------------------------------------------------------

_LDAP_URI = re.compile(r"ldaps?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?")


def _ldap_uri(value: str) -> str:
    _single_line(value)
    if not _LDAP_URI.fullmatch(value):
        raise _error("ldap_uri", f"{value!r} is not an LDAP server URI; write "
                     "ldaps://HOST[:PORT] (or ldap://HOST[:PORT] with start_tls), no "
                     "credentials, base DN or filter, e.g. ldaps://ldap.example.org")
    return value


LdapUri = Annotated[str, AfterValidator(_ldap_uri), _schema(
    "^ldaps?://[A-Za-z0-9.-]+(:[0-9]{1,5})?/?$", "ldaps://HOST[:PORT] or ldap://HOST[:PORT].",
    maxLength=260)]
"""An LDAP server: scheme, host and port only; sssd.conf prints it in ldap_uri."""

# One RDN is attr=value; values here are plain words (letters, digits, space, '.', '_',
# '-'): no escapes, '+', quotes or '#', which sssd.conf and ldap3 would read differently.
_DN = re.compile(r"[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9._ -]+(,[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9._ -]+)*")


def _ldap_dn(value: str) -> str:
    _single_line(value)
    if len(value) > 1024 or not _DN.fullmatch(value) or value != value.strip():
        raise _error("ldap_dn", f"{value!r} is not a distinguished name Estate renders; "
                     "write attr=value pairs joined by ',' (letters, digits, space, '.', "
                     "'_', '-' in values), e.g. ou=people,dc=example,dc=org")
    return value


LdapDn = Annotated[str, AfterValidator(_ldap_dn), _schema(
    "^[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9._ -]+(,[A-Za-z][A-Za-z0-9-]*=[A-Za-z0-9._ -]+)*$",
    "An LDAP DN: attr=value pairs joined by ','.", maxLength=1024)]
"""A DN (a base or a bind identity), printed into sssd.conf as one value."""


def _secret_env(value: str) -> str:
    _single_line(value)
    if not re.fullmatch(r"ESTATE_[A-Z0-9_]{1,60}", value):
        raise _error("secret_env", f"{value!r} is not an environment variable Estate reads "
                     "a secret from; name one ESTATE_..., e.g. ESTATE_LDAP_BIND_B64")
    return value


SecretEnv = Annotated[str, AfterValidator(_secret_env), _schema(
    "^ESTATE_[A-Z0-9_]{1,60}$", "The environment variable that hands a secret to "
    "`estate apply` (base64), like ESTATE_MUNGE_KEY_B64.")]
"""The name of the variable that carries a secret, never the secret."""
