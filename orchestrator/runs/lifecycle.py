"""One run, from its directory to `run_finished`: what every kind of run shares.

A `RunLifecycle` owns, for scale-test and recovery-test alike (and for the kinds to come):

- the run directory and its journal (store/rundir.py), the resolved inputs written into it, and
  the results store's listener (store/db.py), which ingests the run as it goes;
- the events: each is journaled and handed to every listener; a listener that raises is logged
  and the others still get the event (the journal has it all);
- SIGTERM and SIGINT: while the run is open both end it as Ctrl-C does; while it winds down (jobs
  cancelled, faults reverted, run_finished journaled), a second signal waits until that is done;
- the end, whatever it is: on any exception (Ctrl-C, SIGTERM, a scheduler that stopped
  answering, a bug) the run's jobs still queued or running are cancelled and journaled
  (`interrupted` or `run_error`), its faults reverted, and `run_finished` journaled with the
  status, exit code, wall time and error. Ctrl-C and SIGTERM leave as `Interrupted` (exit 130);
  any other error leaves as it came;
- the run's one set of kept-open shells to its nodes (`shells`), made at first use and shared by
  the stack's fingerprint, the nodes' folders, faults, serving faults and telemetry: one SSH
  connection per node per run; closed after every other close, so that a revert still has it;
- the exit-code mapping (errors.py EXIT_*): see `verdict_ending` and `error_ending`.

Used as a context manager around the body of a run:

    with RunLifecycle.create(out_root, run_id, listeners) as life:
        life.started(RunStarted(...), kind="scale-test")
        life.on_cancel(runner.cancel_live)   # the run's jobs, cancelled on any error
        life.on_close(faults.close)          # reverted however the run ends
        ...
        life.finish(verdict_ending("pass"))
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Literal

from pydantic import BaseModel

from orchestrator.errors import (
    EXIT_INFRA,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_THRESHOLDS,
    Interrupted,
    OrchError,
)
from orchestrator.models.cluster import Cluster
from orchestrator.models.events import (
    Listener,
    RunError,
    RunEvent,
    RunFinished,
    RunInterrupted,
    RunKind,
    RunStarted,
)
from orchestrator.models.results import Verdict
from orchestrator.paths import under
from orchestrator.remote.shells import ShellSet
from orchestrator.safefs import make_dir
from orchestrator.store.db import StoreListener, default_store_path
from orchestrator.store.rundir import RunDir, who

log = logging.getLogger(__name__)

Status = Literal["accepted", "failed", "infra", "interrupted", "refused"]


@dataclass(frozen=True)
class Ending:
    """How a run ended: what run_finished says and the exit code orch leaves with."""

    status: Status
    exit_code: int
    error: str | None = None


def verdict_ending(verdict: Verdict) -> Ending:
    """The ending of a run that ran to its end: pass -> accepted (0), fail -> failed (1), infra or
    skipped (a step that never ran) -> infra (3)."""
    if verdict == "pass":
        return Ending("accepted", EXIT_OK)
    if verdict == "fail":
        return Ending("failed", EXIT_THRESHOLDS)
    return Ending("infra", EXIT_INFRA)


def error_ending(e: BaseException) -> Ending:
    """The ending of a run an exception stopped: Ctrl-C/SIGTERM -> interrupted (130); an OrchError
    -> its exit code (infra for 3, failed otherwise); anything else (a bug) -> infra (3)."""
    if isinstance(e, KeyboardInterrupt | Interrupted):
        return Ending("interrupted", EXIT_INTERRUPTED)
    if isinstance(e, OrchError):
        return Ending("infra" if e.exit_code == EXIT_INFRA else "failed", e.exit_code, str(e))
    return Ending("infra", EXIT_INFRA, f"{type(e).__name__}: {e}")


def emit(listeners: Sequence[Listener], ev: RunEvent) -> None:
    """Hand the event to every listener. One that raises is logged and the others still get the
    event: a progress display or a store that fails never stops the run (the journal has it all)."""
    for listener in listeners:
        try:
            listener.event(ev)
        except Exception:
            log.exception("listener %s failed on event %s; the run goes on", type(listener).__name__, ev.kind)


def _journal_fields(ev: RunEvent) -> dict[str, Any]:
    # The fields the caller set (a field left at its default stays out of the journal line).
    return ev.model_dump(exclude_unset=True, exclude={"kind"})


class RunLifecycle:
    """One open run; see the module docstring. Not reentrant: one `with` per run (or resume)."""

    def __init__(
        self, rundir: RunDir, listeners: Sequence[Listener] = (), *, t0: float | None = None
    ) -> None:
        self.rundir = rundir
        store = StoreListener(default_store_path(rundir.root.parent))
        self.listeners: list[Listener] = [*listeners, store]
        self.t0 = time.monotonic() if t0 is None else t0
        self.ending: Ending | None = None
        self._cancel: Callable[[], list[str]] | None = None
        self._close: list[Callable[[], None]] = []
        self._on_error: Callable[[Ending], object] | None = None
        self._cancelled: list[str] = []
        self._saved: dict[int, Any] = {}
        self._deferred: list[int] = []
        self._shells: ShellSet | None = None

    # --- opening -------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, out_root: Path, run_id: str, listeners: Sequence[Listener] = (), *, t0: float | None = None
    ) -> RunLifecycle:
        """A new run directory out_root/run_id. Raises ConfigError (out_root is a file, a bad
        run id) or InfraError (the folder cannot be made)."""
        return cls(RunDir.create(out_root, run_id), listeners, t0=t0)

    @classmethod
    def at(cls, root: Path, listeners: Sequence[Listener] = (), *, t0: float | None = None) -> RunLifecycle:
        """The run directory root, made if missing (recovery-test names its own; resume reopens
        one). Raises InfraError when it cannot be made."""
        make_dir(root)
        return cls(RunDir(root), listeners, t0=t0)

    def write_inputs(self, **models: BaseModel) -> None:
        """Write resolved inputs as JSON files of the run (name: model; '.json' is added)."""
        for name, model in models.items():
            self.rundir.write_model(f"{name}.json", model)

    @property
    def run_id(self) -> str:
        return self.rundir.run_id

    @property
    def root(self) -> Path:
        return self.rundir.root

    # --- events --------------------------------------------------------------------------------

    def journal(self, kind: str, **fields: Any) -> None:
        """A journal line only (no listener hears it): fault records, clock offsets, notes."""
        self.rundir.event(kind, **fields)

    def log(self, ev: RunEvent) -> None:
        """Journal the event, then hand it to every listener."""
        self.rundir.event(ev.kind, **_journal_fields(ev))
        emit(self.listeners, ev)

    def emit(self, ev: RunEvent) -> None:
        """Hand the event to the listeners without journaling it (the journal has its own line)."""
        emit(self.listeners, ev)

    def started(self, ev: RunStarted, *, kind: RunKind, **journal: Any) -> None:
        """Journal run_started (the event's fields but run_dir, the run's kind, who started it,
        and `journal`), then tell the listeners."""
        fields = ev.model_dump(exclude={"kind", "run_dir"})
        self.rundir.event("run_started", **fields, kind=kind, **journal, **who())
        emit(self.listeners, ev)

    def resumed(self, ev: RunStarted, **journal: Any) -> None:
        """Journal run_resumed (the run's id, who resumes it, and `journal`), then tell the
        listeners that the run started again."""
        self.rundir.event("run_resumed", run_id=ev.run_id, **journal, **who())
        emit(self.listeners, ev)

    # --- what the end undoes -------------------------------------------------------------------

    def on_cancel(self, cancel: Callable[[], list[str]]) -> None:
        """cancel() cancels the run's jobs not known to have ended and returns their ids; it is
        called once if the run ends on an exception."""
        self._cancel = cancel

    def on_close(self, close: Callable[[], None]) -> None:
        """close() runs however the run ends (faults reverted), after the jobs are cancelled."""
        self._close.append(close)

    def shells(self, cluster: Cluster) -> ShellSet:
        """The run's kept-open shells to cluster's nodes: one set per run, made at the first call
        (each shell at its first use), closed when the run ends, after every on_close. Raises
        ValueError when cluster has a node the run's set does not."""
        if self._shells is None:
            self._shells = ShellSet(cluster)
        elif missing := set(cluster.names) - set(self._shells):
            raise ValueError(f"the run's shells have no node {', '.join(sorted(missing))}")
        return self._shells

    def on_error(self, write: Callable[[Ending], object]) -> None:
        """write(ending) records the run's result when it ends on an exception (and usually
        calls finish); when it raises, run_finished is journaled with that error instead."""
        self._on_error = write

    def finish(self, ending: Ending, *, wall_s: float | None = None) -> Ending:
        """Close the run (faults reverted), then journal run_finished (status, exit code, wall
        time, error) once, and tell the listeners."""
        if self.ending is not None:
            return self.ending
        self._closing()
        self.ending = ending
        fields: dict[str, Any] = {"status": ending.status, "exit_code": ending.exit_code}
        if ending.status != "refused":
            fields["wall_s"] = self.wall_s if wall_s is None else wall_s
        if ending.error is not None:
            fields["error"] = ending.error
        self.rundir.event("run_finished", **fields)
        emit(self.listeners, RunFinished(status=ending.status, exit_code=ending.exit_code))
        return ending

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.t0

    # --- the context ---------------------------------------------------------------------------

    def __enter__(self) -> RunLifecycle:
        self._signals(self._stop)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._signals(self._defer)  # a second Ctrl-C waits until the run is wound down
        try:
            if e is None:
                self._closing()
                if self.ending is None:
                    log.warning("run %s left without run_finished; journaled as infra", self.run_id)
                    self.finish(Ending("infra", EXIT_INFRA, "the run ended without a result"))
                return
            self._abort(e)
        finally:
            self._restore()
        if isinstance(e, KeyboardInterrupt):
            cancelled = ", ".join(self._cancelled) or "none"
            raise Interrupted(f"interrupted; jobs cancelled: {cancelled}") from e

    def _abort(self, e: BaseException) -> None:
        ending = error_ending(e)
        if self.ending is None:  # a run refused on its way in (finish("refused")) has nothing to undo
            cancelled = self._cancel_jobs()
            with contextlib.suppress(OrchError):
                if ending.status == "interrupted":
                    self.log(RunInterrupted(cancelled=cancelled))
                else:
                    self.log(RunError(error=f"{type(e).__name__}: {e}", cancelled=cancelled))
        self._closing()
        if self.ending is not None:
            return
        if self._on_error is not None:
            try:
                self._on_error(ending)
            except Exception as finish_error:  # e.g. the disk is full: the first error is the one to see
                log.exception("writing the result of run %s failed", self.run_id)
                with contextlib.suppress(OrchError):
                    self.finish(Ending("infra", ending.exit_code, str(finish_error)))
        with contextlib.suppress(OrchError):
            self.finish(ending)

    def _cancel_jobs(self) -> list[str]:
        """Cancel the run's jobs; a cancel that fails (the scheduler is what failed) is journaled,
        never raised over the cause."""
        self._cancelled = []
        if self._cancel is None:
            return []
        try:
            self._cancelled = self._cancel()
        except OrchError as e:
            with contextlib.suppress(OrchError):
                self.journal("cancel_failed", error=str(e))
        return self._cancelled

    def _closing(self) -> None:
        # the run's shells last: the closes before them revert faults through them
        last = [self._shells.close] if self._shells is not None else []
        for close in [*self._close, *last]:
            try:
                close()
            except Exception as e:  # one revert that fails does not skip the others
                log.exception("closing the run failed")
                with contextlib.suppress(OrchError):
                    self.journal("close_failed", error=f"{type(e).__name__}: {e}")
        self._close = []

    # --- signals -------------------------------------------------------------------------------

    @staticmethod
    def _stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        self._deferred.append(signum)

    def _signals(self, handler: Callable[[int, FrameType | None], None]) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers; a run in a thread keeps the process's
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.signal(sig, handler)
            self._saved.setdefault(sig, previous)

    def _restore(self) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)
        self._saved = {}
        if self._deferred:
            log.warning("signal %s came while the run was winding down; it ended anyway", self._deferred[0])


def keep_attempt(root: Path, folder: Path, name: str) -> None:
    """Move a killed attempt's folder (its logs, heartbeats) to attempts/<name>.<n> of the run
    root, away from where the next attempt writes its own; nothing when it is missing or empty.
    Raises ConfigError when a path would leave the run folder."""
    if not folder.exists() or not any(folder.iterdir()):
        return
    attempts = under(root, "attempts", what="attempts folder")
    make_dir(attempts)
    n = len(list(attempts.glob(f"{name}.*"))) + 1
    folder.rename(under(attempts, f"{name}.{n}", what="attempt folder"))
