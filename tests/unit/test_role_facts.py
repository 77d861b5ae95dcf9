"""The roles' facts answer the same for a command that prints nothing as for empty
output: pyinfra skips process() on no output and answers default(), and the roles test
the answer with `in` and == (a None there failed the slurmdbd role on a fresh node)."""
from __future__ import annotations

import inspect

import pytest
from pyinfra.api import FactBase

from roles._lib import facts

FACTS = [c for _, c in inspect.getmembers(facts, inspect.isclass)
         if issubclass(c, FactBase) and c.__module__ == facts.__name__ and c is not facts._Text]


def test_every_fact_is_checked():
    assert {c.__name__ for c in FACTS} >= {"Probe", "FileText", "ServiceActive", "Getent",
                                          "DeviceNode", "ContainerVirt", "MysqlGrants", "JoinToken",
                                          "CertificateKey"}


@pytest.mark.parametrize("fact", FACTS, ids=lambda c: c.__name__)
def test_no_output_answers_like_empty_output(fact):
    assert fact().default() == fact().process([""])
    assert fact().default() is not None


JOIN = ("kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef "
        "--discovery-token-ca-cert-hash sha256:" + "a" * 64 + " ")


def test_join_token_parses_the_printed_join_command():
    assert facts.JoinToken().process([JOIN]) == {
        "KUBEADM_TOKEN": "abcdef.0123456789abcdef", "KUBEADM_CA_CERT_HASH": "sha256:" + "a" * 64}
    # kubeadm's warnings come before the join command on stdout
    assert facts.JoinToken().process(["W1202 some warning", JOIN])["KUBEADM_TOKEN"] == \
        "abcdef.0123456789abcdef"
    # no CA hash (or no token): no join values, and the role refuses
    assert facts.JoinToken().process(["kubeadm join 10.0.0.1:6443 --token abc.def"]) == {}


def test_join_token_quotes_its_arguments():
    import shlex
    cmd = facts.JoinToken().command(ttl="2h", description="estate: it's revoked; rm -rf /")
    assert shlex.split(cmd) == ["kubeadm", "token", "create", "--print-join-command",
                                "--ttl", "2h", "--description", "estate: it's revoked; rm -rf /"]
    assert facts.JoinToken().command() == "kubeadm token create --print-join-command"


def test_certificate_key_answers_the_printed_key_stripped():
    assert facts.CertificateKey().process(["f" * 64 + "  "]) == "f" * 64
    assert "upload-certs --upload-certs" in facts.CertificateKey().command()
