"""The probe scale-test sends over SSH: the playbook's own probe, quoted, fed on stdin."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from orchestrator.models.cluster import Node
from orchestrator.provision.fingerprint import from_probe
from orchestrator.provision.quickprint import PROBE, probe_script
from orchestrator.stacks import load_stack


def test_script_quotes_arguments_and_ends_heredoc() -> None:
    node = Node(name="node1", address="198.18.0.11", python_interpreter="/usr/bin/python3")
    script = probe_script(node, load_stack("cpu-gloo"), "print('x')")
    first, *body = script.splitlines()
    assert shlex.split(first.split("<<")[0]) == [
        "/usr/bin/python3", "-", "--venv", "/opt/orch/venv", "--bench-dir", "/opt/orch"
    ]  # fmt: skip
    end = first.split("<<")[1].strip("'")
    assert body == ["print('x')", end]
    assert end != probe_script(node, load_stack("cpu-gloo"), "").splitlines()[0].split("<<")[1].strip("'")


def test_script_runs_the_real_probe_in_a_shell(tmp_path: Path) -> None:
    node = Node(name="here", address="127.0.0.1", python_interpreter=sys.executable)
    script = probe_script(node, load_stack("cpu-gloo"), PROBE.read_text())
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    fp = from_probe("here", json.loads(proc.stdout))
    assert fp.system_python == ".".join(map(str, sys.version_info[:3]))
    assert fp.kernel
