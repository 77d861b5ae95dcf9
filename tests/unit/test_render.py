"""Rendering is pure and deterministic, and writing is atomic."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from estate.cli import app
from estate.pipeline import build
from estate.render import write_tree
from estate.render.artifacts import Artifact, Artifacts
from estate.spec.hostlist import Hostlist

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "stacks" / "lab.yaml"


def test_same_spec_gives_byte_identical_trees(tmp_path):
    first, second = build(LAB), build(LAB)
    write_tree(first.artifacts, tmp_path / "a")
    write_tree(second.artifacts, tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


def test_nodename_lines_are_grouped_and_compressed():
    conf = build(LAB).artifacts["slurm/slurm.conf"].content.decode()
    lines = [l for l in conf.splitlines() if l.startswith("NodeName=")]
    assert lines == [
        "NodeName=gpu[1-2] NodeAddr=10.60.0.[13-14] CPUs=4 Sockets=1 CoresPerSocket=4 "
        "ThreadsPerCore=1 RealMemory=7680 Gres=gpu:a100:2 Features=a100,ib Weight=1 State=UNKNOWN"]


def test_failed_write_leaves_directory_as_it_was(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("before")

    bad = Artifacts()
    bad.add(Artifact("a.conf", b"written first", Hostlist.parse("n1")))
    # Fails after a.conf is already in the temporary tree.
    bad.add(Artifact("b.conf", "str, not bytes", Hostlist.parse("n1")))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        write_tree(bad, out)
    assert sorted(os.listdir(out)) == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "before"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], "temp dirs left behind"


def test_each_file_gets_its_mode_whatever_the_umask(tmp_path):
    arts = Artifacts()
    for path, mode in (("etc/a.conf", 0o644), ("etc/b.conf", 0o640), ("bin/run.sh", 0o755),
                       ("keys/secret", 0o600)):
        arts.add(Artifact(path, path.encode() * 1000, Hostlist.parse("n1"), mode=mode))
    old = os.umask(0o077)
    try:
        write_tree(arts, tmp_path / "t")
    finally:
        os.umask(old)
    for path, art in arts.items():
        written = tmp_path / "t" / path
        assert written.read_bytes() == art.content
        assert written.stat().st_mode & 0o7777 == art.mode, path


def test_cli_render_refuses_bad_spec_and_leaves_dir(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(LAB.read_text().replace("cluster_name: lab", "cluster_nam: lab"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm.conf").write_text("previous")
    result = CliRunner().invoke(app, ["render", str(bad), "-o", str(out), "--output", "json"])
    assert result.exit_code == 1
    assert "cluster_name" in result.output  # the hint names the closest valid key
    assert sorted(os.listdir(out)) == ["slurm.conf"]
    assert (out / "slurm.conf").read_text() == "previous"


def test_artifact_consumers_follow_configless_design():
    arts = build(LAB).artifacts
    assert str(arts["slurm/slurm.conf"].consumers) == "ctl1,login1"
    assert str(arts["slurm/topology.conf"].consumers) == "ctl1"
    # workers get only what slurmd needs locally (its hooks too: the lab's keep the DCGM
    # job mapping, the jobs' TaskProlog, the settings it restarts for), Open MPI's
    # parameters and the GPU workers' DCGM exporter unit;
    # slurm.conf comes from slurmctld
    paths = sorted(a.path for a in arts.for_node("gpu2") if a.plane == "slurm")
    restart = [p for p in paths if p.startswith("slurm/slurmd-restart/")]
    assert len(restart) == 1 and [p for p in paths if p not in restart] == [
        "monitoring/dcgm-exporter/estate-dcgm-exporter.service", "slurm/cgroup.conf",
        "slurm/cgroup/estate-slurm-cgroup", "slurm/cgroup/slurmd-cgroup.conf",
        "slurm/gpu-devices/gpu-2x.json", "slurm/hooks/estate-epilog",
        "slurm/hooks/estate-prolog", "slurm/hooks/task-prologs/gpu-2x/estate-task-prolog",
        "slurm/openmpi/openmpi-mca-params.conf", "slurm/slurmd.env"]
    assert "slurm/slurmrestd/ctl1.env" not in [a.path for a in arts.for_node("gpu2")]
    assert arts["slurm/slurmdbd.conf"].mode == 0o600


def test_plan_reports_one_budget_for_both_planes():
    result = CliRunner().invoke(app, ["plan", str(LAB), "--output", "json"])
    assert result.exit_code == 0, result.output
    import json
    budget = json.loads(result.output)
    # lab: 2 Slurm workers x 2 A100, 1 Kubernetes worker x 1 L4, fully given to tenants
    assert budget["planes"] == {"kubernetes": 1, "slurm": 4}
    assert budget["partitions"]["gpu"]["gpus"] == 4
    assert budget["tenants"]["inference"]["by_model"] == {"l4": 1}
    assert budget["kubernetes_unassigned"] == {"l4": 0}


def test_storage_exports_and_mount_units_stay_on_the_storage_segment():
    from estate.render.storage import unit_name
    arts = build(LAB).artifacts
    exports = arts["storage/exports/nfs1.exports"]
    assert str(exports.consumers) == "nfs1"
    assert b"10.63.0.0/24" not in exports.content, "exported to the whole segment"
    unit = arts["storage/mounts/00/home-shared.mount"]
    assert str(unit.consumers) == "login1,gpu[1-2]"
    assert b"What=10.63.0.5:/export/home\nWhere=/home/shared\nType=nfs\n" in unit.content
    assert unit_name("/srv/data-2/x y") == "srv-data\\x2d2-x\\x20y.mount"


def test_apply_only_names_real_deploys(tmp_path):
    """`estate apply --only` (the VM tier runs common and storage alone on a Kubernetes
    node) refuses a deploy name it does not know before it connects anywhere."""
    result = CliRunner().invoke(app, ["apply", str(LAB), "-o", str(tmp_path / "out"),
                                      "--only", "common,storge"])
    assert result.exit_code == 1
    assert "no deploy named storge" in result.output


def _tree(tmp_path, files: dict[str, tuple[bytes, int]]) -> Artifacts:
    arts = Artifacts()
    for path, (content, mode) in files.items():
        arts.add(Artifact(path, content, Hostlist.parse("n1"), mode=mode))
    return arts


FILES = {"slurm/slurm.conf": (b"ClusterName=a\n", 0o644), "keys/munge.key": (b"k" * 1024, 0o400),
         "network/n1.nft": (b"table inet estate {}\n", 0o640)}


def test_a_rewritten_tree_links_the_files_it_already_holds(tmp_path):
    """Unchanged files keep their inode (no data written, none freed with the old tree);
    the old tree is gone and each file has its one name again."""
    out = tmp_path / "out"
    write_tree(_tree(tmp_path, FILES), out)
    before = {p: (out / p).stat().st_ino for p in FILES}
    changed = dict(FILES, **{"slurm/slurm.conf": (b"ClusterName=b\n", 0o644)})
    write_tree(_tree(tmp_path, changed), out)
    for path, (content, mode) in changed.items():
        st = (out / path).stat()
        assert (out / path).read_bytes() == content and st.st_mode & 0o7777 == mode
        assert st.st_nlink == 1
        assert (st.st_ino == before[path]) is (path != "slurm/slurm.conf"), path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("spoil", ["edited", "mode", "second name", "symlinked dir",
                                   "symlinked file", "fifo", "link fails"])
def test_a_file_not_exactly_as_rendered_is_written_again(tmp_path, monkeypatch, spoil):
    """A hand-edited file, another mode, a file with another name elsewhere, one reached
    through a symlink, a FIFO, or a link the filesystem refuses: the new tree gets a new
    file with the rendered bytes and mode, and whatever the old one was is left alone."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    write_tree(_tree(tmp_path, FILES), out)
    target = out / "slurm" / "slurm.conf"
    elsewhere.mkdir()
    if spoil == "edited":
        target.write_bytes(b"ClusterName=x\n")
    elif spoil == "mode":
        target.chmod(0o666)
    elif spoil == "second name":
        os.link(target, elsewhere / "copy")
    elif spoil == "symlinked dir":
        os.rename(out / "slurm", elsewhere / "slurm")
        (out / "slurm").symlink_to(elsewhere / "slurm")
    elif spoil == "symlinked file":
        os.rename(target, elsewhere / "slurm.conf")
        target.symlink_to(elsewhere / "slurm.conf")
    elif spoil == "fifo":   # opened without blocking, and not a regular file
        target.unlink()
        os.mkfifo(target, 0o644)
    else:
        def refuse(*args, **kwargs):
            raise OSError(18, "Invalid cross-device link")
        monkeypatch.setattr(os, "link", refuse)
    outside = {p: p.stat().st_ino for p in elsewhere.rglob("*") if p.is_file()}
    write_tree(_tree(tmp_path, FILES), out)
    written = out / "slurm" / "slurm.conf"
    assert not written.is_symlink() and not written.parent.is_symlink()
    assert written.read_bytes() == b"ClusterName=a\n"
    assert written.stat().st_mode & 0o7777 == 0o644 and written.stat().st_nlink == 1
    assert written.stat().st_ino not in outside.values()
    for p, ino in outside.items():   # what lay outside the tree is as it was
        assert p.stat().st_ino == ino
    assert (out / "keys" / "munge.key").stat().st_mode & 0o7777 == 0o400


# --- templates compiled ahead (estate/render/compiled/) ------------------------------------

def test_each_template_ships_compiled_as_a_fresh_compile_gives_it():
    """`python -m estate.render.templates` after editing a template (or upgrading Jinja)."""
    from estate.render import templates as T
    names = T.template_names()
    shipped = {p.stem for p in T.COMPILED.glob("t_*.py")}
    assert shipped == {T.compiled_name(n) for n in names}
    stale = [n for n in names
             if (T.COMPILED / f"{T.compiled_name(n)}.py").read_text() != T.compiled_source(n)]
    assert stale == [], "run: python -m estate.render.templates"


def _fresh_environment(monkeypatch, stamp=None):
    from estate.render import templates as T
    T.environment.cache_clear()
    if stamp is not None:
        monkeypatch.setattr(T, "_stamp", stamp)
    return T.environment()


def test_a_template_edited_since_it_was_compiled_is_compiled_from_its_source(monkeypatch):
    from estate.render import templates as T
    name = "slurm_conf/cgroup.conf.j2"
    try:
        env = _fresh_environment(monkeypatch)
        assert env.get_template(name).filename == str(T.COMPILED / f"{T.compiled_name(name)}.py")
        real = T._TemplateLoader.get_source
        monkeypatch.setattr(T._TemplateLoader, "get_source", lambda self, e, n: (
            "edited {{ 1 + 1 }}\n", *real(self, e, n)[1:]) if n == name else real(self, e, n))
        env = _fresh_environment(monkeypatch)
        assert env.get_template(name).render() == "edited 2\n"
    finally:
        T.environment.cache_clear()


def test_the_compiled_templates_render_what_the_sources_render(monkeypatch):
    from estate.render import templates as T
    spec = ROOT / "stacks" / "example-prod.yaml"
    try:
        compiled = build(spec).artifacts
        env = _fresh_environment(monkeypatch, stamp=lambda source: ("no module matches",))
        from_source = build(spec).artifacts
        assert env.get_template("slurm_conf/slurm.conf.j2").filename.endswith(".j2")
    finally:
        T.environment.cache_clear()
    assert compiled.manifest() == from_source.manifest()
    assert {p: a.content for p, a in compiled.items()} == \
        {p: a.content for p, a in from_source.items()}
