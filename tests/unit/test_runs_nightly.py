"""orch cron: scrontab blocks, the sbatch-begin script, and the commands run (through a fake runner)."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner

from orchestrator.errors import ConfigError
from orchestrator.runs.nightly import (
    CronEntry,
    CronManager,
    cron_sbatch_argv,
    entries_in,
    next_occurrence,
    render_scrontab_block,
    strip_block,
)


def _entry(tmp_path: Path, **kw: object) -> CronEntry:
    data: dict[str, object] = dict(
        name="nightly",
        at="2:05",
        inventory=Path("/inv/lab.ini"),
        plan="nightly",
        out_dir=tmp_path / "runs",
        store=tmp_path / "runs" / "orch.db",
        orch="/venv/bin/orch",
        workdir=Path("/repo"),
        slurm_conf=Path("/var/lib/orch-lab/slurm.conf"),
    )
    data.update(kw)
    return CronEntry.model_validate(data)


class FakeRunner(ScriptedRunner):
    """scrontab keeping one crontab, and sbatch --parsable; every command under the lab's SLURM_CONF."""

    def __init__(self, crontab: str = "") -> None:
        super().__init__()
        self.crontab = crontab

    def answer(self, argv: list[str]) -> Answer:
        assert self.envs[-1] == {"SLURM_CONF": "/var/lib/orch-lab/slurm.conf"}
        out, rc = "", 0
        if argv[:2] == ["scrontab", "-l"]:
            out, rc = (self.crontab, 0) if self.crontab else ("", 1)
        elif argv[0] == "scrontab" and argv[1] != "-r":
            self.crontab = Path(argv[1]).read_text()
        elif argv[:2] == ["scrontab", "-r"]:
            self.crontab = ""
        elif argv[0] == "sbatch":
            out = "4242\n"  # what sbatch --parsable prints
        return rc, out, ""


def test_block_is_a_cron_line_with_scron_options(tmp_path: Path) -> None:
    block = render_scrontab_block(_entry(tmp_path))
    lines = block.splitlines()
    assert lines[0] == "# BEGIN orch-cron nightly" and lines[-1] == "# END orch-cron nightly"
    assert "#SCRON --job-name=orchcron-nightly" in lines
    cron = next(line for line in lines if not line.startswith("#"))
    assert cron.startswith("5 2 * * * cd /repo && ")
    assert "SLURM_CONF=/var/lib/orch-lab/slurm.conf" in cron
    assert "/venv/bin/orch scale-test --inventory /inv/lab.ini --plan nightly" in cron
    assert entries_in(block) == [_entry(tmp_path)]


def test_invalid_time_and_name_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="HH:MM"):
        _entry(tmp_path, at="25:00")
    for bad in ("a;rm -rf", "../x", "-x", "a b", "a\nb"):
        with pytest.raises(ValueError, match="is not a valid name"):
            _entry(tmp_path, name=bad)


def test_install_keeps_other_entries_and_replaces_its_own(tmp_path: Path) -> None:
    runner = FakeRunner("0 1 * * * /usr/bin/true\n")
    mgr = CronManager(runner, Path("/var/lib/orch-lab/slurm.conf"), "scrontab")
    mgr.install(_entry(tmp_path))
    mgr.install(_entry(tmp_path, at="03:30"))
    assert runner.crontab.startswith("0 1 * * * /usr/bin/true\n")
    assert runner.crontab.count("# BEGIN orch-cron nightly") == 1
    assert "30 3 * * *" in runner.crontab
    assert mgr.remove("nightly", tmp_path / "runs")
    assert runner.crontab == "0 1 * * * /usr/bin/true\n"
    with pytest.raises(ConfigError):
        mgr.remove("nightly", tmp_path / "runs")


def test_strip_block_leaves_unrelated_text() -> None:
    text = "a\n# BEGIN orch-cron x\nb\n# END orch-cron x\nc\n"
    assert strip_block(text, "x") == "a\nc\n"
    assert strip_block(text, "y") == text


def test_sbatch_begin_mode_submits_held_until_the_next_occurrence(tmp_path: Path) -> None:
    runner = FakeRunner()
    mgr = CronManager(runner, Path("/var/lib/orch-lab/slurm.conf"), "sbatch-begin")
    mgr.install(_entry(tmp_path), now=datetime(2026, 11, 30, 3, 0))
    sbatch = next(c for c in runner.calls if c[0] == "sbatch")
    assert "--begin=2026-12-01T02:05:00" in sbatch
    script = (tmp_path / "runs" / "cron" / "nightly.sbatch").read_text()
    assert 'date -d "tomorrow 02:05"' in script
    assert entries_in(script)[0].plan == "nightly"
    # Never requeued by Slurm: a requeue after the node stopped answering re-ran the plan and, on
    # the lab, met the old job still on the node ("Duplicate jobid", node drained). The first
    # submission and the resubmission run the same script, so the line holds for both.
    assert "#SBATCH --no-requeue" in script.splitlines()
    assert sbatch[-1] == str((tmp_path / "runs" / "cron" / "nightly.sbatch").resolve())


def test_first_submission_and_daily_resubmission_are_the_same_sbatch(tmp_path: Path) -> None:
    entry = _entry(tmp_path, time_limit_min=90, job_args=["--nodelist=node3"])
    runner = FakeRunner()
    CronManager(runner, Path("/var/lib/orch-lab/slurm.conf"), "sbatch-begin").install(
        entry, now=datetime(2026, 11, 30, 3, 0)
    )
    argv = cron_sbatch_argv(entry)
    assert "--nodelist=node3" in argv
    sbatch = next(c for c in runner.calls if c[0] == "sbatch")
    assert sbatch[:-2] == argv
    script = (tmp_path / "runs" / "cron" / "nightly.sbatch").read_text()
    assert {"#SBATCH --time=01:30:00", "#SBATCH --no-requeue"} <= set(script.splitlines())
    resubmit = next(ln for ln in script.splitlines() if ln.startswith("sbatch "))
    assert shlex.split(resubmit)[: len(argv)] == argv
    assert shlex.split(resubmit)[-1] == sbatch[-1]  # the same script


def test_next_occurrence() -> None:
    assert next_occurrence("02:05", datetime(2026, 1, 1, 2, 4)) == datetime(2026, 1, 1, 2, 5)
    assert next_occurrence("02:05", datetime(2026, 1, 1, 2, 5)) == datetime(2026, 1, 2, 2, 5)


def test_a_health_entry_runs_orch_health_on_the_inventory_and_reads_back(tmp_path: Path) -> None:
    entry = _entry(tmp_path, name="health", kind="health", extra_args=["--drain"])
    cron = next(line for line in render_scrontab_block(entry).splitlines() if not line.startswith("#"))
    assert "/venv/bin/orch health --inventory /inv/lab.ini --drain >>" in cron
    assert "scale-test" not in cron
    assert entries_in(render_scrontab_block(entry)) == [entry]
    # an entry written before kinds existed reads as scale-test
    old = _entry(tmp_path).model_dump(mode="json")
    del old["kind"]
    assert CronEntry.model_validate(old).kind == "scale-test"
