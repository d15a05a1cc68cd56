"""The console script's outcome mapping: one line, the right exit code, no traceback unless -v."""

from __future__ import annotations

import subprocess
import sys

import pytest

from orchestrator import __version__


def orch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_version() -> None:
    proc = orch("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"orch {__version__}")


@pytest.mark.parametrize("args", [["scale-test", "--bogus"], ["plan", "show", "--iters", "zero"], ["nosuch"]])
def test_usage_errors_exit_2_without_traceback(args: list[str]) -> None:
    proc = orch(*args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_error_is_one_line_and_verbose_shows_traceback() -> None:
    proc = orch("inventory", "show", "-i", "/nonexistent/inv.ini")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "/nonexistent/inv.ini" in lines[0]
    verbose = orch("-v", "inventory", "show", "-i", "/nonexistent/inv.ini")
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
