"""roles/workload_env's wheelhouse copy, run for real on localhost through ansible-runner: the host
checks the controller's SHA256SUMS against the wheels it holds (sha256sum) and only the wheels it
lacks, or holds with other bytes, are copied; a wheelhouse it already holds (a rollback to a stack
it had before) copies nothing, and the wheels of another stack stay beside this one's.

On localhost the controller's wheelhouse is at the same path ("shared", no copy at all): the tests
say the host cannot see it, as a node that does not share the controller's filesystem."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import run_play_on_localhost

from orchestrator.provision import runner as R
from orchestrator.stacks import PLAYBOOKS_DIR

ROLE = PLAYBOOKS_DIR / "roles" / "workload_env"
FIRST = "Decide whether the host uses a wheelhouse of its own"
LAST = "Copy the wheels the host lacks"


def _copy_tasks() -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    return tasks[names.index(FIRST) : names.index(LAST) + 1]


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
    """The controller's wheelhouse: exactly these wheels and their SHA256SUMS."""
    source.mkdir(exist_ok=True)
    for old in source.glob("*.whl"):
        old.unlink()
    for name, data in wheels.items():
        (source / name).write_bytes(data)
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in sorted(wheels.items()))
    (source / "SHA256SUMS").write_text(sums)


def _held(dest: Path) -> dict[str, tuple[int, int]]:
    """Each wheel on the host with its inode and mtime: a copy replaces the file (a new inode)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(dest.glob("*.whl"))}


@pytest.mark.slow
def test_only_the_wheels_the_host_lacks_or_holds_otherwise_are_copied(tmp_path: Path) -> None:
    source, dest = tmp_path / "controller", tmp_path / "host" / "wheelhouse"
    gloo = {"a-1-py3-none-any.whl": b"a" * 100, "b-1-py3-none-any.whl": b"b" * 100}
    _wheelhouse(source, gloo)
    first = _run(tmp_path, source, dest, "1")
    assert first.hosts["localhost"].status == "changed", first.hosts["localhost"]
    assert {p.name: p.read_bytes() for p in dest.glob("*.whl")} == gloo

    # the same wheelhouse again: nothing copied, nothing changed
    before = _held(dest)
    second = _run(tmp_path, source, dest, "2")
    assert second.hosts["localhost"].status == "ok", second.hosts["localhost"]
    assert _held(dest) == before

    # another stack's wheelhouse (b shared, c new): only c copied; a stays beside them
    serve = {"b-1-py3-none-any.whl": b"b" * 100, "c-1-py3-none-any.whl": b"c" * 100}
    _wheelhouse(source, serve)
    third = _run(tmp_path, source, dest, "3")
    assert third.hosts["localhost"].status == "changed"
    after = _held(dest)
    assert set(after) == {"a-1-py3-none-any.whl", "b-1-py3-none-any.whl", "c-1-py3-none-any.whl"}
    assert after["a-1-py3-none-any.whl"] == before["a-1-py3-none-any.whl"]
    assert after["b-1-py3-none-any.whl"] == before["b-1-py3-none-any.whl"]

    # back to the first stack (a rollback): the host holds all of it, no wheel copied (only the
    # sums it compares with changed)
    _wheelhouse(source, gloo)
    _run(tmp_path, source, dest, "4")
    assert _held(dest) == after

    # a wheel cut short, and one gone: each copied again with the controller's bytes, the other not
    (dest / "a-1-py3-none-any.whl").write_bytes(b"a" * 10)
    (dest / "b-1-py3-none-any.whl").unlink()
    kept = _held(dest)["c-1-py3-none-any.whl"]
    fifth = _run(tmp_path, source, dest, "5")
    assert fifth.hosts["localhost"].status == "changed"
    assert (dest / "a-1-py3-none-any.whl").read_bytes() == gloo["a-1-py3-none-any.whl"]
    assert (dest / "b-1-py3-none-any.whl").read_bytes() == gloo["b-1-py3-none-any.whl"]
    assert _held(dest)["c-1-py3-none-any.whl"] == kept


@pytest.mark.slow
def test_a_listed_name_that_is_not_a_wheel_in_the_wheelhouse_is_never_copied(tmp_path: Path) -> None:
    """The names copied come from sha256sum's report: only plain wheel names, never a path."""
    source, dest = tmp_path / "controller", tmp_path / "host" / "wheelhouse"
    _wheelhouse(source, {"a-1-py3-none-any.whl": b"a"})
    (tmp_path / "x.whl").write_bytes(b"x")  # what controller/../x.whl names
    with (source / "SHA256SUMS").open("a") as sums:
        sums.write(f"{hashlib.sha256(b'x').hexdigest()}  ../x.whl\n")
    _run(tmp_path, source, dest, "1")
    assert (dest / "a-1-py3-none-any.whl").is_file()
    assert not (dest.parent / "x.whl").exists() and not (dest / "x.whl").exists()
