"""The medium and low findings of issue 25, each reproduced as its attack: every test here failed
on main 12fd743 (hard links, FIFOs, malformed store URLs, umask modes, planted links, ...)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_alloc_render import Recorder
from test_runs_nightly import _entry
from test_store_build import make_run

from orchestrator.errors import ConfigError, OrchError, ParseError
from orchestrator.models.serving import check_engine_arg
from orchestrator.parse import parse_file
from orchestrator.runs.lifecycle import keep_attempt
from orchestrator.runs.nightly import CronManager
from orchestrator.scheduler.base import check_sbatch_options
from orchestrator.scheduler.salloc import SallocScheduler, popen_launch
from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run
from orchestrator.store.location import parse_store
from orchestrator.store.rundir import RunDir

CANARY = "CANARY-5f1c0ffee"


def test_a_hard_linked_run_file_is_not_read_and_leaks_nothing(tmp_path: Path) -> None:
    """drift.json hard-linked to a file outside the run: refused by name, its content in no warning."""
    run = make_run(tmp_path, "r-link")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"rows": CANARY * 20}))
    os.link(secret, run / "drift.json")
    rec = load_run(run)
    assert any(w.startswith("drift.json: not read") and "hard links" in w for w in rec.warnings), rec.warnings
    assert CANARY not in json.dumps(rec.warnings)


def test_an_invalid_run_file_warning_names_the_field_not_the_content(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r-invalid")
    (run / "drift.json").write_text(json.dumps({"rows": CANARY * 20}))
    rec = load_run(run)
    assert any(w.startswith("drift.json: invalid") for w in rec.warnings), rec.warnings
    assert CANARY not in json.dumps(rec.warnings)


def test_parse_refuses_a_fifo_at_once(tmp_path: Path) -> None:
    """`orch parse` on a FIFO hung for ever (no writer ever came); now it is refused."""
    fifo = tmp_path / "out.txt"
    os.mkfifo(fifo)
    failure: list[BaseException] = []

    def attempt() -> None:
        try:
            parse_file(fifo)
        except BaseException as e:
            failure.append(e)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(10)
    if t.is_alive():  # unblock the open/read so the thread ends
        with open(fifo, "w"):
            pass
        pytest.fail("orch parse blocked on a FIFO")
    assert len(failure) == 1 and isinstance(failure[0], ParseError), failure
    assert "not a regular file" in str(failure[0])


@pytest.mark.parametrize(
    "url", ["postgresql://u:pw@[::1/db", "postgres://u:pw@h:99999999x/db", "postgresql://[zz"]
)
def test_a_malformed_store_url_is_a_clean_error_without_the_password(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_store(url)
    assert "pw" not in info.value.message.replace("postgres", "")
    r = subprocess.run([sys.executable, "-m", "orchestrator", "runs", "list", "--store", url],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr and "results store URL" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "option",
    ["--job-nam=x", "--outp=x.log", "--export-f=envfile", "--get-user=10", "--exp=ALL", "--chd=tmp",
     "--job-name=x", "--output=x.log", "--uid=0", "--gid=0", "--workdir=tmp", "--wr=id", "--j=x"],
)  # fmt: skip
def test_sbatch_managed_options_are_refused_in_every_spelling(option: str) -> None:
    """sbatch takes any unique prefix of a long option; orch took `--job-nam=` for an unknown one."""
    with pytest.raises(ValueError, match=r"abbreviation|orch sets|not one of") as info:
        check_sbatch_options([option])
    assert option in str(info.value)


@pytest.mark.parametrize("option", ["--time=10", "--qos=high", "--nodelist=node3", "--mem-per-cpu=4G"])
def test_full_sbatch_option_names_are_accepted(option: str) -> None:
    assert check_sbatch_options([option]) == [option]


def test_cron_job_args_refuse_an_abbreviated_managed_option(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "orchestrator", "cron", "install", "--name", "n1", "--at", "02:00",
         "--out", str(tmp_path / "out"), "--job-arg=--outp=owned.log"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "abbreviation" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "arg",
    ["-tp", "-tp=4", "-tp4", "-pp=2", "--tensor_parallel_size=4", "--tensor-parallel-size=4",
     "--tensor-par=4", "--tp",
     "--tp-size=2", "--tp_size=2", "--pipeline_parallel_size=2", "--model-path=/m", "--model=/m",
     "--ho=0.0.0.0", "--port=1", "--dtype=half", "--served_model_name=x", "--revision=main", "--device=cpu"],
)  # fmt: skip
def test_engine_spellings_of_managed_settings_are_refused(arg: str) -> None:
    """vLLM's -tp and --tensor_parallel_size got past ORCH_SET_ARGS: the engine then served with a
    parallelism the plan, the report and the cost model did not know."""
    with pytest.raises(ValueError, match="which is set by orch from the plan") as info:
        check_engine_arg(arg)
    assert arg in str(info.value)


@pytest.mark.parametrize(
    "arg", ["--max-model-len=4096", "--gpu-memory-utilization=0.9", "-q=fp8", "--enable-prefix-caching"]
)
def test_ordinary_engine_arguments_are_kept(arg: str) -> None:
    assert check_engine_arg(arg) == arg


def test_alloc_mode_never_writes_through_planted_links(tmp_path: Path) -> None:
    """alloc/commands.sh (write_text) and salloc.out / srun-<id>.out (open "a") followed a link
    planted in the run's alloc/ folder."""
    from test_alloc_salloc import FakeLaunch, Sacct, ladder

    victim = tmp_path / "victim"
    victim.write_text("keep")
    alloc = tmp_path / "alloc"
    alloc.mkdir()
    (alloc / "commands.sh").symlink_to(victim)
    sched = SallocScheduler(runner=Sacct(), launch=FakeLaunch(srun_status=0))  # type: ignore[arg-type]
    sched.submit_ladder(ladder(tmp_path), alloc)
    sched.release()
    assert victim.read_text() == "keep"
    assert not (alloc / "commands.sh").is_symlink() and "srun" in (alloc / "commands.sh").read_text()
    (alloc / "salloc.out").unlink(missing_ok=True)
    (alloc / "salloc.out").symlink_to(victim)
    with pytest.raises(OSError):  # the real launcher: O_NOFOLLOW
        popen_launch(["true"], {}, alloc / "salloc.out")
    assert victim.read_text() == "keep"


def test_folders_orch_makes_have_their_mode_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000, steps/, steps/<id> and attempts/ were 0777:
    a group member could swap job.sbatch or fake result.json."""
    old = os.umask(0)
    try:
        rd = RunDir.create(tmp_path, "r-umask")
        step = rd.step_dir("n1xg1")
        (step / "rank-0.log").write_text("x")
        keep_attempt(rd.root, step, "n1xg1")
        step = rd.step_dir("n1xg1")  # made again for the next attempt
    finally:
        os.umask(old)
    for folder in (rd.root / "steps", step, rd.root / "attempts", rd.root / "attempts" / "n1xg1.1"):
        assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_cron_install_refuses_an_out_folder_others_may_write(tmp_path: Path) -> None:
    """A root job resubmits cron/NAME.sbatch every day: a world-writable cron folder is refused."""
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    cron = CronManager(Recorder("4242\n"), None, mode="sbatch-begin")  # type: ignore[arg-type]
    entry = _entry(tmp_path, out_dir=out)
    with pytest.raises(ConfigError, match="group or others may write"):
        cron.install(entry)
    assert not list((out / "cron").glob("*.sbatch"))
    os.chmod(out, 0o700)
    old = os.umask(0)
    try:
        fresh = tmp_path / "fresh"
        cron.install(entry.model_copy(update={"out_dir": fresh}))
    finally:
        os.umask(old)
    assert (
        stat.S_IMODE(fresh.stat().st_mode) == 0o700 and stat.S_IMODE((fresh / "cron").stat().st_mode) == 0o700
    )


def test_the_store_never_follows_a_dangling_symlink(tmp_path: Path) -> None:
    """runs/orch.db -> /elsewhere/new.db (missing): SQLite created it there, 0644."""
    target = tmp_path / "elsewhere" / "new.db"
    target.parent.mkdir()
    link = tmp_path / "runs" / "orch.db"
    link.parent.mkdir()
    link.symlink_to(target)
    with pytest.raises(OrchError, match="symbolic link"):
        ResultsStore.open(link)
    assert not target.exists()


def test_a_planted_certificate_dated_2030_does_not_win(tmp_path: Path) -> None:
    """`cert show` took the newest issued_at anywhere under --dir: a certificate planted in a run
    folder others may write (or that someone else owns) is never the answer now."""
    from datetime import UTC, datetime, timedelta

    from orchestrator.certs.build import seal
    from orchestrator.certs.service import cert_path, cert_text, entries, issue, latest
    from orchestrator.models.cert import Certificate

    mine = make_run(tmp_path, "r-mine")
    issue(mine, valid_days=10)
    real = Certificate.model_validate_json(cert_path(mine, "localhost").read_text())
    later = datetime(2030, 1, 1, tzinfo=UTC)
    fake = seal(real.model_copy(update={"issued_at": later, "valid_until": later + timedelta(days=3650)}))
    planted = cert_path(tmp_path / "r-planted", "localhost")
    planted.parent.mkdir(parents=True)
    planted.write_text(cert_text(fake))
    os.chmod(tmp_path / "r-planted", 0o777)
    path, cert, problems = latest("localhost", tmp_path)
    assert path == cert_path(mine, "localhost") and cert.issued_at == real.issued_at and problems == []
    listed = {e.path: e for e in entries(tmp_path)}
    assert not listed[str(planted)].intact and "not trusted" in listed[str(planted)].problems[0]


def test_a_certificate_never_makes_orch_load_a_stack_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate's stack.stack named any YAML path and `orch check --quick` loaded it."""
    import orchestrator.stacks as stacks
    from orchestrator.certs.service import cert_path, issue, latest, verify

    evil = tmp_path / "evil.yaml"
    evil.write_text("name: evil\n")
    run = make_run(tmp_path, "r1")
    issue(run, valid_days=10)
    path = cert_path(run, "localhost")
    data = json.loads(path.read_text())
    if data.get("stack") is None:
        data["stack"] = {"stack": "cpu-gloo", "fingerprint_sha256": "0" * 64, "compatibility": "unchanged"}
    data["stack"]["stack"] = str(evil)
    path.write_text(json.dumps(data))
    assert not verify(path).ok
    with pytest.raises(ConfigError, match="no certificate"):
        latest("localhost", tmp_path)  # invalid: never the answer
    loaded: list[object] = []
    real = stacks.load_stack
    monkeypatch.setattr(stacks, "load_stack", lambda ref, *a: loaded.append(ref) or real(ref, *a))
    for ref in (str(evil), "evil.yaml", "../evil"):
        monkeypatch.chdir(tmp_path)
        with pytest.raises(ConfigError):
            stacks.packaged_stack(ref)
    assert loaded == []
