"""`pulumi up` without the engine: the stack's graph, run for real.

The graph is the one the program registers (estate.pulumi.plan): one step per node and
the join token's revocation, each waiting for what it depends on. Each step's command
runs as the engine's command provider runs it: `/bin/sh -c COMMAND` in the project
directory, with the engine's environment plus the step's own (the keys, and on a
joining node the join material taken from the control plane's step outputs). Steps
whose dependencies are done run in parallel, as the engine does.

What it does not do is the engine's bookkeeping: every step runs, as on a stack's first
`pulumi up` (triggers decide which would re-run on a later one; the mocks test covers
them). The keys stand in for the stack's RandomBytes: a directory of keys, created
once and reused, so that a second run is a real "no change" run. A failed step fails
the run and its dependants do not run, as `pulumi up` stops there.

The workers run in the order the program gives them: the ones the change restarts in
the diff's batches against the tree the last successful run kept (the record step, as
under the engine), each batch after the one before. The dry run keeps its own tree
(APPLIED), beside its keys: what it applied is not what the stack's engine applied.
"""
from __future__ import annotations

import base64
import os
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from estate import paths
from estate.model.services import KEYS
from estate.pulumi import plan as planning

ROOT = paths.work()   # the Pulumi project (Pulumi.yaml, stacks/): where Estate runs
REVOKE = "join-token-revoke"
APPLIED = "build/pulumi-dry-run/{stack}/applied-tree"   # relative to the project directory
SECRET_OUTPUTS = ("join", "admin_conf")   # never in a report: the engine keeps them secret


class DryRunError(RuntimeError):
    pass


@dataclass
class Step:
    name: str
    command: str
    after: list[str]
    secrets: tuple[str, ...] = ()   # "munge", "jwt"
    join: str | None = None         # "source", "sink", "revoke"
    control_plane: bool = False     # a sink joining as a control plane


@dataclass
class StepRun:
    name: str
    outcome: str                 # ok, failed, skipped
    seconds: float = 0.0
    outputs: dict = field(default_factory=dict)
    summary: str = ""
    stdout: str = field(default="", repr=False)   # secret on the control plane

    def as_dict(self) -> dict:
        return {"name": self.name, "outcome": self.outcome, "seconds": round(self.seconds, 1),
                "outputs": self.outputs, "summary": self.summary}


@dataclass
class DryRunReport:
    stack: str
    steps: list[StepRun]

    @property
    def ok(self) -> bool:
        return all(s.outcome == "ok" for s in self.steps)

    def as_dict(self) -> dict:
        return {"stack": self.stack, "ok": self.ok, "steps": [s.as_dict() for s in self.steps]}


def stack_config(stack: str, root: Path = ROOT) -> planning.StackConfig:
    path = root / "stacks" / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise DryRunError(f"no stack {stack!r}: {path} is missing")
    return planning.read_stack_config(yaml.safe_load(path.read_text())["config"])


def graph(stack: str, root: Path = ROOT, tree: str | None = None,
          log=print) -> tuple[list[Step], planning.StackConfig]:
    """The program's steps for the stack, in registration order (dependencies first).
    tree: where the record step keeps the applied tree, relative to root (default APPLIED)."""
    from estate.pipeline import build
    cfg = stack_config(stack, root)
    result = build(root / cfg.spec)
    if not result.ok:
        raise DryRunError(f"{cfg.spec} has errors; `estate check {cfg.spec}` lists them")
    tree = tree or APPLIED.format(stack=stack)
    try:
        batches = planning.restart_batches(root / cfg.spec, root / tree, cfg.share(), log)
        the_plan = planning.plan(result.estate, result.artifacts, cfg.spec, cfg.accept,
                                 lab=cfg.lab, batches=batches, tree=tree)
    except ValueError as exc:
        raise DryRunError(f"stack config: {exc}") from None
    nodes = [f"node-{s.node}" for s in the_plan.steps]
    steps = [Step(f"node-{s.node}", s.command, [f"node-{n}" for n in the_plan.after(s)],
                  s.secrets, s.join, s.control_plane)
             for s in the_plan.steps]
    if the_plan.revoke:
        steps.append(Step(REVOKE, the_plan.revoke,
                          [f"node-{s.node}" for s in the_plan.steps if s.join], (), "revoke"))
    steps.append(Step(planning.RECORD_NAME, the_plan.record.command, nodes))
    return steps, cfg


def key_environment(secrets_dir: Path) -> dict[str, str]:
    """What the engine hands a step for each key (ESTATE_*_KEY_B64), from the directory."""
    from estate.provision.secrets import ensure_secrets
    ensure_secrets(secrets_dir)
    return {k.env: base64.b64encode((secrets_dir / k.file).read_bytes()).decode()
            for k in KEYS.values()}


def default_secrets(stack: str, cfg: planning.StackConfig, root: Path) -> Path:
    from estate.provision.secrets import LAB_SECRETS
    return LAB_SECRETS if cfg.lab else root / "build" / "pulumi-dry-run" / stack / "secrets"


def environment(step: Step, keys: dict[str, str], source_stdout: str) -> dict[str, str]:
    """The engine's environment (it passes its own on), the step's keys, its join material."""
    env = dict(os.environ)
    wanted = {KEYS[k].env for k in step.secrets}
    env.update({k: v for k, v in keys.items() if k in wanted})
    join = planning.join_environment(source_stdout)
    if step.join == "sink":
        env.update(planning.join_environment(source_stdout, step.control_plane))
    elif step.join == "revoke":
        token = planning.JOIN_ENV["token"]
        env.update({token: join[token]} if token in join else {})
    return env


def run_one(step: Step, env: dict[str, str], root: Path) -> StepRun:
    t0 = time.monotonic()
    proc = subprocess.run(["/bin/sh", "-c", step.command], cwd=root, env=env, text=True,
                          capture_output=True)
    outputs = planning.step_outputs(proc.stdout) if proc.stdout.strip() else {}
    public = {k: v for k, v in outputs.items() if k not in SECRET_OUTPUTS}
    ok = proc.returncode == 0
    why = proc.stderr.strip().splitlines()[-3:] if not ok else []
    summary = (f"{public.get('status', '')}, {public.get('changed', 0)} change(s)"
               if "status" in public else public.get("why", ""))
    if why:
        summary = f"exit {proc.returncode}: " + " | ".join(why)
    return StepRun(step.name, "ok" if ok else "failed", time.monotonic() - t0, public,
                   summary, proc.stdout)


def dry_run(stack: str, secrets: Path | None = None, root: Path = ROOT, log=print,
            parallel: int = 4, tree: str | None = None) -> DryRunReport:
    steps, cfg = graph(stack, root, tree, log)
    keys = key_environment(secrets or default_secrets(stack, cfg, root))
    source = next((s.name for s in steps if s.join == "source"), None)
    done: dict[str, StepRun] = {}
    pending = {s.name: s for s in steps}
    running: dict = {}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while pending or running:
            for name, step in list(pending.items()):
                if any(d in done and done[d].outcome != "ok" for d in step.after):
                    done[name] = StepRun(name, "skipped", summary="a dependency failed")
                    del pending[name]
                elif all(d in done for d in step.after):
                    stdout = done[source].stdout if source in done else ""
                    log(f"dry-run: {name}: {step.command}")
                    running[pool.submit(run_one, step, environment(step, keys, stdout),
                                        root)] = name
                    del pending[name]
            if not running:
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                run = fut.result()
                done[running.pop(fut)] = run
                log(f"dry-run: {run.name}: {run.outcome} ({run.summary})")
    return DryRunReport(stack, [done[s.name] for s in steps])
