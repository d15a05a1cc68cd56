"""Hostile names and paths: plan name, step id, job name, run id, the --out path, a tampered run
folder on resume, the recovery probe's job script and the nightly job's script.

Each slot gets the same six payloads (a newline, a space that adds an sbatch option, ';', '$( )',
'../' and a leading '-'), each trying to create a canary file. Each is refused at the model
boundary with the value named, or stays one quoted word: the rendered job script is run by bash
with `srun` / `sbatch` / `orch` replaced by stubs on PATH that record their arguments, the canary
never appears, and nothing is written outside the run root.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from orchestrator.cli import main
from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.models.names import check_name
from orchestrator.models.plan import Plan, Step
from orchestrator.paths import under
from orchestrator.plan import expand_steps, load_plan
from orchestrator.runs.executor import job_spec
from orchestrator.runs.nightly import CronEntry, cron_job_spec
from orchestrator.runs.probe_jobs import probe_job_spec
from orchestrator.runs.scale_test import resume_run
from orchestrator.scheduler.allocation import AllocationScheduler
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.slurm import JOB_ENV_ALLOW, SlurmScheduler
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir, check_run_id, new_run_id
from orchestrator.workloads.probe import ProbeSettings

KINDS = ["newline", "space", "semicolon", "subst", "dotdot", "dash"]


def payload(kind: str, canary: Path) -> str:
    """One hostile value of `kind` that tries to create `canary` (or to leave its folder)."""
    return {
        "newline": f"x\ntouch {canary}\n#",
        "space": f"x --export=ALL,LD_PRELOAD={canary}",
        "semicolon": f"x;touch {canary}",
        "subst": f"x$(touch {canary})",
        "dotdot": "x/../../../ESCAPED",
        "dash": "-x",
    }[kind]


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    """tmp_path/bin with stub srun, sbatch and orch that write their argv (NUL-separated) to
    tmp_path/<name>.args and create nothing else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("srun", "sbatch", "orch"):
        stub = bin_dir / name
        stub.write_text(
            f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "{tmp_path}/{name}.args"\n'
        )
        stub.chmod(0o755)
    return tmp_path


def run_script(script: str, sandbox: Path, where: Path) -> None:
    """Run a job script with bash, the stubs first on PATH, from `where`."""
    path = sandbox / "job.sh"
    path.write_text(script)
    env = {"PATH": f"{sandbox / 'bin'}:/usr/bin:/bin", "HOME": str(sandbox)}
    proc = subprocess.run(["bash", str(path)], env=env, cwd=where, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr


def stub_args(sandbox: Path, name: str) -> list[str]:
    return (sandbox / f"{name}.args").read_text().split("\0")[:-1]


def files_outside(root: Path, keep: Path) -> set[Path]:
    """Every path under root that is not under keep (what a run may not have written)."""
    return {p for p in root.rglob("*") if not p.is_relative_to(keep)}


def inventory(d: Path) -> Path:
    path = d / "inv.yml"
    host = {
        "ansible_host": "198.18.0.1",
        "gpu_vendor": "none",
        "gpus_per_node": 1,
        "fabric_address": "198.19.0.1",
    }
    other = {**host, "ansible_host": "198.18.0.2", "fabric_address": "198.19.0.2"}
    path.write_text(yaml.safe_dump({"all": {"hosts": {"node1": host, "node2": other}}}))
    return path


# -- plan name, step id, job name, run id: refused at the boundary, naming the value ------------


@pytest.mark.parametrize("kind", KINDS)
def test_plan_name_refused_in_a_plan_file(tmp_path: Path, kind: str) -> None:
    canary = tmp_path / "CANARY"
    doc = yaml.safe_load((Path(__file__).parents[2] / "orchestrator" / "plans" / "smoke.yaml").read_text())
    doc["name"] = payload(kind, canary)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        load_plan(plan_file)
    assert "name" in e.value.message and str(plan_file) in e.value.message
    with pytest.raises(ValidationError, match="is not a valid name"):
        Plan.model_validate({**doc, "sizes": {"min": 8, "max": 8}})
    assert not canary.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_plan_name_refused_by_scale_test_before_anything_is_written(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    canary = tmp_path / "CANARY"
    doc = yaml.safe_load((Path(__file__).parents[2] / "orchestrator" / "plans" / "smoke.yaml").read_text())
    doc["name"] = payload(kind, canary)
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(yaml.safe_dump(doc))
    inv = tmp_path / "local.ini"
    inv.write_text("localhost ansible_connection=local gpu_vendor=none gpus_per_node=1\n")
    before = set(tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as e:
        main(["scale-test", "-i", str(inv), "--plan", str(plan_file), "--out", str(tmp_path / "runs")])
    assert e.value.code == 2
    assert capsys.readouterr().err.startswith("error:")
    assert set(tmp_path.rglob("*")) == before and not canary.exists()


@pytest.mark.parametrize("kind", KINDS)
def test_step_id_job_name_and_run_id_refused(tmp_path: Path, kind: str) -> None:
    value = payload(kind, tmp_path / "CANARY")
    step = {"id": value, "index": 0, "nnodes": 1, "ranks_per_node": 1, "nodes": ["node1"], "world_size": 1,
            "collectives": ["all_reduce"], "sizes": [8]}  # fmt: skip
    with pytest.raises(ValidationError, match="is not a valid name"):
        Step.model_validate(step)
    spec = {"name": "orch-smoke-n1xg1", "step_id": "n1xg1", "nodes": [], "nnodes": 1, "ranks_per_node": 1,
            "argv": ["true"], "workdir": str(tmp_path)}  # fmt: skip
    JobSpec.model_validate(spec)  # the base case is valid
    for field in ("name", "step_id"):
        with pytest.raises(ValidationError, match="is not a valid name"):
            JobSpec.model_validate({**spec, field: value})
    with pytest.raises(ConfigError, match="run id"):
        check_run_id(value)
    if kind != "dash":  # inside a run id the plan name does not lead
        with pytest.raises(ConfigError, match="run id"):
            new_run_id(value)
    with pytest.raises(ConfigError):
        RunDir.create(tmp_path / "runs", value)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    assert not any(tmp_path.parent.glob("ESCAPED")) and not (tmp_path / "CANARY").exists()


def test_the_pattern() -> None:
    for good in ("smoke", "n2xg1", "a.b-c_d", "9", "x" * 64):
        assert check_name(good) == good
    for bad in ("", ".", "..", ".hidden", "-x", "_x", "a/b", "a b", "a\n", "a\nb", "x" * 65, "é", "a:b"):
        with pytest.raises(ValueError, match="is not a valid name"):
            check_name(bad)


def test_under_keeps_paths_inside_their_root(tmp_path: Path) -> None:
    root = tmp_path / "run"
    root.mkdir()
    assert under(root, "steps", "n1xg1") == root / "steps" / "n1xg1"
    for bad in ("..", "../x", "a/../../x", "/etc", "", "."):
        with pytest.raises(ConfigError, match=r"would leave|outside"):
            under(root, "steps", bad)
    (tmp_path / "elsewhere").mkdir()
    (root / "steps").symlink_to(tmp_path / "elsewhere")  # a planted link
    with pytest.raises(ConfigError, match="outside"):
        under(root, "steps", "n1xg1")


# -- the --out path: one quoted word wherever it goes --------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_out_path_stays_one_word(sandbox: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    canary = sandbox / "CANARY"
    value = payload(kind, canary)
    # The out folder as a user may name it: a relative path with the payload in it, below a base
    # folder, so that '../' stays inside the sandbox.
    base = sandbox / "a" / "b" / "c" / "d"
    base.mkdir(parents=True)
    out = Path(value)
    cluster = load_inventory(inventory(sandbox))
    plan = load_plan("smoke").model_copy(update={"backend": "slurm"})
    step = expand_steps(plan, cluster)[-1]
    monkeypatch.chdir(base)
    rundir = RunDir.create(out, new_run_id(plan.name))
    workdir = rundir.step_dir(step.id).absolute()
    spec = job_spec(step, plan, cluster, "slurm", workdir, "/opt/py/bin/python", 29500)
    sched = SlurmScheduler()
    script = sched.render(spec)
    assert not any(line.startswith("#SBATCH") and str(workdir) in line for line in script.splitlines())
    argv = sched.sbatch_argv(spec)
    assert f"--output={workdir}/slurm-%j.out" in argv  # one argv element, no shell
    before = files_outside(sandbox, workdir)
    run_script(script, sandbox, base)
    got = stub_args(sandbox, "srun")
    assert got[-len(spec.argv) :] == spec.argv
    assert f"--output={workdir}/rank-%t.log" in got
    assert not canary.exists()
    assert files_outside(sandbox, workdir) - before <= {sandbox / "job.sh", sandbox / "srun.args"}
    # Allocation mode's driver: the same rules for the ladder's one script.
    alloc = AllocationScheduler()
    driver = alloc.render_ladder([spec])
    assert not any(line.startswith("#SBATCH") and str(workdir) in line for line in driver.splitlines())
    alloc_dir = workdir.parent.parent / "alloc"
    assert f"--output={alloc_dir}/alloc-%j.out" in alloc.ladder_argv(alloc_dir)  # one argv element
    (sandbox / "srun.args").unlink()
    run_script(driver, sandbox, base)
    got = stub_args(sandbox, "srun")
    assert got[0] == "--export=ALL" and got[-len(spec.argv) :] == spec.argv
    assert f"--output={workdir}/rank-%t.log" in got
    assert not canary.exists()
    assert files_outside(sandbox, workdir) - before <= {sandbox / "job.sh", sandbox / "srun.args"}


def test_out_path_with_percent_is_literal_for_slurm(tmp_path: Path) -> None:
    spec = JobSpec(name="orch-x-n1", step_id="n1", nodes=[], nnodes=1, ranks_per_node=1, argv=["true"],
                   workdir=tmp_path / "100%j done")  # fmt: skip
    assert f"--output={tmp_path}/100%%j done/slurm-%j.out" in SlurmScheduler.sbatch_argv(spec)
    assert f"--output='{tmp_path}/100%%j done/rank-%t.log'" in SlurmScheduler().render(spec)
    with pytest.raises(ConfigError, match="backslash"):
        SlurmScheduler().render(spec.model_copy(update={"workdir": tmp_path / "a\\b"}))


# -- orch runs resume: a tampered run folder -----------------------------------------------------


def _interrupted_run(tmp_path: Path) -> Path:
    """A run folder as an interrupted scale-test leaves it (its process is gone)."""
    cluster = load_inventory(inventory(tmp_path))
    plan = load_plan("smoke").model_copy(update={"backend": "slurm"})
    steps = expand_steps(plan, cluster)
    rd = RunDir.create(tmp_path / "out" / "runs", new_run_id(plan.name))
    rd.write_model("plan.json", plan)
    rd.write_model("inventory.json", cluster)
    (rd.root / "steps.json").write_text(json.dumps({"steps": [s.model_dump(mode="json") for s in steps]}))
    rd.event("run_started", run_id=rd.run_id, plan=plan.name, backend="slurm", steps=[s.id for s in steps],
             pid=2**22 + 12345, host=os.uname().nodename)  # fmt: skip
    return rd.root


@pytest.mark.parametrize("bad", ["../../../OUTSIDE", "x\ntouch PWNED", "-x", "a b", "$(touch PWNED)"])
def test_resume_refuses_a_tampered_step_id(tmp_path: Path, bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _interrupted_run(tmp_path)
    doc = json.loads((run / "steps.json").read_text())
    doc["steps"][0]["id"] = bad
    (run / "steps.json").write_text(json.dumps(doc))
    before = files_outside(tmp_path, run)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        resume_run(run, python="/bin/false")
    assert "steps.json" in e.value.message and repr(bad)[:40] in e.value.message
    assert files_outside(tmp_path, run) == before
    assert not list(tmp_path.rglob("OUTSIDE")) and not list(tmp_path.rglob("PWNED"))
    # A report of the same folder reads it without following the bad id anywhere.
    rec = load_run(run)
    assert bad not in rec.step_ids and any("steps.json" in w for w in rec.warnings)


def test_resume_refuses_a_tampered_plan_name_and_result(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    plan = json.loads((run / "plan.json").read_text())
    good = dict(plan)
    plan["name"] = "x\ntouch PWNED\n#"
    (run / "plan.json").write_text(json.dumps(plan))
    with pytest.raises(ConfigError) as e:
        resume_run(run, python="/bin/false")
    assert "plan.json" in e.value.message and "touch PWNED" in e.value.message
    (run / "plan.json").write_text(json.dumps(good))
    # A step's result.json that claims another step's id is refused, not trusted.
    step = json.loads((run / "steps.json").read_text())["steps"][0]
    result = {"step": {**step, "id": "n9xg9"}, "verdict": "pass"}
    (run / "steps" / step["id"]).mkdir(parents=True)
    (run / "steps" / step["id"] / "result.json").write_text(json.dumps(result))
    with pytest.raises(ConfigError, match=r"result\.json"):
        resume_run(run, python="/bin/false")
    assert not list(tmp_path.rglob("PWNED"))


def test_resume_refuses_a_steps_folder_that_links_outside(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (run / "steps").symlink_to(outside)
    before = files_outside(tmp_path, run)
    with pytest.raises(ConfigError, match="outside"):
        resume_run(run, python="/bin/false")
    assert files_outside(tmp_path, run) == before and not any(outside.iterdir())


def test_a_tampered_journal_run_id_is_refused(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    lines = (run / "journal.jsonl").read_text().splitlines()
    ev = json.loads(lines[0])
    ev["run_id"] = "../../x\ntouch PWNED"
    (run / "journal.jsonl").write_text(json.dumps(ev) + "\n")
    with pytest.raises(ConfigError, match="run id"):
        load_run(run)


# -- the recovery probe's job script ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_probe_job_script(sandbox: Path, kind: str) -> None:
    canary = sandbox / "CANARY"
    value = payload(kind, canary)
    with pytest.raises(ConfigError, match="run id"):
        probe_job_spec(ProbeSettings(), python="/p", out_dir=sandbox, run_id=value, workdir=sandbox,
                       master_addr="198.18.0.1", nodelist=["node1"])  # fmt: skip
    out_dir = sandbox / "o" / "p" / "q" / value  # the run folder, under a user's --out
    workdir = sandbox / value.replace("/", "_")  # where the job runs (a checkout, a share)
    workdir.mkdir()
    settings = ProbeSettings(extra_env={"NCCL_DEBUG": value})
    spec = probe_job_spec(settings, python=f"/opt/{value}/python", out_dir=out_dir, run_id="r1",
                          workdir=workdir, master_addr="198.18.0.1", nodelist=["node1", "node2"])  # fmt: skip
    script = SlurmScheduler().render(spec)
    assert not any(line.startswith("#SBATCH") and value in line for line in script.splitlines())
    assert f"--output={out_dir}/slurm-%j.out" in SlurmScheduler.sbatch_argv(spec)
    run_script(script, sandbox, sandbox)
    got = stub_args(sandbox, "srun")
    assert got[got.index("orch-task") + 1 :] == spec.argv
    # What each task then runs, with exec replaced by a print: the argv arrives whole.
    wrapper = got[got.index("-c") + 1].replace('exec "$@"', 'printf "%s\\0" "$@" > "$ARGS"')
    env = {
        "SLURM_NODEID": "1",
        "SLURMD_NODENAME": "node2",
        "PATH": "/usr/bin:/bin",
        "ARGS": str(sandbox / "task"),
    }
    subprocess.run(["bash", "-c", wrapper, "orch-task", *spec.argv], env=env, check=True, timeout=30)
    assert (sandbox / "task").read_text().split("\0")[:-1] == spec.argv
    assert not canary.exists()


# -- the nightly job's script ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_nightly_job_script(sandbox: Path, kind: str) -> None:
    canary = sandbox / "CANARY"
    value = payload(kind, canary)
    with pytest.raises(ValidationError, match="is not a valid name"):
        CronEntry.model_validate({"name": value, "at": "02:05", "inventory": "/i", "plan": "nightly",
                                  "out_dir": "/o", "store": "/s", "orch": "/o", "workdir": "/w"})  # fmt: skip
    workdir = sandbox / "w" / value.replace("/", "_")
    workdir.mkdir(parents=True)
    out_dir = sandbox / "x" / "y" / "z" / value
    entry = CronEntry(name="nightly", at="02:05", inventory=sandbox / value, plan=value, out_dir=out_dir,
                      store=out_dir / "orch.db", orch=str(sandbox / "bin" / "orch"), workdir=workdir,
                      slurm_conf=sandbox / value, extra_args=["--iters", value])  # fmt: skip
    spec = cron_job_spec(entry, datetime(2026, 11, 30, 3, 0))
    script = SlurmScheduler().render(spec)
    assert not any(line.startswith("#SBATCH") and value in line for line in script.splitlines())
    entry.log_path().parent.mkdir(parents=True, exist_ok=True)
    run_script(script, sandbox, sandbox)
    assert stub_args(sandbox, "orch") == entry.command()[1:]
    resubmit = stub_args(sandbox, "sbatch")
    assert resubmit[: len(SlurmScheduler.sbatch_argv(spec)) - 1] == SlurmScheduler.sbatch_argv(spec)[1:]
    assert resubmit[-1] == str(spec.script) and resubmit[-2].startswith("--begin=")
    assert not canary.exists()


def test_jobs_get_only_the_allowed_environment() -> None:
    spec = JobSpec(name="orch-x-n1", step_id="n1", nodes=[], nnodes=1, ranks_per_node=1, argv=["true"],
                   workdir=Path("/w"), env={"GLOO_SOCKET_IFNAME": "eth0"})  # fmt: skip
    argv = SlurmScheduler.sbatch_argv(spec)
    assert [a for a in argv if a.startswith("--export")] == [f"--export={','.join(JOB_ENV_ALLOW)}"]
    assert not {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH"} & set(JOB_ENV_ALLOW)
    script = SlurmScheduler().render(spec)
    # srun hands the batch script's environment (allow-list + these exports) to every task.
    assert "export GLOO_SOCKET_IFNAME=eth0" in script.splitlines()
    assert (
        shlex.split(next(ln for ln in script.splitlines() if ln.startswith("exec srun")))[2] == "--export=ALL"
    )
    with pytest.raises(ValidationError, match="orch sets --export"):
        spec.model_copy(update={}).model_validate({**spec.model_dump(), "extra_args": ["--export=ALL"]})
