"""`estate rotate` (estate.operate.rotate.logic): the steps for each secret, in the order that keeps the
estate working, to exactly the Pulumi program's holders; a new key kept beside the old;
the cluster CA refused with what to do; and, under the Pulumi mocks, a changed key in the
stack's state changes the inputs of exactly its holders' steps (the engine re-runs those).
The live proof with running jobs is tests/live_slurm/test_rotation.py."""
from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from estate.operate.rotate import logic as rotate
from estate.model import bridge
from estate.model.services import KEYS
from estate.pipeline import build
from estate.provision import tls
from estate.pulumi.plan import secret_hosts

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "stacks/lab.yaml"


@pytest.fixture(scope="module")
def lab():
    result = build(LAB)
    assert result.ok
    return result


def _steps(lab, secret):
    return [(s.action, s.what, s.nodes) for s in rotate.plan(lab.estate, lab.artifacts, secret)]


def test_munge_reaches_every_holder_before_any_daemon_restarts(lab):
    every = ("ctl1", "login1", "gpu1", "gpu2")
    assert _steps(lab, "munge-key") == [
        ("put", "munge", every), ("restart", "munge", every),
        ("restart", "slurmctld", ("ctl1",)), ("restart", "slurmdbd", ("ctl1",)),
        ("restart", "slurmrestd", ("ctl1",)), ("restart", "slurmd", ("gpu1", "gpu2"))]


def test_jwt_restarts_the_signer_and_mints_the_tenants_tokens_again(lab):
    assert _steps(lab, "jwt-key") == [
        ("put", "jwt", ("ctl1",)), ("restart", "slurmctld", ("ctl1",)),
        ("restart", "slurmrestd", ("ctl1",)), ("mint", "", ("ctl1",))]


def test_the_tls_front_changes_while_the_tenants_trust_both_cas(lab):
    assert _steps(lab, "tls-seed") == [
        ("tls-bundle", "", ("ctl1",)), ("mint", "", ("ctl1",)),
        ("tls-front", "stunnel", ("ctl1",)), ("tls-ca", "", ("ctl1",)), ("mint", "", ("ctl1",))]


def test_the_holders_are_the_pulumi_programs(lab):
    for secret, key in rotate.SECRETS.items():
        if key == "cluster-ca":
            continue
        want = set(secret_hosts(lab.estate, lab.artifacts)[key])
        assert set(rotate.holders(lab.estate, lab.artifacts, key)) == want
        touched = {n for s in rotate.plan(lab.estate, lab.artifacts, secret) for n in s.nodes}
        assert touched <= want, secret


def test_the_cluster_ca_is_refused_with_what_to_do(lab):
    with pytest.raises(rotate.Refused) as exc:
        rotate.plan(lab.estate, lab.artifacts, "cluster-ca")
    text = str(exc.value)
    assert text.count(". ") == 0 and text.endswith("estate apply.")   # one sentence
    assert "manual-rotation-of-ca-certificates" in text and "k8s-ca.key" in text
    with pytest.raises(rotate.Refused, match="one of munge-key"):
        rotate.plan(lab.estate, lab.artifacts, "munge")


def test_a_new_key_is_written_whole_and_the_old_kept_beside_it(tmp_path):
    old = os.urandom(128)
    (tmp_path / "munge.key").write_bytes(old)
    path = rotate.new_secret(tmp_path, "munge-key")
    new = path.read_bytes()
    assert len(new) == KEYS["munge"].size and new != old
    assert (tmp_path / "munge.key.previous").read_bytes() == old
    assert path.stat().st_mode & 0o777 == 0o600


class Recorder:
    def __init__(self):
        self.calls = []

    def put(self, node, path, data, owner, mode):
        self.calls.append(("put", node, path, hashlib.sha256(data).hexdigest(), owner, mode))

    def restart(self, node, daemon):
        self.calls.append(("restart", node, daemon))

    def mint(self, node):
        self.calls.append(("mint", node))

    def front(self, node):
        self.calls.append(("front", node))

    def front_ca(self, node, pem):
        self.calls.append(("ca", node, pem))


def test_the_runner_gets_the_new_key_and_the_log_names_no_key(lab, tmp_path):
    (tmp_path / "munge.key").write_bytes(os.urandom(128))
    key = rotate.new_secret(tmp_path, "munge-key").read_bytes()
    runner, lines = Recorder(), []
    rotate.carry_out(lab.estate, rotate.plan(lab.estate, lab.artifacts, "munge-key"),
                     tmp_path, runner, lines.append)
    puts = [c for c in runner.calls if c[0] == "put"]
    assert {c[1] for c in puts} == {"ctl1", "login1", "gpu1", "gpu2"}
    assert {c[2:] for c in puts} == {(rotate.MUNGE_PATH, hashlib.sha256(key).hexdigest(),
                                      "munge", 0o400)}
    first_restart = next(i for i, c in enumerate(runner.calls) if c[0] == "restart")
    assert all(c[0] == "put" for c in runner.calls[:first_restart])
    text = "\n".join(lines)
    assert key.hex() not in text and base64.b64encode(key).decode() not in text


def test_a_rotated_tls_seed_gives_tenants_both_cas_then_the_new_one(lab, tmp_path):
    (tmp_path / tls.SEED).write_bytes(os.urandom(32))
    tls.ensure_tls(tmp_path, lab.estate)
    old_ca = (tmp_path / tls.CA_CERT).read_bytes()
    old_front = (tmp_path / "slurmrestd-ctl1.crt").read_bytes()
    rotate.new_secret(tmp_path, "tls-seed")
    runner = Recorder()
    rotate.carry_out(lab.estate, rotate.plan(lab.estate, lab.artifacts, "tls-seed"),
                     tmp_path, runner, lambda _: None)
    new_ca = (tmp_path / tls.CA_CERT).read_bytes()
    assert new_ca != old_ca and (tmp_path / "slurmrestd-ctl1.crt").read_bytes() != old_front
    assert runner.calls == [("ca", "ctl1", new_ca + old_ca), ("mint", "ctl1"),
                            ("front", "ctl1"), ("ca", "ctl1", new_ca), ("mint", "ctl1")]


# --- Pulumi: a changed key re-runs exactly its holders --------------------------------------

def test_under_pulumi_a_rotated_key_changes_only_its_holders_steps(lab, monkeypatch):
    from pulumi.runtime import rpc

    from tests.unit import test_pulumi_program as program

    class Fixed(program.Mocks):
        """The same keys and join material on every run, but `rotated`'s key."""

        def __init__(self, rotated=None):
            super().__init__()
            self.rotated = rotated

        def new_resource(self, args):
            name, state = super().new_resource(args)
            if args.typ == "random:index/randomBytes:RandomBytes":
                seed = f"{args.name}:{'new' if args.name == self.rotated else 'old'}"
                raw = hashlib.sha512(seed.encode()).digest()[:int(args.inputs["length"])]
                state.update(base64=base64.b64encode(raw).decode(), hex=raw.hex())
            return name, state
    monkeypatch.setattr(program.secrets, "token_hex", lambda n: "ab" * n)

    def environments(rotated=None):
        run = program.run_stack(LAB, mocks=Fixed(rotated))
        return {n: rpc.unwrap_rpc_secret(r.inputs["environment"])
                if r.inputs.get("environment") is not None else None
                for n, r in run.commands().items()}
    base = environments()
    resources = {"munge": "munge-key", "jwt": "slurmrestd-jwt-key",
                 "tls": "slurmrestd-tls-seed", "cluster-ca": "kubernetes-ca-seed"}
    for key, resource in resources.items():
        after = environments(resource)
        changed = {n for n in base if base[n] != after[n]}
        want = set(secret_hosts(lab.estate, lab.artifacts)[key])
        assert changed == want, (key, changed, want)
    # rotating the TLS front's seed leaves the control plane's step alone (issue 47)
    assert "k8s1" not in secret_hosts(lab.estate, lab.artifacts)["tls"]
    assert bridge.ca_host(lab.estate) == "k8s1"
