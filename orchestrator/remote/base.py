"""One protocol for running a command somewhere: argv lists in, a typed result out."""

from __future__ import annotations

from typing import Protocol

from orchestrator.models.base import StrictModel


class CmdResult(StrictModel):
    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def brief(self) -> str:
        """The command and the last line it printed on stderr (or stdout), for error messages."""
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()
        last = tail[-1] if tail else ""
        return f"`{' '.join(self.argv)}` exited {self.rc}: {last}"


class CommandRunner(Protocol):
    """Runs an argv list and returns its result; never raises on a non-zero exit."""

    def run(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        input_text: str | None = None,
    ) -> CmdResult:
        """Run argv, waiting at most `timeout` seconds; raises RemoteError when it cannot run at all."""
        ...


class NodeShell(Protocol):
    """A shell on one node (kept-open SSH, or this machine for local nodes)."""

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        """Run one shell line built from quoted parts; raises RemoteError when it cannot run."""
        ...
