"""Run commands for the lab: argv lists with timeouts, failures raised as LabError."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping

from orchestrator.errors import LabError, RemoteError
from orchestrator.remote.local import capture

# Daemons and Slurm commands get a plain environment, not orch's (no venv, no pyenv shims).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(
    argv: list[str],
    *,
    timeout: float = 30.0,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``, capture its output, and return the finished process.

    Raises:
        LabError: the command is missing, times out, or (with ``check``) exits non-zero.
    """
    try:
        proc = capture(argv, timeout=timeout, env=env, input_text=input_text)
    except RemoteError as e:
        raise LabError(e.message) from e
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        tail = detail[-1] if detail else "no output"
        raise LabError(f"`{' '.join(argv)}` failed (exit {proc.returncode}): {tail}")
    return proc
