# Estate: the two commands a new user needs are `make lab` and `make test`.
# Both install what they need (Debian packages, .venv) and start the daemons they use.
SHELL := /bin/bash
SPEC ?= stacks/lab.yaml
OUT ?= build/lab
VENV := .venv
ESTATE := $(VENV)/bin/estate
PYTEST := $(VENV)/bin/pytest -p no:cacheprovider

.PHONY: deps test-deps venv scan-venv doctor check render lab lab-image-ahead lab-down lab-ns lab-ns-down test test-unit test-fuzz test-live-slurm slurm-roots test-lab test-molecule test-vm bench bench-scale golden templates lab-vagrant lab-vagrant-down typecheck

deps:
	@scripts/install-deps.sh

## deps, and what only the test tiers use (headless Chromium for the lab's status pages)
test-deps:
	@scripts/install-deps.sh test

venv:
	@scripts/venv.sh $(VENV_EXTRA)

check: venv
	$(ESTATE) check $(SPEC)

render: venv
	$(ESTATE) render $(SPEC) -o $(OUT)

## Preflight: every package, plugin, key, port and kernel feature the spec needs on this
## host, one line each with the fix; a missing piece stops here, not as a daemon timeout.
doctor: deps venv
	$(ESTATE) doctor $(SPEC)

## The main job on the embedded lab spec, on a venv with what it runs (the `lab` extra; the
## test tiers add theirs to it). The namespace lab comes up beside the Vagrant lab (neither
## waits on the other, and each mostly waits on its daemons); its log is printed after. Each
## runs in a make of its own, told the extra (a target's variable does not reach a sub-make).
lab: VENV_EXTRA = lab
lab: lab-image-ahead deps venv doctor check render
	@mkdir -p build; { $(MAKE) -s lab-ns VENV_EXTRA=lab > build/lab-ns.log 2>&1; \
	  echo $$? > build/lab-ns.rc; } & \
	  $(MAKE) -s lab-vagrant VENV_EXTRA=lab; rc=$$?; wait; \
	  echo "== the namespace lab (build/lab-ns.log)"; cat build/lab-ns.log; \
	  ns=$$(cat build/lab-ns.rc); [ "$$ns" = 0 ] || echo "the namespace lab failed (rc $$ns)"; \
	  exit $$(( rc || ns ))

## The lab's node image, built in the background while the other Debian packages, .venv and
## doctor install and run (on a fresh machine the image takes about 60 s, the packages
## longer): only docker and debootstrap are installed first. The Vagrant lab's own build
## then waits for it (a lock) and finds it. Its log: build/lab-image.log.
lab-image-ahead:
	@scripts/install-deps.sh image && mkdir -p build && scripts/start-dockerd.sh && \
	  { vagrant/image/build.sh > build/lab-image.log 2>&1 & }

## Slurm lab in network namespaces: real slurmctld/slurmd/munged on the rendered files.
lab-ns: deps venv
	$(ESTATE) lab netns up $(SPEC) --job

lab-ns-down: venv
	$(ESTATE) lab netns down

## Vagrant lab (docker provider): the spec's Slurm and storage nodes as systemd containers,
## provisioned by roles/ (pyinfra), checked by `estate verify`; a second run changes nothing.
## Then `estate report`: the GPU-hours its jobs took, per account (the telemetry check runs one).
lab-vagrant: deps venv
	$(ESTATE) lab up $(SPEC) -o $(OUT)
	@cat .lab/verify/acceptance.txt 2>/dev/null || echo "no ReFrame summary (.lab/verify/acceptance.txt)"
	$(ESTATE) report $(SPEC) --lab --since 1h

lab-vagrant-down: venv
	$(ESTATE) lab down -o $(OUT)

## Everything any lab (namespaces, containers, VMs) left on this host.
lab-down: venv
	$(ESTATE) lab down --all -o $(OUT)

## The lab tier: machines up, provisioned cold by the Pulumi graph without the engine
## (estate pulumi dry-run lab), idempotent second runs, verify, clean down (needs docker).
test-lab: test-deps venv
	$(PYTEST) -q --durations=15 tests/lab

## molecule: 4 scenarios cover every container role (docker driver, systemd containers, shared image).
test-molecule: deps venv
	vagrant/molecule.sh

## tests/live_k8s runs against ESTATE_KUBECONFIG where a cluster exists and reports itself
## skipped (with the reason) elsewhere.
## Every test tier that runs on this machine.
test:
	@scripts/test-tiers.sh unit+fuzz live-slurm,vm+molecule,lab

## Two workers: the fuzz tier beside it ends first, and a second core then idles otherwise.
test-unit: venv scan-venv
	$(PYTEST) -q -n 2 --durations=15 tests/unit tests/golden tests/live_k8s

## The type checker over estate/ ([tool.mypy] in pyproject.toml); the unit tier runs it too
## (tests/unit/test_typecheck.py).
typecheck: venv
	$(VENV)/bin/mypy

## Checkov's own environment (.venv/checkov), for tests/unit/test_checkov.py only.
scan-venv: venv
	@scripts/scan-venv.sh

## The fuzz tier: 2,000 seeded mutants of stacks/*.yaml through load -> check -> render
## in-process and 50 through the CLI; none may crash, hang, write part of a tree or render
## differently twice. ESTATE_FUZZ_SEED=N replays a run; failures land in build/fuzz-failures/.
test-fuzz: venv
	$(PYTEST) -q -s tests/fuzz

## The VM tier: QEMU VMs with Debian's kernel prove the storage role's NFS for real.
test-vm: deps venv
	$(PYTEST) -q --durations=10 tests/vm

## Both Slurm releases: the host's (22.05) and every other release of the catalogue (24.11)
## from its debootstrapped root (scripts/slurm-root.sh; cached under build/slurm-root/).
test-live-slurm: test-deps venv slurm-roots
	$(PYTEST) -q --durations=25 tests/live_slurm

slurm-roots: deps
	@for v in $$(python3 -m estate.catalogue releases); do scripts/slurm-root.sh $$v >/dev/null || exit 1; done

golden: venv
	$(VENV)/bin/python scripts/golden.py

# after editing a template: compile them all into estate/render/compiled/
templates: venv
	$(VENV)/bin/python -m estate.render.templates

bench: venv
	$(VENV)/bin/python bench/bench_check_render.py

# whole estate check/render processes at 1,000-50,000 nodes against a real slurmctld (root)
bench-scale: venv
	$(VENV)/bin/python bench/bench_scale.py
