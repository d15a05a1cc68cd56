"""roles/workload_env's lab-model tasks, run for real on localhost through ansible-runner, with a
stand-in for the venv's Python (the real builder with a fake, fast build): changed once, then ok;
a pinned hash other than the build's stops the host; a stack without a lab model skips them."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import run_play_on_localhost

from orchestrator.provision import runner as R
from orchestrator.stacks import PLAYBOOKS_DIR, load_stack
from orchestrator.workloads.labmodel import tree_hash

ROLE = PLAYBOOKS_DIR / "roles" / "workload_env"
REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!{python}
import os, sys
sys.path.insert(0, {repo!r})
from orchestrator.workloads import labmodel as L

def build(recipe, folder):
    (folder / "config.json").write_text('{{"hidden": %d}}' % recipe.hidden)
    (folder / "model.safetensors").write_bytes(b"weights")
    with open({log!r}, "a") as f:
        f.write(os.environ.get("HF_HUB_OFFLINE", "unset") + "\\n")

L.build_into = build
assert sys.argv[1:3] == ["-m", "orchestrator.workloads.labmodel"], sys.argv
sys.exit(L.main(sys.argv[3:]))
"""


def _lab_model_tasks() -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    mine = [t for t in tasks if "lab model" in t["name"] or "the stack pins" in t["name"]]
    assert len(mine) == 2
    return mine


def _run(tmp_path: Path, stack: dict[str, Any], tag: str) -> R.PlaybookResult:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    keep = ("workload_env_prefix", "workload_env_lab_model", "workload_env_model_record")
    play = [
        {
            "name": "lab model",
            "hosts": "all",
            "gather_facts": False,
            "vars": {**{k: defaults[k] for k in keep}, "orch_stack": stack},
            "tasks": _lab_model_tasks(),
        }
    ]
    return run_play_on_localhost(tmp_path, play, tag)


@pytest.mark.slow
def test_the_role_builds_the_lab_model_once_offline_and_stops_on_another_hash(tmp_path: Path) -> None:
    venv, log = tmp_path / "venv", tmp_path / "builds.log"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON.format(python=sys.executable, repo=str(REPO), log=str(log)))
    py.chmod(0o755)
    # the hash the fake build gives, as the stack would pin it
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "config.json").write_text('{"hidden": 64}')
    (ref / "model.safetensors").write_bytes(b"weights")
    pinned, _ = tree_hash(ref)

    stack = load_stack("cpu-serve").model_dump(mode="json")
    stack["python"]["prefix"] = str(venv)
    stack["serving"]["lab_model"].update(path=str(tmp_path / "models" / "lab-tiny"), sha256=pinned)

    first = _run(tmp_path, stack, "1")
    assert first.hosts["localhost"].status == "changed", first.hosts["localhost"]
    record = json.loads((venv / "orch-model.json").read_text())
    assert record["sha256"] == pinned and record["path"] == str(tmp_path / "models" / "lab-tiny")
    assert log.read_text() == "1\n"  # built once, with HF_HUB_OFFLINE=1

    second = _run(tmp_path, stack, "2")
    assert second.hosts["localhost"].status == "ok", second.hosts["localhost"]
    assert log.read_text() == "1\n"  # nothing built again

    stack["serving"]["lab_model"]["sha256"] = "sha256:" + "0" * 64
    third = _run(tmp_path, stack, "3")
    assert third.hosts["localhost"].status == "failed"
    assert f"has {pinned}, the stack pins sha256:{'0' * 64}" in (third.hosts["localhost"].message or "")

    gloo = load_stack("cpu-gloo").model_dump(mode="json")
    gloo["python"]["prefix"] = str(venv)
    fourth = _run(tmp_path, gloo, "4")
    assert fourth.hosts["localhost"].status == "ok" and log.read_text() == "1\n"
