"""Run data on nodes without a shared filesystem (remote/nodefiles.py): where each node writes,
how orch brings it home (tar through the node's shell, unpacked with no escape), heartbeats
followed while the probe runs, and the scale-test runner collecting each step.

Nodes are stood in for by LocalShell over folders under tmp_path: the commands that run are the
real ones (sh, tar, base64, wc, tail, head), only the machine is this one."""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from fakes import smoke_on_slurm

from orchestrator.errors import ConfigError, InfraError
from orchestrator.inventory import load_inventory
from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.remote.local import LocalShell
from orchestrator.remote.nodefiles import (
    DEFAULT_NODE_DIR,
    NodeFiles,
    RunDataLayout,
    extract_tar,
    run_data_layout,
)
from orchestrator.runs import executor
from orchestrator.runs.executor import StepExecutor
from orchestrator.runs.lifecycle import RunLifecycle
from orchestrator.runs.scale_test import _execute
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus, RankOutput
from orchestrator.store.rundir import RunDir, new_run_id


def _cluster(vars_: ClusterVars | None = None, local: bool = False) -> Cluster:
    conn = "local" if local else "ssh"
    nodes = [Node(name=n, address=n, connection=conn) for n in ("node1", "node2")]
    return Cluster(source=Path("x.ini"), nodes=nodes, vars=vars_ or ClusterVars())


# -- where the data lives --------------------------------------------------------------------------


def test_local_nodes_write_into_the_run_directory(tmp_path: Path) -> None:
    layout = run_data_layout(_cluster(local=True), tmp_path / "runs" / "r1")
    assert layout.mode == "here" and layout.node_root == tmp_path / "runs" / "r1"


def test_a_run_directory_on_a_declared_share_is_written_there(tmp_path: Path) -> None:
    layout = run_data_layout(_cluster(ClusterVars(orch_shared_dirs=[tmp_path])), tmp_path / "runs" / "r1")
    assert layout.mode == "shared" and not layout.remote
    assert layout.node_path("steps", "n1xg1") == tmp_path / "runs" / "r1" / "steps" / "n1xg1"


def test_elsewhere_each_node_keeps_the_run_under_its_node_dir(tmp_path: Path) -> None:
    layout = run_data_layout(_cluster(), Path("runs/smoke-1"))
    assert layout.mode == "collect" and layout.remote
    assert layout.node_path("steps", "n2xg1") == DEFAULT_NODE_DIR / "smoke-1" / "steps" / "n2xg1"
    mine = run_data_layout(_cluster(ClusterVars(orch_node_dir=Path("/scratch/orch"))), tmp_path / "r2")
    assert mine.node_root == Path("/scratch/orch/r2")
    assert mine.local_path("steps") == tmp_path / "r2" / "steps"


@pytest.mark.parametrize("part", ["..", ".", "a/b", "", "x y", "$(id)"])
def test_node_path_parts_are_plain_names(part: str) -> None:
    layout = RunDataLayout(mode="collect", run_dir=Path("/r/x"), node_root=Path("/var/tmp/orch/x"))
    with pytest.raises(ConfigError):
        layout.node_path("steps", part)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("/scratch/orch", True), ("relative/dir", False), ("/a/../b", False), ("/with space", False)],
)
def test_inventory_node_dir_must_be_a_plain_absolute_path(tmp_path: Path, value: str, ok: bool) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {}}, "vars": {
        "orch_node_dir": value, "orch_shared_dirs": "/nfs/a, /nfs/b"}}}))  # fmt: skip
    if ok:
        cv = load_inventory(inv).vars
        assert cv.orch_node_dir == Path(value) and cv.orch_shared_dirs == [Path("/nfs/a"), Path("/nfs/b")]
    else:
        with pytest.raises(ConfigError, match="orch_node_dir"):
            load_inventory(inv)


# -- unpacking what a node sent --------------------------------------------------------------------


def _tar(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, 0o644
    return info


def test_regular_files_and_folders_are_unpacked(tmp_path: Path) -> None:
    data = _tar((_member("./sub", tarfile.DIRTYPE), None), (_member("./sub/rank-0.log"), b"row\n"))
    files, size, skipped = extract_tar(data, tmp_path / "d")
    assert (files, size, skipped) == (1, 4, [])
    assert (tmp_path / "d" / "sub" / "rank-0.log").read_bytes() == b"row\n"


@pytest.mark.parametrize(
    "member",
    [
        _member("../escaped"),
        _member("/etc/escaped"),
        _member("link", tarfile.SYMTYPE, "/etc/passwd"),
        _member("inner-link", tarfile.SYMTYPE, "rank-0.log"),
        _member("hard", tarfile.LNKTYPE, "rank-0.log"),
        _member("dev", tarfile.CHRTYPE),
        _member("fifo", tarfile.FIFOTYPE),
    ],
    ids=["dotdot", "absolute", "symlink-out", "symlink-in", "hardlink", "device", "fifo"],
)
def test_escapes_links_and_devices_are_refused_and_named(tmp_path: Path, member: tarfile.TarInfo) -> None:
    data = _tar((_member("rank-0.log"), b"ok\n"), (member, b"x" if member.isfile() else None))
    dest = tmp_path / "run" / "steps" / "s1"
    files, _, skipped = extract_tar(data, dest)
    assert files == 1 and len(skipped) == 1 and member.name in skipped[0]
    assert sorted(p.name for p in dest.iterdir()) == ["rank-0.log"]
    assert not (tmp_path / "run" / "steps" / "escaped").exists() and not Path("/etc/escaped").exists()


def test_a_link_planted_in_the_destination_is_not_followed(tmp_path: Path) -> None:
    dest, outside = tmp_path / "step", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "rank-0.log").symlink_to(outside / "victim")
    _, _, skipped = extract_tar(_tar((_member("rank-0.log"), b"overwrite\n")), dest)
    assert skipped and not (outside / "victim").exists()


def test_what_is_not_a_tar_archive_is_an_infra_error(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match="cannot unpack"):
        extract_tar(b"not a tar archive at all" * 40, tmp_path / "d")


# -- moving files with real shell commands ---------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> NodeFiles:
    layout = RunDataLayout(mode="collect", run_dir=tmp_path / "run", node_root=tmp_path / "node" / "run")
    return NodeFiles(layout, {"node1": LocalShell(), "node2": LocalShell()})


def test_prepare_collect_and_remove(files: NodeFiles, tmp_path: Path) -> None:
    files.prepare({"node1": [("steps", "s1"), ("alloc",)]})
    node_step = tmp_path / "node" / "run" / "steps" / "s1"
    assert node_step.is_dir() and (tmp_path / "node" / "run" / "alloc").is_dir()
    (node_step / "rank-0.log").write_text("rank 0\n")
    (node_step / "deep").mkdir()
    (node_step / "deep" / "slurm-7.out").write_text("batch\n")
    (node_step / "escape").symlink_to("/etc/passwd")
    (got,) = files.collect(["node1"], "steps", "s1")
    assert got.error is None and got.files == 2 and got.skipped and "escape" in got.skipped[0]
    local = tmp_path / "run" / "steps" / "s1"
    assert (local / "rank-0.log").read_text() == "rank 0\n"
    assert (local / "deep" / "slurm-7.out").read_text() == "batch\n"
    assert not (local / "escape").exists() and not node_step.exists()
    assert files.remove_all() == [] and not (tmp_path / "node" / "run").exists()


def test_a_missing_node_folder_brings_nothing_and_no_error(files: NodeFiles) -> None:
    (got,) = files.collect(["node2"], "steps", "never-made")
    assert got.error is None and got.files == 0


def test_a_node_that_cannot_make_its_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    layout = RunDataLayout(mode="collect", run_dir=tmp_path / "run", node_root=tmp_path / "file" / "run")
    with pytest.raises(InfraError, match="node2: cannot create the run's folder"):
        NodeFiles(layout, {"node2": LocalShell()}).prepare({"node2": [("probe",)]})


def test_touch_makes_the_stop_file_on_every_node(files: NodeFiles, tmp_path: Path) -> None:
    files.prepare({"node1": [("probe",)]})
    assert files.touch(["node1"], "probe", "stop") == []
    assert (tmp_path / "node" / "run" / "probe" / "stop").exists()


def test_follow_copies_appended_bytes_only(files: NodeFiles, tmp_path: Path) -> None:
    files.prepare({"node1": [("probe",)]})
    node_dir = tmp_path / "node" / "run" / "probe"
    follower = files.follow(["node1"], ("probe",), "hb-rank*.jsonl", re.compile(r"hb-rank[0-9]+\.jsonl"))
    (node_dir / "hb-rank0.jsonl").write_text('{"step": 1}\n{"st')
    (node_dir / "other.txt").write_text("not followed")
    assert follower.poll() == len('{"step": 1}\n{"st')
    with open(node_dir / "hb-rank0.jsonl", "a") as fh:
        fh.write('ep": 2}\n')
    (node_dir / "hb-rank3.jsonl").write_text('{"step": 1}\n')
    assert follower.poll() == len('ep": 2}\n') + len('{"step": 1}\n')
    assert follower.poll() == 0  # nothing new: nothing sent
    local = tmp_path / "run" / "probe"
    assert (local / "hb-rank0.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    assert (local / "hb-rank3.jsonl").read_text() == '{"step": 1}\n'
    assert not (local / "other.txt").exists() and follower.errors == []


def test_follow_on_a_thread_until_stopped(files: NodeFiles, tmp_path: Path) -> None:
    files.prepare({"node1": [("probe",)]})
    follower = files.follow(["node1"], ("probe",), "hb-rank*.jsonl", re.compile(r"hb-rank[0-9]+\.jsonl"))
    follower.start(interval_s=0.05)
    (tmp_path / "node" / "run" / "probe" / "hb-rank1.jsonl").write_text("x\n")
    follower.stop()  # the last poll after the thread ended brings what is left
    assert (tmp_path / "run" / "probe" / "hb-rank1.jsonl").read_text() == "x\n"


# -- the scale-test runner collects each step --------------------------------------------------------


class FakeSlurm:
    """'Runs' each job at submit: writes rank logs and Slurm's output where the nodes would."""

    name = "slurm"

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []

    def render(self, spec: JobSpec) -> str:
        return ""

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        assert spec.workdir.is_dir(), "orch made the node folder before submitting"
        for r in range(spec.nnodes * spec.ranks_per_node):
            (spec.workdir / f"rank-{r}.log").write_text(f"rank {r}\n")
        (spec.workdir / "slurm-1.out").write_text("batch\n")
        self.specs.append(spec)
        return str(100 + len(self.specs))

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        return {j: JobState(job_id=j, status=JobStatus.COMPLETED, raw_state="COMPLETED") for j in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        return None

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        ranks = spec.nnodes * spec.ranks_per_node
        return JobOutput(job_id=job_id, ranks=[RankOutput(rank=r, log=spec.workdir / f"rank-{r}.log")
                                               for r in range(ranks)])  # fmt: skip

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        return {}


def test_the_runner_collects_each_step_into_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = {f"node{i}": {"ansible_host": f"198.18.0.{i}", "gpus_per_node": 1} for i in (1, 2)}
    node_dir = tmp_path / "nodes"
    cluster, plan, steps = smoke_on_slurm(tmp_path, hosts, {"orch_node_dir": str(node_dir)})
    rundir = RunDir.create(tmp_path / "runs", new_run_id(plan.name))

    @contextmanager
    def local_shells(
        cluster: Cluster, layout: RunDataLayout, shells: object = None, *, need_shells: bool = False
    ) -> Iterator[NodeFiles]:
        assert shells is None  # a runner made without the run's shells opens its own
        yield NodeFiles(layout, {n.name: LocalShell() for n in cluster.nodes})

    monkeypatch.setattr(executor, "node_files", local_shells)
    fake = FakeSlurm()
    life = RunLifecycle(rundir)
    runner = StepExecutor(plan, cluster, steps, fake, "slurm", life, "/opt/x/bin/python")
    with life:
        _execute(runner)
    for spec in fake.specs:
        assert spec.workdir == node_dir / rundir.run_id / "steps" / spec.step_id  # on the node
        assert spec.script == rundir.root.absolute() / "steps" / spec.step_id / "job.sbatch"  # here
    for s in steps:
        here = rundir.root / "steps" / s.id
        assert (here / "rank-0.log").read_text() == "rank 0\n" and (here / "slurm-1.out").exists()
    events = [json.loads(line) for line in rundir.journal_path.read_text().splitlines()]
    collected = [e for e in events if e["event"] == "step_collected"]
    assert [e["step"] for e in collected] == [s.id for s in steps]
    assert all(e["errors"] == [] and e["files"] >= 2 for e in collected)
    assert not (node_dir / rundir.run_id).exists(), "the node folders are removed at the end"


# -- the recovery probe: the stack's Python, its node folder, the stop file on every node -----------


def _remote_cluster(node_dir: Path, stack: str | None = "cpu-gloo") -> Cluster:
    return _cluster(ClusterVars(orch_node_dir=node_dir, orch_stack=stack))


def test_the_probe_runs_the_stacks_python_on_remote_nodes_and_this_one_locally() -> None:
    import sys

    from orchestrator.runs.recovery_request import node_python

    assert node_python(_remote_cluster(Path("/n"))) == "/opt/orch/venv/bin/python"
    assert node_python(_cluster(local=True)) == sys.executable
    with pytest.raises(ConfigError, match="names no stack"):
        node_python(_remote_cluster(Path("/n"), stack=None))


def test_the_slurm_probe_job_runs_in_its_node_folder_and_writes_its_script_here(tmp_path: Path) -> None:
    from orchestrator.runs.probe_jobs import SlurmProbeJob
    from orchestrator.runs.recovery_request import RecoveryTestRequest
    from orchestrator.scheduler.slurm import SlurmScheduler

    req = RecoveryTestRequest(kind="kill-worker", target="node2:1", launcher="slurm")
    out = tmp_path / "runs" / "recovery-1" / "probe"
    spec = SlurmProbeJob(_remote_cluster(Path("/var/tmp/orch")), req, out, "recovery-1").spec()
    where = Path("/var/tmp/orch/recovery-1/probe")
    assert spec.workdir == where and spec.output == where / "slurm-%j.out"
    assert spec.script == out.absolute() / "probe.sbatch"
    assert spec.argv[0] == "/opt/orch/venv/bin/python" and "PYTHONPATH" not in spec.env
    assert spec.argv[spec.argv.index("--out") + 1] == str(where)
    script = SlurmScheduler().render(spec)
    checkout = str(Path(__file__).resolve().parents[2])
    assert f"cd -- {where}" in script.splitlines() and checkout not in script


class RecordingShell:
    """A node's shell that records each line and answers a PID for a started agent."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def run_script(self, script: str, *, timeout: float) -> object:
        from orchestrator.remote.base import CmdResult

        self.lines.append(script)
        return CmdResult(argv=["sh"], rc=1 if script.startswith("kill -0") else 0, stdout="4242\n", stderr="",
                         elapsed_s=0.0)  # fmt: skip


def test_the_ssh_probe_starts_in_its_node_folder_and_stops_by_a_stop_file_on_every_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.runs import probe_jobs
    from orchestrator.runs.recovery_request import RecoveryTestRequest

    node_dir = tmp_path / "nodes"
    cluster = _remote_cluster(node_dir)

    @contextmanager
    def local_shells(cluster: Cluster, layout: RunDataLayout) -> Iterator[NodeFiles]:
        yield NodeFiles(layout, {n.name: LocalShell() for n in cluster.nodes})

    monkeypatch.setattr(probe_jobs, "node_files", local_shells)
    shells = {n.name: RecordingShell() for n in cluster.nodes}
    req = RecoveryTestRequest(kind="kill-worker", target="node2:1")
    out = tmp_path / "runs" / "recovery-1" / "probe"
    job = probe_jobs.ProbeJob(cluster, shells, req, out, "recovery-1")  # type: ignore[arg-type]
    where = node_dir / "recovery-1" / "probe"
    job.start()
    try:
        assert where.is_dir()
        for name, shell in shells.items():
            (line,) = shell.lines
            assert line.startswith(f"cd {where} && setsid env ") and "PYTHONPATH" not in line
            assert "/opt/orch/venv/bin/python -m torch.distributed.run" in line
            assert f">{where}/agent-{name}.log" in line
        (where / "hb-rank0.jsonl").write_text('{"ev": "step"}\n')  # what an agent writes
    finally:
        stop_seen: list[bool] = []
        monkeypatch.setattr(job.files, "close", lambda close=job.files.close: (
            stop_seen.append((where / "stop").exists()), close()))  # fmt: skip
        job.stop(grace_s=0.1)
    assert stop_seen == [True], "the stop file was made in the node folder before the probe's files came home"
    assert (out / "hb-rank0.jsonl").read_text() == '{"ev": "step"}\n'
    assert not (node_dir / "recovery-1").exists()


def test_scale_test_on_remote_nodes_without_a_stack_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    # No stack to name a Python on the nodes: this machine's venv is not there, so no guess.
    from orchestrator.models.plan import PlanOverrides
    from orchestrator.models.requests import ScaleTestRequest
    from orchestrator.runs.scale_test import scale_test

    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"n1": {"ansible_host": "198.18.0.1"}}}}))
    out = tmp_path / "runs"
    req = ScaleTestRequest(inventory=inv, out_dir=out, overrides=PlanOverrides(backend="slurm"))
    with pytest.raises(ConfigError, match="names no stack"):
        scale_test(req)
    assert not out.exists() or not [p for p in out.iterdir() if p.is_dir()]
