"""Files in reachable folders: planted symlinks, linked run-folder files, modes whatever the umask,
the private SSH control folder.

- Symlinks are planted at every name the old writers used (`.{name}.{pid}.tmp` of atomic_write,
  `.{name}.tmp` of the lab, `{name}.tmp` of fingerprint --save) and at the target itself; the
  link's target (a "victim" file) keeps its bytes, for atomic_write and for `orch report -o`.
- fingerprint.json, stack.json, drift.json, plan.json, a step's result.json and a log that are
  symlinks to a secret file are not read: the secret is in no report format, and a warning names
  each file.
- Under umask 000 and 077: run folders 0700, their files 0600, the store with its -wal/-shm 0600,
  reports 0600 (0750/0640 with ORCH_GROUP_READABLE=1), the lab's slurmdbd.conf 0600, munge key
  0400, and every temporary file 0600 from its creation.
"""

from __future__ import annotations

import getpass
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_injection import orch
from test_store_build import make_run

from orchestrator import safefs
from orchestrator.errors import ConfigError, InfraError
from orchestrator.lab import files as labfiles
from orchestrator.provision import fingerprint as fpmod
from orchestrator.provision.runner import PlaybookRequest, build_envvars
from orchestrator.report.formats import FORMATS, render
from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir, atomic_write

VICTIM = "victim: must not change\n"
CANARY = "CANARY-5f1c-registry-token"


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def plant(target: Path, victim: Path) -> list[Path]:
    """Symlinks to victim at the names the old writers used for target, and at target itself."""
    names = [f".{target.name}.{os.getpid()}.tmp", f".{target.name}.tmp", f"{target.name}.tmp", target.name]
    links = [target.with_name(n) for n in names]
    for link in links:
        link.symlink_to(victim)
    return links


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "elsewhere" / "victim.txt"
    v.parent.mkdir()
    v.write_text(VICTIM)
    return v


def test_atomic_write_follows_no_planted_link(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "out" / "report.html"
    target.parent.mkdir()
    links = plant(target, victim)
    atomic_write(target, "<p>new</p>")
    assert victim.read_text() == VICTIM
    assert not target.is_symlink() and target.read_text() == "<p>new</p>"
    assert all(p.is_symlink() for p in links[:-1])  # the temporary names were not used at all


def test_fingerprint_save_follows_no_planted_link(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "fp.json"
    plant(target, victim)
    fpmod.save(fpmod.FingerprintSet.model_validate({"stack": "cpu-gloo", "nodes": {}}), target)
    assert victim.read_text() == VICTIM and not target.is_symlink()


def test_lab_writer_follows_no_planted_link(tmp_path: Path, victim: Path) -> None:
    target = tmp_path / "slurmdbd.conf"
    plant(target, victim)
    labfiles.write_slurmdbd_conf(target, "StoragePass=secret\n")
    assert victim.read_text() == VICTIM and target.read_text() == "StoragePass=secret\n"


def test_orch_report_out_follows_no_planted_link(
    tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = make_run(tmp_path, "r1")
    out = tmp_path / "reports" / "r1.md"
    out.parent.mkdir()
    plant(out, victim)
    rc, _, err = orch(
        ["report", str(run), "-f", "md", "-o", str(out), "--store", str(tmp_path / "s.db")], capsys
    )
    assert rc == 0, err
    assert victim.read_text() == VICTIM
    assert not out.is_symlink() and out.read_text().startswith("# orch scale-test r1")


def test_journal_append_refuses_a_planted_link(tmp_path: Path, victim: Path) -> None:
    rd = RunDir.create(tmp_path, "r1")
    rd.journal_path.symlink_to(victim)
    with pytest.raises(InfraError, match=r"journal\.jsonl"):
        rd.event("run_started")
    assert victim.read_text() == VICTIM
    fifo = RunDir.create(tmp_path, "r2")
    os.mkfifo(fifo.journal_path)  # would block a plain open for writing forever
    with pytest.raises(InfraError, match=r"journal\.jsonl"):
        fifo.event("run_started")


LINKED = ["fingerprint.json", "stack.json", "drift.json", "plan.json", "steps/n1xg1/result.json"]


@pytest.fixture
def linked_run(tmp_path: Path) -> Path:
    """A finished run whose JSON files (and one log) are links to a secret JSON file."""
    secret = tmp_path / "home" / ".docker-config.json"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"auths": {"registry.example": {"auth": CANARY}}}))
    run = make_run(tmp_path / "runs", "r1", finished=False)
    for name in LINKED:
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(secret)
    (run / "steps" / "n1xg1" / "leak.log").symlink_to(secret)
    (run / "steps" / "n1xg2" / "up.log").symlink_to(Path("..") / ".." / ".." / "home" / ".docker-config.json")
    return run


def test_linked_run_files_are_not_read(linked_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = load_run(linked_run)
    for name in LINKED:
        assert any(w.startswith(f"{name}: not read: is a symbolic link") for w in rec.warnings), rec.warnings
    assert rec.fingerprint is None and rec.plan is None
    for fmt in FORMATS:
        text = render(rec, fmt, linked_run)
        assert CANARY not in text, fmt
        assert "leak.log" not in text and "up.log" not in text, fmt
    assert "fingerprint.json: not read" in render(rec, "html", linked_run)
    warned = json.loads(render(rec, "json", linked_run))["warnings"]
    assert "fingerprint.json: not read: is a symbolic link" in warned
    _, out, err = orch(["runs", "show", str(linked_run), "--store", str(linked_run.parent / "s.db")], capsys)
    assert "warning: fingerprint.json: not read: is a symbolic link" in err
    assert CANARY not in out + err


def test_the_secret_is_there_to_be_found(linked_run: Path) -> None:
    """The check above can fail: followed, the links give the canary."""
    assert CANARY in (linked_run / "fingerprint.json").read_text()


def test_a_file_resolving_outside_the_run_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "steps").symlink_to(outside)  # a linked folder, the file itself regular
    with pytest.raises(safefs.NotInside, match="resolves outside"):
        safefs.read_inside(run, run / "steps" / "x.json")
    os.mkfifo(run / "fifo")
    with pytest.raises(safefs.NotInside, match="not a regular file"):
        safefs.read_inside(run, run / "fifo")


# --- modes --------------------------------------------------------------------------------------


@pytest.fixture(params=[0o000, 0o077], ids=["umask000", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.fixture
def born_modes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The mode of every temporary file atomic_write makes, at the moment it is made."""
    seen: list[int] = []
    real = tempfile.mkstemp

    def spy(*a: object, **kw: object) -> tuple[int, str]:
        fd, name = real(*a, **kw)  # type: ignore[call-overload]
        seen.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return fd, name

    monkeypatch.setattr(safefs.tempfile, "mkstemp", spy)
    return seen


@pytest.mark.parametrize("group", [False, True], ids=["private", "group-readable"])
def test_modes_of_run_folder_store_and_reports(
    tmp_path: Path,
    umask: int,
    group: bool,
    born_modes: list[int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if group:
        monkeypatch.setenv(safefs.GROUP_READABLE_ENV, "1")
    else:
        monkeypatch.delenv(safefs.GROUP_READABLE_ENV, raising=False)
    fmode, dmode = (0o640, 0o750) if group else (0o600, 0o700)
    runs = tmp_path / "runs"
    rd = RunDir.create(runs, "r1")
    rd.event("run_started", plan="smoke")
    atomic_write(rd.root / "inventory.json", "{}")
    assert _mode(runs) == dmode and _mode(rd.root) == dmode
    assert _mode(rd.journal_path) == fmode and _mode(rd.root / "inventory.json") == fmode

    run = make_run(tmp_path / "more", "r2")
    store = runs / "orch.db"
    with ResultsStore.open(store) as db:
        db.ingest(run)
        for suffix in ("", "-wal", "-shm"):
            assert _mode(Path(f"{store}{suffix}")) == fmode, suffix

    rc, _, err = orch(["report", str(run), "--store", str(store)], capsys)
    assert rc == 0, err
    assert _mode(run / "report.html") == fmode
    assert _mode(run) == dmode and _mode(run / "result.json") == fmode
    assert born_modes and set(born_modes) == {0o600}


def test_lab_secrets_are_born_private(tmp_path: Path, umask: int, born_modes: list[int]) -> None:
    dbd = tmp_path / "slurmdbd.conf"
    labfiles.write_slurmdbd_conf(dbd, "StoragePass=secret\n")
    assert _mode(dbd) == 0o600
    key = tmp_path / "munge" / "munge.key"
    key.parent.mkdir()
    labfiles.write_munge_key(key, owner=getpass.getuser())
    assert _mode(key) == 0o400 and key.stat().st_size == 1024
    assert born_modes == [0o600, 0o600]  # nothing was ever readable by others, not even for a moment


# --- the SSH control folder ----------------------------------------------------------------------


def test_ssh_control_folder_is_private_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    os.chmod(xdg, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    req = PlaybookRequest(
        playbook="site.yml", playbooks_dir=tmp_path, inventory=tmp_path / "i", work_dir=tmp_path
    )
    cp = Path(build_envvars(req)["ANSIBLE_SSH_CONTROL_PATH_DIR"])
    assert cp.is_relative_to(xdg) and not cp.exists()  # the builder is pure
    assert safefs.runtime_dir("cp") == cp
    assert _mode(cp) == 0o700 and _mode(cp.parent) == 0o700

    os.chmod(cp, 0o755)
    with pytest.raises(ConfigError, match="0755: others may enter"):
        safefs.runtime_dir("cp")
    os.rmdir(cp)
    cp.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="not a link"):
        safefs.runtime_dir("cp")


def test_ssh_control_folder_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if os.getuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    planted = tmp_path / f"orch-{os.getuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)  # nobody got there first
    with pytest.raises(ConfigError, match="owned by uid 65534"):
        safefs.runtime_dir("cp")
