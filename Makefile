# orch — the two commands: `make run` and `make test`. Both set up what they need on Debian 12.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
ORCH := $(BIN)/orch
LAB_NODES ?= 3
BENCH_NODES ?= 16
BENCH_RUNS ?= /tmp/orch-bench-runs
APT_PACKAGES := python3-venv slurm-wlm slurmdbd mariadb-server munge openssh-server openssh-client \
	iproute2 iptables podman runc iperf3 procps psmisc chromium postgresql

.PHONY: run test venv deps lint unit integration lab-up lab-down bench clean fuzz wheelhouse

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,workload]'
	touch $@

venv: $(BIN)/.installed

## make run: create the environment and run the main job on the embedded default inventory.
run: venv
	$(ORCH) scale-test --inventory inventories/local.ini

## deps: the Debian packages the virtual lab needs (root only; skipped when all are present).
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "missing Debian packages:$$missing (run as root, or apt-get install them)"; exit 2; fi; \
	  echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/ansible-playbook --syntax-check -i inventories/local.ini orchestrator/playbooks/provision.yml orchestrator/playbooks/fingerprint.yml
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --nocolor orchestrator/playbooks/

unit: venv
	$(BIN)/pytest -q -n 4 tests/unit

## make fuzz: the parser fuzz tests with the full budget (10,000 inputs each; `make test` runs 300).
fuzz: venv
	ORCH_FUZZ_EXAMPLES=10000 $(BIN)/pytest -q tests/unit/test_fuzz_parsers.py tests/unit/test_nccltests_parser.py

## make test: install what the tests need, bring the lab up, run every test, take the lab down.
## The lab comes up first and its nodes are provisioned with cpu-gloo in the background while
## lint and the unit tests run. When that provisioning exited 0, ORCH_LAB_PROVISIONED=1 tells the
## integration session fixture not to provision again (30-120 s saved); when it failed, the
## fixture runs the provisioning again itself, showing its error.
test: deps venv
	@set -e; mkdir -p runs; prov=; \
	trap '[ -z "$$prov" ] || kill $$prov 2>/dev/null || true; $(ORCH) lab down || true' EXIT; \
	$(ORCH) lab up --nodes $(LAB_NODES); \
	$(ORCH) provision -i inventories/lab.ini --stack cpu-gloo --out runs/lab-provision \
	  > runs/lab-provision.log 2>&1 & prov=$$!; \
	$(MAKE) --no-print-directory lint; \
	$(BIN)/pytest -q -n 4 tests/unit; \
	rc=0; wait $$prov || rc=$$?; prov=; \
	echo "lab: background provisioning of cpu-gloo exited $$rc: $$(tail -n 1 runs/lab-provision.log)"; \
	if [ "$$rc" = 0 ]; then export ORCH_LAB_PROVISIONED=1; else unset ORCH_LAB_PROVISIONED; fi; \
	$(BIN)/pytest -q --durations=30 tests/integration

lab-up: deps venv
	$(ORCH) lab up --nodes $(LAB_NODES)

lab-down: venv
	$(ORCH) lab down

## make bench: every bench script (bench/*.py but _*.py) on the lab, one after another. A lab that
## is already running (shared with others) is used as it is and left up; otherwise one of
## BENCH_NODES nodes is brought up (16: scale.py's fan-out wants 16 or more) and taken down at the
## end. The nodes the jobs run on (node1..node3) get the cpu-gloo stack first (seconds when they
## have it; about 2 minutes on a fresh lab).
bench: deps venv
	$(BIN)/pip install -q -e '.[dev,workload,bench]'
	@set -e; \
	if $(ORCH) lab status --json 2>/dev/null | $(BIN)/python -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["running"] else 1)'; then \
	  echo "using the running lab (left up)"; \
	else \
	  trap '$(ORCH) lab down || true' EXIT; $(ORCH) lab up --nodes $(BENCH_NODES); \
	fi; \
	$(ORCH) provision -i inventories/lab.ini --stack cpu-gloo --limit node1,node2,node3 --out $(BENCH_RUNS); \
	for b in bench/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b; done

## make wheelhouse: bench/wheelhouse/ (git-ignored), every wheel bench/gpu_check.sh installs on the
## offline GPU machine: orch's wheel, its dependencies and the cpu-serve stack's serving packages
## for CPython 3.12 x86-64, less torch/CUDA/numpy, which the GPU image has (bench/build_wheelhouse.py).
## Carry it to the device: run(carry=["bench/wheelhouse"]).
wheelhouse: venv
	$(BIN)/python bench/build_wheelhouse.py --dest bench/wheelhouse --python-version 3.12

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
