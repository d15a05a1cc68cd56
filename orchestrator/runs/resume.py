"""`orch runs resume`: finish an interrupted run of any kind, in its own run directory.

The kind is what the run folder says (store/load.py run_kind): a scale-test ladder runs the steps
without a finished result (scale_test.resume_run); a recovery-test runs the repeats without a
record (runs/recovery.py resume_recovery_test). Either way the journal gets run_resumed, the
records are appended, and the result or summary covers the whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.faults.base import NodeShell
from orchestrator.models.cluster import Cluster
from orchestrator.models.events import Listener
from orchestrator.models.fault import RecoverySummary
from orchestrator.models.migrate import MigrateRun
from orchestrator.models.run import RunResult
from orchestrator.runs.orphans import cancel_orphans_of, orphan_job_ids
from orchestrator.runs.recovery import resume_recovery_test
from orchestrator.runs.scale_test import resume_run
from orchestrator.safefs import untrusted_folder
from orchestrator.store.load import run_kind


def resume(
    run_dir: Path,
    *,
    listeners: list[Listener] | None = None,
    open_shells: Callable[[Cluster], AbstractContextManager[Mapping[str, NodeShell]]],
    progress: Callable[[str], None] = lambda _m: None,
    slurm_conf: Path | None = None,
) -> RunResult | RecoverySummary | MigrateRun:
    """Resume the run in run_dir by its kind. ``listeners`` hear a ladder's events; ``open_shells``
    opens the nodes' shells a recovery-test needs; ``progress`` gets its lines. ``slurm_conf``:
    the Slurm configuration of the --inventory given on the command line, or None for orch's own
    SLURM_CONF; never the one the run folder names (store/load.py run_cluster).

    Raises:
        ConfigError: not a run directory, still running, nothing left to run, a damaged folder, or
            one that someone else owns or others may write into.
        Interrupted: Ctrl-C or SIGTERM (jobs cancelled, faults reverted, run_finished journaled).
    """
    if (why := untrusted_folder(run_dir)) is not None:
        raise ConfigError(
            f"run folder {run_dir} {why}: not resumed",
            hint="resume only your own run folders (owned by you, not writable by group or others)",
        )
    if run_kind(run_dir) == "isolate":
        raise ConfigError(
            f"{run_dir} is an isolate run: it is not resumed",
            hint="run orch isolate again (its tests take a minute at most each)",
        )
    if run_kind(run_dir) == "stragglers":
        raise ConfigError(
            f"{run_dir} is a stragglers run: it is not resumed",
            hint="run orch stragglers again (its pairs take a minute at most each)",
        )
    if orphan_job_ids(run_dir):  # Slurm job ids only: a local run's jobs died with its orch
        from orchestrator.scheduler.slurm import SlurmScheduler

        cancel_orphans_of(run_dir, SlurmScheduler(slurm_conf=slurm_conf))
    if run_kind(run_dir) in ("migrate", "rollback"):
        from orchestrator.runs.migrate import resume_migration

        return resume_migration(run_dir, listeners, slurm_conf=slurm_conf)
    if run_kind(run_dir) == "recovery-test":
        return resume_recovery_test(run_dir, open_shells, progress=progress, slurm_conf=slurm_conf)
    return resume_run(run_dir, listeners=listeners, slurm_conf=slurm_conf)
