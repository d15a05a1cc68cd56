"""CommandRunner on this machine, through subprocess with a timeout on every call."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping

from orchestrator.errors import RemoteError
from orchestrator.remote.base import CmdResult


def capture(
    argv: list[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run argv here with its output captured (``env``: the whole environment, None = this one's).

    Stdin is the input text, or /dev/null. Raises RemoteError when the program is missing or the
    timeout passes; never on a non-zero exit.
    """
    try:
        return subprocess.run(
            argv,
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except FileNotFoundError as e:
        raise RemoteError(f"{argv[0]}: command not found", hint="is it installed and on PATH?") from e
    except subprocess.TimeoutExpired as e:
        raise RemoteError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from e


def _result(argv: list[str], proc: subprocess.CompletedProcess[str], start: float) -> CmdResult:
    return CmdResult(
        argv=list(argv),
        rc=proc.returncode,
        stdout=proc.stdout,
        stderr=proc.stderr,
        elapsed_s=time.monotonic() - start,
    )


class LocalRunner:
    """Runs commands here. `env` is merged over this process's environment."""

    def __init__(self, base_env: dict[str, str] | None = None) -> None:
        self.base_env = dict(base_env or {})

    def run(
        self,
        argv: list[str],
        *,
        timeout: float,
        env: dict[str, str] | None = None,
        input_text: str | None = None,
    ) -> CmdResult:
        """Run argv; raises RemoteError when the program is missing or the timeout passes."""
        start = time.monotonic()
        full_env = {**os.environ, **self.base_env, **(env or {})}
        return _result(argv, capture(argv, timeout=timeout, env=full_env, input_text=input_text), start)


class LocalShell:
    """NodeShell on this machine (connection=local nodes): ``sh -c`` per call."""

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        """Run the line with /bin/sh; raises RemoteError on timeout."""
        start = time.monotonic()
        try:
            proc = capture(["/bin/sh", "-c", script], timeout=timeout)
        except RemoteError as e:
            raise RemoteError(f"local shell: no answer within {timeout:g} s") from e
        return _result(["sh", "-c", script], proc, start)
