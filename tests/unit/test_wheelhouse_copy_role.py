"""roles/workload_env's wheelhouse copy, run for real on localhost through ansible-runner: a host
that holds a finished copy of the controller's wheelhouse (its record, .orch-copied.SHA256SUMS,
equal to the controller's SHA256SUMS) is not copied to again; a changed wheelhouse or a missing
record (a copy cut short) is copied again, and the record is removed before a
copy and written after it.

On localhost the controller's wheelhouse is at the same path ("shared", no copy at all): the tests
say the host cannot see it, as a node that does not share the controller's filesystem."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import run_play_on_localhost

from orchestrator.provision import runner as R
from orchestrator.stacks import PLAYBOOKS_DIR

ROLE = PLAYBOOKS_DIR / "roles" / "workload_env"
RECORD = ".orch-copied.SHA256SUMS"
FIRST = "Look for the record of a finished copy of this wheelhouse on the host"
LAST = "Record the finished copy of the wheelhouse"


def _copy_tasks() -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    mine = tasks[names.index(FIRST) : names.index(LAST) + 1]
    assert any(t["name"] == "Copy the wheelhouse to the host" for t in mine)
    return mine


def _run(tmp_path: Path, source: Path, dest: Path, tag: str) -> R.PlaybookResult:
    not_shared = {
        "name": "the host cannot see the controller's wheelhouse",
        "ansible.builtin.set_fact": {"workload_env_shared": {"stat": {"exists": False}}},
    }
    play = [
        {
            "name": "wheelhouse copy",
            "hosts": "all",
            "gather_facts": False,
            "vars": {"workload_env_wheelhouse": str(source), "workload_env_local_wheelhouse": str(dest)},
            "tasks": [not_shared, *_copy_tasks()],
        }
    ]
    return run_play_on_localhost(tmp_path, play, tag)


def _wheelhouse(source: Path, wheels: dict[str, bytes]) -> None:
    import hashlib

    source.mkdir(exist_ok=True)
    for name, data in wheels.items():
        (source / name).write_bytes(data)
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in sorted(wheels.items()))
    (source / "SHA256SUMS").write_text(sums)


@pytest.mark.slow
def test_a_finished_copy_is_not_copied_again_and_anything_else_is(tmp_path: Path) -> None:
    source, dest = tmp_path / "controller", tmp_path / "host" / "wheelhouse"
    wheels = {"a-1-py3-none-any.whl": b"a" * 100, "b-1-py3-none-any.whl": b"b" * 100}
    _wheelhouse(source, wheels)

    first = _run(tmp_path, source, dest, "1")
    assert first.hosts["localhost"].status == "changed", first.hosts["localhost"]
    assert (dest / "a-1-py3-none-any.whl").read_bytes() == wheels["a-1-py3-none-any.whl"]
    assert (dest / RECORD).read_text() == (source / "SHA256SUMS").read_text()

    # the same wheelhouse: nothing copied (a copy would put a's bytes back)
    (dest / "a-1-py3-none-any.whl").write_bytes(b"left as it is")
    second = _run(tmp_path, source, dest, "2")
    assert second.hosts["localhost"].status == "ok", second.hosts["localhost"]
    assert (dest / "a-1-py3-none-any.whl").read_bytes() == b"left as it is"

    # a rebuilt wheelhouse (a new wheel, new sums): copied again, the record follows it
    wheels["c-1-py3-none-any.whl"] = b"c" * 100
    _wheelhouse(source, wheels)
    third = _run(tmp_path, source, dest, "3")
    assert third.hosts["localhost"].status == "changed"
    assert (dest / "c-1-py3-none-any.whl").is_file()
    assert (dest / "a-1-py3-none-any.whl").read_bytes() == wheels["a-1-py3-none-any.whl"]
    assert (dest / RECORD).read_text() == (source / "SHA256SUMS").read_text()

    # a copy cut short leaves no record: copied again
    (dest / RECORD).unlink()
    (dest / "b-1-py3-none-any.whl").unlink()
    fourth = _run(tmp_path, source, dest, "4")
    assert fourth.hosts["localhost"].status == "changed"
    assert (dest / "b-1-py3-none-any.whl").read_bytes() == wheels["b-1-py3-none-any.whl"]


def test_the_record_is_removed_before_the_copy_and_written_after_it() -> None:
    """So a copy cut short (orch killed, a host lost) leaves no record, and the next provisioning
    copies again: the three tasks run on the same decision, in this order."""
    tasks = _copy_tasks()
    names = [t["name"] for t in tasks]
    forget, copy, record = (
        names.index("Forget the record of an earlier copy before copying"),
        names.index("Copy the wheelhouse to the host"),
        names.index(LAST),
    )
    assert forget < copy < record
    gone = {"path": f"{{{{ workload_env_local_wheelhouse }}}}/{RECORD}", "state": "absent"}
    assert tasks[forget]["ansible.builtin.file"] == gone
    assert tasks[record]["ansible.builtin.copy"]["dest"].endswith(f"/{RECORD}")
    assert {tasks[i]["when"] for i in (forget, copy, record)} == {"workload_env_copy | bool"}
