"""The stand-ins that several unit test modules share: a scripted CommandRunner, a scheduler whose
jobs end at once, a small cluster, the fingerprint probe loaded as a module, and a bounded wait on
a condition.

A plain module (imported as `from fakes import ...`, like hostile_text.py), not conftest.py: test
modules cannot import a conftest reliably, since tests/integration has one of the same name.
"""

from __future__ import annotations

import importlib.util
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import yaml

from orchestrator.models.cluster import Cluster, Node
from orchestrator.remote.base import CmdResult
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus, RankOutput
from orchestrator.stacks import PLAYBOOKS_DIR

if TYPE_CHECKING:
    from orchestrator.models.plan import Plan, Step
    from orchestrator.provision.runner import PlaybookResult

Answer = tuple[int, str, str]  # rc, stdout, stderr


class ScriptedRunner:
    """A CommandRunner that records each argv (in `calls`) and its environment (in `envs`), and
    answers with `answer(argv)`: by default from `answers`, keyed by the command's name, with
    (rc, stdout, stderr) or an exception to raise. A command not in `answers` prints nothing and
    exits 0, or fails the test when `strict`."""

    def __init__(
        self, answers: Mapping[str, Answer | Exception] | None = None, *, strict: bool = False
    ) -> None:
        self.answers: dict[str, Answer | Exception] = dict(answers or {})
        self.strict = strict
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str] | None] = []

    def run(
        self,
        argv: list[str],
        *,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
        input_text: str | None = None,
    ) -> CmdResult:
        self.calls.append(argv)
        self.envs.append(env)
        rc, out, err = self.answer(argv)
        return CmdResult(argv=argv, rc=rc, stdout=out, stderr=err, elapsed_s=0.0)

    def answer(self, argv: list[str]) -> Answer:
        assert not self.strict or argv[0] in self.answers, f"no answer scripted for {argv[0]}"
        got = self.answers.get(argv[0], (0, "", ""))
        if isinstance(got, Exception):
            raise got
        return got

    @property
    def commands(self) -> list[str]:
        """The name of each command run, in order."""
        return [argv[0] for argv in self.calls]


class InstantScheduler:
    """A scheduler whose jobs end at once: `log_for(spec)` names the rank-0 log the job leaves (None:
    no log), and `fails(spec)` says whether it ends FAILED rather than COMPLETED."""

    name = "slurm"

    def __init__(self) -> None:
        self.specs: dict[str, JobSpec] = {}
        self.order: list[list[str]] = []

    def log_for(self, spec: JobSpec) -> Path | None:
        raise NotImplementedError

    def fails(self, spec: JobSpec) -> bool:
        return False

    def render(self, spec: JobSpec) -> str:
        return ""

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        job = str(100 + len(self.specs))
        self.specs[job] = spec
        self.order.append(list(spec.nodes))
        spec.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_for(spec)
        if log is not None:
            shutil.copy(log, spec.workdir / "rank-0.log")
        return job

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        out: dict[str, JobState] = {}
        for j in job_ids:
            status = JobStatus.FAILED if self.fails(self.specs[j]) else JobStatus.COMPLETED
            out[j] = JobState(job_id=j, status=status, raw_state=status.value.upper())
        return out

    def cancel(self, job_ids: list[str]) -> None:
        pass

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        log = spec.workdir / "rank-0.log"
        return JobOutput(job_id=job_id, ranks=[RankOutput(rank=0, log=log)] if log.exists() else [])

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        return {}


def cluster(n: int, gpus: int = 1) -> Cluster:
    """n nodes node1..nodeN (198.18.0.11 on), each with gpus GPUs, all in the group "all"."""
    nodes = [Node(name=f"node{i}", address=f"198.18.0.{10 + i}", gpus_per_node=gpus) for i in range(1, n + 1)]
    return Cluster(source=Path("lab.ini"), nodes=nodes, groups={"all": [x.name for x in nodes]})


def smoke_on_slurm(
    tmp_path: Path, hosts: dict[str, dict[str, object]], cluster_vars: dict[str, object]
) -> tuple[Cluster, Plan, list[Step]]:
    """The inventory of hosts and cluster_vars (written as tmp_path/inv.yml), and the built-in smoke
    plan on the slurm backend at one rank per node, expanded into its steps."""
    from orchestrator.inventory import load_inventory
    from orchestrator.plan import expand_steps, load_plan

    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": cluster_vars}}))
    cluster = load_inventory(inv)
    plan = load_plan("smoke").model_copy(update={"backend": "slurm"})
    plan = plan.model_copy(update={"ladder": plan.ladder.model_copy(update={"ranks_per_node": [1]})})
    return cluster, plan, expand_steps(plan, cluster)


def probe_module() -> ModuleType:
    """The fingerprint probe that Ansible copies to the nodes, loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        "fp_probe", PLAYBOOKS_DIR / "files" / "fingerprint_probe.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def wait_for(cond: Callable[[], object], timeout: float, what: str, *, every: float = 0.005) -> None:
    """Return as soon as `cond()` is true; fail the test naming `what` if it is not within `timeout` s."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"not within {timeout} s: {what}"
        time.sleep(every)


def run_play_on_localhost(
    tmp_path: Path, play: list[dict[str, object]], tag: str, *, check: bool = False
) -> PlaybookResult:
    """Run ``play`` (a playbook as data) for real on localhost through ansible-runner, in
    tmp_path/pb-<tag> with its work dir tmp_path/w-<tag> (``check``: --check --diff): how the role
    tests run a role's tasks."""
    import sys

    import yaml

    from orchestrator.provision import runner as R

    pb = tmp_path / f"pb-{tag}"
    pb.mkdir()
    (pb / "p.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    inv = tmp_path / "hosts"
    inv.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    req = R.PlaybookRequest(
        playbook="p.yml", playbooks_dir=pb, inventory=inv, work_dir=tmp_path / f"w-{tag}", check=check
    )
    return R.execute(req)
