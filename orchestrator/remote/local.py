"""CommandRunner on this machine, through subprocess with a timeout on every call."""

from __future__ import annotations

import os
import subprocess
import time

from orchestrator.errors import RemoteError
from orchestrator.remote.base import CmdResult


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
        full_env = {**os.environ, **self.base_env, **(env or {})}
        start = time.monotonic()
        try:
            proc = subprocess.run(
                argv,
                input=input_text,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=full_env,
                check=False,
            )
        except FileNotFoundError as e:
            raise RemoteError(f"{argv[0]}: command not found", hint="is it installed and on PATH?") from e
        except subprocess.TimeoutExpired as e:
            raise RemoteError(f"`{' '.join(argv)}` did not finish within {timeout:g} s") from e
        return CmdResult(
            argv=list(argv),
            rc=proc.returncode,
            stdout=proc.stdout,
            stderr=proc.stderr,
            elapsed_s=time.monotonic() - start,
        )


class LocalShell:
    """NodeShell on this machine (connection=local nodes): ``sh -c`` per call."""

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        """Run the line with /bin/sh; raises RemoteError on timeout."""
        start = time.monotonic()
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", script], capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as e:
            raise RemoteError(f"local shell: no answer within {timeout:g} s") from e
        return CmdResult(
            argv=["sh", "-c", script],
            rc=proc.returncode,
            stdout=proc.stdout,
            stderr=proc.stderr,
            elapsed_s=time.monotonic() - start,
        )
