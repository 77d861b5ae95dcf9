"""identity.directory: the spec's types, and SSSD's files as the nodes get them."""
from __future__ import annotations

import configparser
import json

import pytest
import yaml

from estate.model import directory
from estate.render.identity import render_identity
from estate.render.templates import RenderError
from estate.spec.load import load_text
from estate.spec.resolved import Estate
from tests.unit.checkutil import findings_for, keyed, spec_dict


def _estate(data: dict) -> Estate:
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "<test>")
    assert loaded.spec is not None, [f.as_dict() for f in loaded.findings]
    return Estate(loaded.spec)


def _files(data: dict) -> dict:
    return {a.path: a for a in render_identity(_estate(data), "<test>")}


def test_without_a_directory_only_local_files_are_rendered():
    files = _files(spec_dict("lab"))
    assert list(files) == ["common/identity.json"]
    assert '"source"' not in files["common/identity.json"].content.decode()


def test_sssd_conf_is_private_and_resolves_people_only():
    files = _files(spec_dict("prod"))
    sssd = files[directory.SSSD_CONF]
    assert sssd.mode == 0o600
    conf = configparser.ConfigParser(interpolation=None)
    conf.read_string(sssd.content.decode())
    dom = conf["domain/directory"]
    assert (dom["id_provider"], dom["enumerate"], dom["cache_credentials"]) == \
        ("ldap", "false", "true")
    assert (dom["ldap_tls_reqcert"], dom["ldap_tls_cacert"]) == ("demand", directory.ESTATE_CA)
    assert dom["ldap_schema"] == "rfc2307bis"
    # the daemons' accounts never go to the directory; people do
    assert conf["nss"]["filter_users"].split(", ") == ["root", "slurm", "munge"]
    # no password: the common role writes it into a snippet SSSD merges into this section
    assert "ldap_default_authtok" not in dom
    bind = json.loads(files[directory.BIND].content)
    assert bind["secret_file"] == "ldap-bind.secret"
    assert bind["section"] == "domain/directory" and bind["dropin"].startswith("/etc/sssd/conf.d/")


def test_a_cache_outlives_the_directory_by_the_spec_hours():
    for hours, days in ((1, 1), (24, 1), (25, 2)):
        size = directory.cache_sizing(hours)
        assert size["entry_timeout"] > hours * 3600
        assert size["refresh_interval"] < size["entry_timeout"]
        assert size["offline_days"] * 24 >= hours and size["offline_days"] == days


def test_nsswitch_everywhere_and_pam_on_login_nodes_only():
    files = _files(spec_dict("prod"))
    ns = files[directory.NSSWITCH].content.decode()
    assert "\npasswd:         files sss\n" in ns and "\ngroup:          files sss\n" in ns
    everyone = files["common/identity.json"].consumers
    assert files[directory.SSSD_CONF].consumers == everyone == files[directory.NSSWITCH].consumers
    assert str(files[directory.PAM_PROFILES].consumers) == "login[1-2]"


def test_directory_accounts_are_marked_for_the_common_role():
    doc = yaml.safe_load(_files(spec_dict("prod"))["common/identity.json"].content)
    local = {u["name"] for u in doc["users"] if "source" not in u}
    assert local == {"slurm", "munge"}


@pytest.mark.parametrize("field,value,kind", [
    ("uris", ["ldaps://ldap.example.org/dc=example"], "ldap_uri"),
    ("uris", ["https://ldap.example.org"], "ldap_uri"),
    ("users_base", "ou=people,dc=example,dc=org\nou=x", "control_character"),
    ("bind_dn", "uid=estate\",dc=org", "ldap_dn"),
    ("bind_secret", {"file": "ldap-bind.secret", "env": "LDAP_PW"}, "secret_env"),
])
def test_a_bad_directory_value_is_refused_at_its_spec_path(field, value, kind):
    data = spec_dict("prod")
    data["identity"]["directory"][field] = value
    found = [f for f in findings_for(data) if f.id == f"schema.{kind}"]
    assert found and found[0].path.startswith(f"identity.directory.{field}"), \
        [(f.id, f.path) for f in findings_for(data)]


def test_an_inline_password_is_refused_and_never_echoed():
    data = spec_dict("prod")
    data["identity"]["directory"]["bind_secret"] = "s3cret-pw"
    found = keyed(findings_for(data))[("identity.bind_secret_inline",
                                       "identity.directory.bind_secret")]
    assert "s3cret-pw" not in found.message + found.hint


def test_the_template_refuses_a_value_that_would_open_a_line():
    from estate.render.templates import render_template
    ctx = {"spec": {"name": "x"}, "source": "a\nldap_tls_reqcert = never"}
    with pytest.raises(RenderError):
        render_template("slurm_conf/nsswitch.conf.j2", ctx)


# --- the API server's AuthenticationConfiguration (kubernetes.oidc) ------------------------

def _k8s_files(data: dict) -> dict:
    from estate.render.kubernetes import render_kubernetes
    return {a.path: a for a in render_kubernetes(_estate(data), "<test>")}


@pytest.mark.parametrize("version,api", [("1.31.4", "v1beta1"), ("1.33.2", "v1beta1"),
                                         ("1.34.0", "v1"), ("1.36.1", "v1")])
def test_the_authentication_config_version_follows_the_release(version, api):
    from estate.check.kubernetes_schema import validate_config
    from estate.model.kubernetes import AUTH_CONFIG
    data = spec_dict("prod")
    data["kubernetes"]["version"] = version
    doc = yaml.safe_load(_k8s_files(data)[AUTH_CONFIG].content)
    assert doc["apiVersion"] == f"apiserver.config.k8s.io/{api}"
    assert validate_config(doc) == []


def test_tokens_groups_are_the_directorys_groups_unprefixed():
    from estate.model.kubernetes import AUTH_CONFIG, AUTH_CONFIG_PATH
    files = _k8s_files(spec_dict("prod"))
    [jwt] = yaml.safe_load(files[AUTH_CONFIG].content)["jwt"]
    assert jwt["claimMappings"]["groups"] == {"claim": "groups", "prefix": ""}
    assert jwt["claimMappings"]["username"]["prefix"] == ""
    # the tenant's RoleBinding names the directory's group as the token carries it
    bindings = [d for a in files.values() if a.path.endswith(".yaml")
                for d in yaml.safe_load_all(a.content) if isinstance(d, dict)
                and d.get("kind") == "RoleBinding"]
    subjects = {s["name"] for b in bindings for s in b.get("subjects", ())
                if s["kind"] == "Group"}
    assert "ml-platform" in subjects
    # kubeadm passes the file to the API server and mounts it into its pod
    init = list(yaml.safe_load_all(files["kubernetes/kubeadm/init.yaml"].content))
    api = next(d for d in init if d["kind"] == "ClusterConfiguration")["apiServer"]
    assert {"name": "authentication-config", "value": AUTH_CONFIG_PATH} in api["extraArgs"]
    [volume] = api["extraVolumes"]
    assert AUTH_CONFIG_PATH.startswith(volume["mountPath"] + "/") and volume["readOnly"]


@pytest.mark.parametrize("edit,error", [
    (lambda d: d["jwt"][0]["issuer"].update(clientID="x"), "'clientID' was unexpected"),
    (lambda d: d["jwt"][0]["claimMappings"]["groups"].pop("prefix"), "'prefix' is a required"),
    (lambda d: d.update(apiVersion="apiserver.config.k8s.io/v1alpha1"), "no schema"),
    (lambda d: d["jwt"][0]["issuer"].update(url="http://sso.example.org"), "does not match"),
])
def test_the_authentication_config_schema_refuses_what_upstream_would(edit, error):
    from estate.check.kubernetes_schema import validate_config
    from estate.model.kubernetes import AUTH_CONFIG
    doc = yaml.safe_load(_k8s_files(spec_dict("prod"))[AUTH_CONFIG].content)
    edit(doc)
    assert any(error in e for e in validate_config(doc)), validate_config(doc)


def test_without_oidc_the_api_server_is_as_before():
    from estate.model.kubernetes import AUTH_CONFIG
    files = _k8s_files(spec_dict("lab"))
    assert AUTH_CONFIG not in files
    assert b"authentication-config" not in files["kubernetes/kubeadm/init.yaml"].content


# --- estate import --directory: entries to the spec (the live test reads a real slapd) ----

def _user(name, uid, gid):
    return {"dn": f"uid={name},ou=people,dc=x", "uid": [name], "uidNumber": uid,
            "gidNumber": gid, "homeDirectory": f"/home/{name}", "loginShell": "/bin/bash"}


def test_rfc2307bis_members_are_dns_and_narrow_the_import():
    from estate.importer.directory import identity_of
    users = [_user("alice", 20101, 20001), _user("bob", 20102, 20002), _user("eve", 1, 9)]
    groups = [{"dn": "cn=research,ou=groups,dc=x", "cn": ["research"], "gidNumber": 20001,
               "member": ["uid=alice,ou=people,dc=x", "uid=bob,ou=people,dc=x"]},
              {"dn": "cn=ops,ou=groups,dc=x", "cn": ["ops"], "gidNumber": 20002, "member": []},
              {"dn": "cn=x,ou=groups,dc=x", "cn": ["x"], "gidNumber": 9, "member": []}]
    got = identity_of(users, groups, "rfc2307bis", ("research",))
    assert [(u["name"], u["group"]) for u in got["users"]] == [("alice", "research"),
                                                               ("bob", "ops")]
    assert [g["name"] for g in got["groups"]] == ["research", "ops"]
    assert all(a["source"] == "directory" for a in got["users"] + got["groups"])
    # the service accounts stay the Slurm import's, local
    from estate.importer.directory import merge
    local = {"groups": [{"name": "slurm", "gid": 64030}],
             "users": [{"name": "slurm", "uid": 64030, "group": "slurm", "system": True}]}
    merged = merge(local, got, {"uris": ["ldaps://x"]})
    assert [u["name"] for u in merged["users"]] == ["slurm", "alice", "bob"]
