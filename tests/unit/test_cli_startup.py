"""A CLI that starts fast (issue 22, item 5): the entry point loads only the command it runs.

`orch check --quick` runs in a Slurm prolog before every job: it must load neither paramiko,
Ansible, rich nor the plan models, and read no inventory. `orch --help` lists every command from
the table in orchestrator/cli/__init__.py without importing a command module.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import typer
from test_quick_check import write_certificate

from orchestrator import __version__
from orchestrator.cli import COMMANDS, build_app, command_of
from orchestrator.provision.fingerprint import from_probe
from orchestrator.stacks import load_stack

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("paramiko", "ansible", "ansible_runner", "rich", "orchestrator.plan", "orchestrator.models.plan")

# Runs main(argv) in a fresh interpreter and writes {"code": exit code, "modules": [...]} to OUT.
# PROBE, when given, stands in for the fingerprint probe's source (the real one reads /opt).
_HARNESS = """
import json, sys
from pathlib import Path
out, probe, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
if probe:
    import orchestrator.provision.quickprint as quickprint
    quickprint.PROBE = Path(probe)
from orchestrator.cli import main
try:
    main(argv)
    code = 0
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 1
Path(out).write_text(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _run(tmp_path: Path, argv: list[str], probe: Path | None = None) -> tuple[int, set[str], str]:
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", _HARNESS, str(out), str(probe or ""), *argv],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    got = json.loads(out.read_text())
    return got["code"], set(got["modules"]), proc.stdout + proc.stderr


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _certified_node(tmp_path: Path) -> tuple[str, Path, Path]:
    """A certificate of node1 whose fingerprint matches the cpu-gloo stack, and a probe that reports
    that same fingerprint: the check passes (exit 0) through the whole path."""
    py = load_stack("cpu-gloo").python
    assert py is not None
    raw = {
        "os": "debian-12",
        "venv": {"python": py.python_version + ".2", "torch": py.torch, "orch": __version__},
    }
    probe = tmp_path / "probe.py"
    probe.write_text(f"print({json.dumps(json.dumps(raw))})\n")
    write_certificate(tmp_path / "runs", from_probe("node1", raw), now=datetime.now(UTC), valid_days=30)
    return "node1", tmp_path / "runs", probe


def test_check_quick_loads_no_ssh_ansible_rich_or_plan_model(tmp_path: Path) -> None:
    node, root, probe = _certified_node(tmp_path)
    code, modules, output = _run(tmp_path, ["check", "--quick", node, "--dir", str(root)], probe)
    assert code == 0, output
    assert f"{node}: ok" in output
    assert _heavy(modules) == []
    assert "orchestrator.inventory" not in modules  # no inventory read
    assert "orchestrator.certs.quick" in modules  # the check did run


def test_check_quick_on_a_drifted_node_exits_1_and_still_loads_nothing_heavy(tmp_path: Path) -> None:
    node, root, _ = _certified_node(tmp_path)
    drifted = tmp_path / "drifted.py"
    drifted.write_text('print(\'{"os": "debian-12", "venv": {}}\')\n')  # the venv gone from /opt
    code, modules, output = _run(tmp_path, ["check", "--quick", node, "--dir", str(root)], drifted)
    assert code == 1, output
    assert "drift against stack cpu-gloo" in output
    assert _heavy(modules) == []


def test_help_lists_every_command_and_imports_no_command_module(tmp_path: Path) -> None:
    code, modules, output = _run(tmp_path, ["--help"])
    assert code == 0, output
    for name in COMMANDS:
        assert f" {name} " in output, name
    loaded = sorted(m for m in modules if m.startswith("orchestrator."))
    assert set(loaded) <= {"orchestrator.cli", "orchestrator.cli.plain", "orchestrator.errors",
                           "orchestrator.report", "orchestrator.report.escape"}, loaded  # fmt: skip
    assert [m for m in _heavy(modules) if m != "rich" and not m.startswith("rich.")] == []


def test_the_table_names_what_the_modules_register() -> None:
    full = typer.main.get_command(build_app(every=True))
    assert set(full.commands) == set(COMMANDS)  # type: ignore[attr-defined]
    for name, cmd in COMMANDS.items():
        one = typer.main.get_command(build_app(name))
        assert name in one.commands, f"{name}: not registered by orchestrator.cli.{cmd.module}"  # type: ignore[attr-defined]
        assert len(cmd.help) <= 100 and "\n" not in cmd.help


def test_a_command_loads_its_own_module_only(tmp_path: Path) -> None:
    code, modules, output = _run(tmp_path, ["stack", "list"])
    assert code == 0, output
    others = {f"orchestrator.cli.{c.module}" for c in COMMANDS.values()} - {"orchestrator.cli.stack"}
    assert sorted(others & modules) == []


def test_the_command_word_is_found_after_the_root_flags() -> None:
    assert command_of(["-v", "check", "--quick", "node1"]) == "check"
    assert command_of(["--verbose", "scale-test", "--plan", "smoke"]) == "scale-test"
    assert command_of(["--help"]) is None and command_of([]) is None
    assert command_of(["--bogus", "check"]) is None  # click refuses the unknown option itself


def test_check_quick_refuses_a_node_name_that_is_not_plain_with_exit_2(tmp_path: Path) -> None:
    code, _, output = _run(tmp_path, ["check", "--quick", "../x", "--dir", str(tmp_path)])
    assert code == 2, output
    assert "error: node name '../x' is not a valid name" in output


def test_the_default_node_is_the_host_name_up_to_its_first_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from orchestrator.cli.plain import short_hostname

    monkeypatch.setattr(socket, "gethostname", lambda: "node3.rack2.cluster.example")
    assert short_hostname() == "node3"
    monkeypatch.setattr(socket, "gethostname", lambda: "node4")
    assert short_hostname() == "node4"
