"""Benchmark: what a user waits for, at scale, against slurmctld's own start.

Times the WHOLE ``estate check SPEC`` and ``estate render SPEC -o DIR`` processes (a
subprocess of the venv's ``estate``: interpreter start, imports and schema loading
included) on specs of stacks/example-prod.yaml's shape from bench_check_render.big_spec:

- 1,000, 10,000 and 50,000 Slurm nodes (racks of 250; prod's four Kubernetes workers),
  and 10,016 in prod's own racks of 32 (313 node groups and leaf switches);
- 1,000 and 8,000 Kubernetes workers (``inf[...]``, L40S; 1,000 Slurm nodes).

In the same run, as the reference, a real slurmctld (``/usr/sbin/slurmctld -D -f``) on the
RENDERED slurm.conf, topology.conf and gres.conf of each Slurm scale, timed from its start
until ``scontrol ping`` reports the primary controller UP. It runs as root in a fresh
network + UTS namespace (``unshare --net --uts``) whose hostname is the rendered first
SlurmctldHost and whose loopback carries the controllers' rendered addresses, so the
rendered SlurmctldHost lines stay as they are. What the copy of slurm.conf changes, and
why (everything else is the rendered file, byte for byte):

- StateSaveLocation, SlurmctldPidFile, SlurmctldLogFile: a temp dir (a fresh, empty state
  directory each run);
- AuthInfo=socket=...: the socket of a munged started for this benchmark (own key);
- AuthAltParameters jwt_key=...: a random key in the temp dir (auth/jwt refuses a missing one);
- AccountingStorage* and PriorityWeightTRES (GRES weights need slurmdbd): accounting_storage/none. No slurmdbd runs here, and a slurmctld
  that enforces associations with no database and no saved state refuses to start.

At each Slurm scale the measured runs are rounds of check, render and slurmctld, one of
each in turn, so that a slower spell of a shared machine weighs on both sides of the ratio
(one series after the other gave ratios from 1.2 to 2.3 within an hour); a warm-up check
and render come first (Python's bytecode of the installed code, as after any install; the
first run's times are kept as first_check_s and first_render_s). Estate keeps nothing
between runs, so every measured run is cold: no cache directory, nothing memoised. The
rounds run last,
all under one hold of ``flock /tmp/estate-lab.lock`` (shared with the labs).
Medians of 5 rounds (3 at 50,000 nodes). Needs root, unshare and munged for slurmctld;
without them its column is left empty and check and render run as series.

Usage: python bench/bench_scale.py [--runs N] [--quick] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_check_render import PER_RACK, _cpu_model, big_spec  # noqa: E402

ESTATE = ROOT / ".venv" / "bin" / "estate"
PYTHON = ROOT / ".venv" / "bin" / "python"
SLURMCTLD, SCONTROL = "/usr/sbin/slurmctld", shutil.which("scontrol") or "/usr/bin/scontrol"
LOCK = "/tmp/estate-lab.lock"
# (nodes, nodes per rack): one node group and leaf switch per rack. 10,000 nodes come twice:
# in racks of 250 and in example-prod's own racks of 32 (313 groups; the validators' and
# the network files' work grows with the groups), each against slurmctld on its own tree.
SLURM_SCALES = ((1_000, PER_RACK), (10_000, PER_RACK), (10_016, 32), (50_000, PER_RACK))
K8S_SCALES = (1_000, 8_000)
K8S_SLURM_NODES = 1_000


def _env() -> dict:
    """A user's environment: bytecode caches written and used (a sandbox's
    PYTHONDONTWRITEBYTECODE=1 made every run compile estate's 70 modules again, 0.14 s)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# What a plain `estate check` or `estate render` imports before it reads a spec: the
# libraries the spec and the templates are built on (pydantic v2, with one model built,
# which loads the rest of pydantic; jinja2; PyYAML). This is what any Python program
# importing them pays.
LIBRARY_FLOOR = "import jinja2, yaml, pydantic\nclass M(pydantic.BaseModel): x: int"


# A plain check's imports: the command line (typer, estate.cli) and the check's own
# modules (estate.commands: the pipeline), not the other commands' (estate.cli.LazyGroup)
ENTRY_IMPORTS = "import estate.cli, estate.commands"


def whole(argv: list[str], runs: int, ok=(0,)) -> list[float]:
    """Wall seconds of each run of a whole process (output read and dropped)."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, env=_env())
        times.append(time.perf_counter() - t)
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}:\n"
                             f"{proc.stdout.decode()[-2000:]}{proc.stderr.decode()[-2000:]}")
    return times


# --- slurmctld ---------------------------------------------------------------------------

CTLD_RE = re.compile(r"^SlurmctldHost=([^(\s]+)\(([^)\s]+)\)", re.M)


def ctld_conf(rendered: Path, tmp: Path, socket: Path) -> tuple[Path, str, list[str]]:
    """A copy of the rendered Slurm files with the paths above moved into tmp."""
    etc = tmp / "etc"
    etc.mkdir()
    for f in (rendered / "slurm").iterdir():
        if f.is_file():
            shutil.copy(f, etc / f.name)
    (tmp / "jwt.key").write_bytes(secrets.token_bytes(32))
    shutil.chown(tmp / "jwt.key", "slurm", "slurm")
    os.chmod(tmp / "jwt.key", 0o600)
    text = (etc / "slurm.conf").read_text()
    hosts = CTLD_RE.findall(text)
    subs = {
        "StateSaveLocation": f"{tmp}/state", "SlurmctldPidFile": f"{tmp}/log/slurmctld.pid",
        "SlurmctldLogFile": f"{tmp}/log/slurmctld.log",
        "AuthAltParameters": f"jwt_key={tmp}/jwt.key",
        "AccountingStorageType": "accounting_storage/none",
    }
    out = []
    for line in text.splitlines():
        key = line.split("=", 1)[0]
        if key in subs:
            line = f"{key}={subs[key]}"
        elif key.startswith("AccountingStorage") or key == "AuthInfo" \
                or key == "PriorityWeightTRES":   # GRES weights need slurmdbd (fatal without)
            continue
        out.append(line)
    out.append(f"AuthInfo=socket={socket}")
    (etc / "slurm.conf").write_text("\n".join(out) + "\n")
    (tmp / "log").mkdir()
    shutil.chown(tmp / "log", "slurm", "slurm")
    return etc / "slurm.conf", hosts[0][0], [addr for _, addr in hosts]


def munged_up(tmp: Path) -> tuple[Path, int]:
    d = tmp / "munge"
    d.mkdir(mode=0o755)
    key = d / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chmod(key, 0o400)
    for p in (d, key):
        shutil.chown(p, "munge", "munge")
    sock = d / "munge.socket.2"
    subprocess.run(["setpriv", "--reuid=munge", "--regid=munge", "--init-groups", "munged",
                    f"--key-file={key}", f"--socket={sock}", f"--pid-file={d}/munged.pid",
                    f"--seed-file={d}/munged.seed", f"--log-file={d}/munged.log"], check=True)
    for _ in range(100):
        if sock.exists() and (d / "munged.pid").exists():
            return sock, int((d / "munged.pid").read_text())
        time.sleep(0.05)
    raise SystemExit(f"munged did not start; see {d}/munged.log")


def inner(series: list[str]) -> None:
    """In the namespace: per CONF:STATE:RUNS:SPEC, RUNS rounds of a whole `estate check
    SPEC`, a whole `estate render SPEC`, and slurmctld from start until scontrol ping says
    the primary is UP; print each series' times as one JSON list of
    {"check": [...], "render": [...], "slurmctld": [...]}."""
    out = []
    for item in series:
        conf, state, runs, spec = item.split(":", 3)
        out.append(_rounds(conf, state, int(runs), spec))
    print(json.dumps(out))


def _rounds(conf: str, state: str, runs: int, spec: str) -> dict[str, list[float]]:
    """Interleaved, so that a slower or faster spell of a shared machine falls on both
    sides of the ratio alike (series run one after the other gave ratios 1.2-2.3 within
    the same hour), and in rotating order: in a fixed order the render, always right
    after the check, took 0.05-0.12 s longer than it, where alternating by hand they
    took the same."""
    rendered = Path(state).with_name("rendered")
    measure = {"check": lambda: whole([str(ESTATE), "check", spec], 1),
               "render": lambda: whole([str(ESTATE), "render", spec, "-o", str(rendered)], 1),
               "slurmctld": lambda: _ctld_series(conf, state, 1)}
    out: dict[str, list[float]] = {name: [] for name in measure}
    order = list(measure)
    for _ in range(runs):
        for name in order:
            out[name] += measure[name]()
        order = order[1:] + order[:1]   # each goes first, second and third in turn
    return out


def _ctld_series(conf: str, state: str, runs: int) -> list[float]:
    env = {**os.environ, "SLURM_CONF": conf}
    times = []
    for _ in range(runs):
        shutil.rmtree(state, ignore_errors=True)
        os.mkdir(state)
        shutil.chown(state, "slurm", "slurm")
        t = time.perf_counter()
        ctld = subprocess.Popen([SLURMCTLD, "-D", "-f", conf], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                ping = subprocess.run([SCONTROL, "ping"], env=env, capture_output=True,
                                      text=True)
                if "(primary) at" in ping.stdout and " is UP" in ping.stdout.split("\n")[0]:
                    times.append(time.perf_counter() - t)
                    break
                if ctld.poll() is not None:
                    raise SystemExit(f"slurmctld exited {ctld.returncode}; see its log")
                if time.perf_counter() - t > 120:
                    raise SystemExit("slurmctld not UP after 120 s")
                time.sleep(0.01)
        finally:
            ctld.terminate()
            try:
                ctld.wait(30)
            except subprocess.TimeoutExpired:
                ctld.kill()
                ctld.wait()
    return times


def can_run_slurmctld() -> bool:
    return os.geteuid() == 0 and all(map(shutil.which, ("unshare", "munged", "flock",
                                                        SLURMCTLD)))


def slurmctld_times(rendered: dict[str, tuple[Path, int, Path]]) -> dict[str, dict]:
    """{scale: (render dir, runs, spec)} -> {scale: {check, render, slurmctld: times}}:
    one namespace, one munged and one hold of the lab lock for every series (about 1 min
    in all at 1,000-50,000 nodes)."""
    if not can_run_slurmctld():
        return {}
    tmp = Path(tempfile.mkdtemp(prefix="estate-bench-ctld-"))
    os.chmod(tmp, 0o755)
    munged_pid = None
    try:
        sock, munged_pid = munged_up(tmp)
        series, addrs, host = [], [], None
        for i, (out, runs, spec) in enumerate(rendered.values()):
            d = tmp / f"series{i}"   # slurm.conf's paths: no spaces
            d.mkdir(mode=0o755)
            conf, host_n, addrs_n = ctld_conf(out, d, sock)
            assert host in (None, host_n), (host, host_n)
            host, addrs = host_n, sorted(set(addrs) | set(addrs_n))
            series.append(f"{conf}:{d / 'state'}:{runs}:{spec}")
        setup = f"hostname {host} && ip link set lo up && " + " && ".join(
            f"ip addr add {a}/32 dev lo" for a in addrs)
        cmd = ["flock", LOCK, "unshare", "--net", "--uts", "--", "sh", "-c",
               f'{setup} && exec "$0" "$@"', str(PYTHON), __file__, "--inner", *series]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env())
        if proc.returncode:
            logs = "".join(p.read_text()[-2000:] for p in tmp.glob("*/log/slurmctld.log"))
            raise SystemExit(f"slurmctld series failed: {proc.stderr[-2000:]}\n{logs}")
        return dict(zip(rendered, json.loads(proc.stdout.strip().splitlines()[-1])))
    finally:
        if munged_pid:
            _stop(munged_pid)
        shutil.rmtree(tmp, ignore_errors=True)


def _stop(pid: int) -> None:
    """SIGTERM, then wait: munged writes its seed file on the way out, which would
    otherwise land in the directory after it was removed (and leave it behind)."""
    os.kill(pid, 15)
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state == "Z":   # exited; a parent that does not reap (a container's init)
            return
        time.sleep(0.05)


# --- the run -----------------------------------------------------------------------------

def _label(nodes: int, per_rack: int) -> str:
    return f"{nodes:,}" + ("" if per_rack == PER_RACK else f" (racks of {per_rack})")


def med(times: list[float] | None) -> float | None:
    return round(statistics.median(times), 3) if times else None


def case(work: Path, name: str, spec: dict, runs: int) -> dict:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = work / f"{name}-out"
    check = whole([str(ESTATE), "check", str(path)], runs)
    render = whole([str(ESTATE), "render", str(path), "-o", str(out)], runs)
    row = {"spec_bytes": path.stat().st_size, "check_s": med(check), "render_s": med(render),
           "check_all": [round(t, 3) for t in check], "render_all": [round(t, 3) for t in render]}
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1,000 and 10,000 nodes only (both shapes)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--inner", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        inner(args.inner)
        return 0
    res = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "cpus": os.cpu_count(),
           "cpu_model": _cpu_model(), "loadavg_start": os.getloadavg()}
    res["commit"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                   capture_output=True, text=True).stdout.strip()
    whole([str(ESTATE), "--help"], 1)   # a warm-up: bytecode written as on first use
    res["python_pass_s"] = med(whole([str(PYTHON), "-c", "pass"], args.runs))
    res["library_floor_s"] = med(whole([str(PYTHON), "-c", LIBRARY_FLOOR], args.runs))
    res["import_estate_cli_s"] = med(whole([str(PYTHON), "-c", "import estate.cli"], args.runs))
    res["import_estate_commands_s"] = med(whole([str(PYTHON), "-c", ENTRY_IMPORTS], args.runs))
    res["estate_help_s"] = med(whole([str(ESTATE), "--help"], args.runs))
    slurm = SLURM_SCALES[:3] if args.quick else SLURM_SCALES
    k8s = K8S_SCALES[:1] if args.quick else K8S_SCALES
    with tempfile.TemporaryDirectory(prefix="estate-bench-scale-") as work:
        res["slurm"], res["kubernetes"] = {}, {}
        ctld = can_run_slurmctld()
        for n, per in slurm:
            # with slurmctld, one warm-up here (the tree slurmctld reads, Python's bytecode
            # written); the measured runs are the interleaved rounds below
            runs = 1 if ctld else 3 if n >= 50_000 else args.runs
            res["slurm"][_label(n, per)] = case(
                Path(work), f"slurm{n}-{per}", big_spec(racks=n // per, per_rack=per), runs)
            print(f"slurm {_label(n, per)}: {res['slurm'][_label(n, per)]}", file=sys.stderr,
                  flush=True)
        for n in k8s:
            spec = big_spec(racks=K8S_SLURM_NODES // PER_RACK, k8s_workers=n)
            res["kubernetes"][n] = case(Path(work), f"k8s{n}", spec, args.runs)
            print(f"kubernetes {n}: {res['kubernetes'][n]}", file=sys.stderr, flush=True)
        # the Slurm scales' rounds last, under one short hold of the lab lock
        rounds = slurmctld_times({_label(n, per): (
            Path(work) / f"slurm{n}-{per}-out", 3 if n >= 50_000 else args.runs,
            Path(work) / f"slurm{n}-{per}.yaml") for n, per in slurm})
        for n, times in rounds.items():
            row = res["slurm"][n]
            row["first_check_s"], row["first_render_s"] = row["check_s"], row["render_s"]
            for kind in ("check", "render", "slurmctld"):
                row[f"{kind}_s"] = med(times[kind])
                row[f"{kind}_all"] = [round(t, 3) for t in times[kind]]
            row["ratio_check"] = round(row["check_s"] / row["slurmctld_s"], 2)
            row["ratio_render"] = round(row["render_s"] / row["slurmctld_s"], 2)
    res["loadavg_end"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    print(f"python -c pass {res['python_pass_s']} s; the libraries alone "
          f"({LIBRARY_FLOOR!r}) {res['library_floor_s']} s; import estate.commands (a plain "
          f"check's imports) {res['import_estate_commands_s']} s; import estate.cli "
          f"{res['import_estate_cli_s']} s; estate --help {res['estate_help_s']} s")
    print("| Nodes | estate check | estate render | slurmctld start→ping "
          "| ratio check/slurmctld | ratio render/slurmctld |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, r in res["slurm"].items():
        print(f"| {n} | {r['check_s']} s | {r['render_s']} s | {r.get('slurmctld_s')} s "
              f"| {r.get('ratio_check')} | {r.get('ratio_render')} |")
    print("| Kubernetes workers | estate check | estate render |\n|---:|---:|---:|")
    for n, r in res["kubernetes"].items():
        print(f"| {n:,} | {r['check_s']} s | {r['render_s']} s |")
    print(f"load average {res['loadavg_start']} -> {res['loadavg_end']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
