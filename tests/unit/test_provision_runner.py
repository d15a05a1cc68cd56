"""ansible-runner wrapper: pure builders, event parsing, and a secrets canary through a real run."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.provision import runner as R


def _req(tmp_path: Path, **over: object) -> R.PlaybookRequest:
    doc: dict[str, object] = {
        "playbook": "p.yml",
        "playbooks_dir": tmp_path / "pb",
        "inventory": tmp_path / "hosts",
        "work_dir": tmp_path / "work",
    }
    doc.update(over)
    return R.PlaybookRequest.model_validate(doc)


def test_kwargs_never_write_env_files_and_keep_host_keys(tmp_path: Path) -> None:
    kw = R.runner_kwargs(_req(tmp_path, check=True, limit="node1"))
    assert kw["suppress_env_files"] is True
    assert kw["fact_cache_type"] == "memory"
    assert kw["cmdline"] == "--check --diff"
    assert kw["limit"] == "node1"
    assert kw["passwords"] is None
    # ansible-runner turns host key checking off when the variable is unset: orch sets it.
    assert kw["envvars"]["ANSIBLE_HOST_KEY_CHECKING"] in ("True", os.environ.get("ANSIBLE_HOST_KEY_CHECKING"))
    assert kw["envvars"]["ANSIBLE_ROLES_PATH"].endswith("pb/roles")


def test_become_password_goes_to_pexpect_only(tmp_path: Path) -> None:
    req = _req(tmp_path, become_password="s3cr3t")
    kw = R.runner_kwargs(req)
    assert "--ask-become-pass" in kw["cmdline"]
    assert list(kw["passwords"].values()) == ["s3cr3t"]
    assert "s3cr3t" not in json.dumps({k: v for k, v in kw.items() if k != "passwords"})
    assert "s3cr3t" not in repr(req)


def test_vault_password_is_a_secret_value(tmp_path: Path) -> None:
    vf = tmp_path / "vault"
    vf.write_text("vault-canary\n")
    req = _req(tmp_path, vault_password_file=vf)
    assert R.secret_values(req) == ["vault-canary"]
    assert "--vault-password-file" in R.build_cmdline(req)


def test_scrub_nested() -> None:
    doc = {"a": ["x canary y", {"canary": 1}], "b": 3}
    assert R.scrub(doc, ["canary"]) == {"a": [f"x {R.MASK} y", {R.MASK: 1}], "b": 3}


def _ev(event: str, host: str, **res: object) -> dict[str, object]:
    return {"event": event, "event_data": {"host": host, "task": "t", "res": res}}


def test_outcomes_per_host_with_first_failure_message() -> None:
    events = [
        _ev("runner_on_ok", "n1", changed=True),
        _ev("runner_on_failed", "n2", msg="no supported GPU: none"),
        _ev("runner_on_failed", "n2", msg="later"),
        _ev("runner_on_unreachable", "n3", msg="ssh: connect refused"),
        {
            "event": "playbook_on_stats",
            "event_data": {
                "ok": {"n1": 3, "n2": 1},
                "changed": {"n1": 1},
                "failures": {"n2": 1},
                "dark": {"n3": 1},
            },
        },
    ]
    out = R.outcomes(events)
    assert out["n1"].status == "changed" and out["n1"].changed == 1
    assert out["n2"].status == "failed" and out["n2"].message == "no supported GPU: none"
    assert out["n3"].status == "unreachable"
    assert R.host_event(events[0]) is not None and R.host_event(events[0]).status == "changed"  # type: ignore[union-attr]
    assert R.host_event({"event": "playbook_on_start"}) is None


def test_strip_command_env(tmp_path: Path) -> None:
    f = tmp_path / "command"
    f.write_text(json.dumps({"command": ["ansible-playbook"], "env": {"AWS_SECRET": "canary"}}))
    R.strip_command_env(f)
    assert "canary" not in f.read_text() and "AWS_SECRET" in f.read_text()


@pytest.mark.slow
def test_secrets_canary_never_lands_in_artifacts(tmp_path: Path) -> None:
    """A real ansible-runner run on localhost: no_log output, a vault password and env never leak."""
    pb = tmp_path / "pb"
    pb.mkdir()
    (pb / "p.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: secret task\n      ansible.builtin.command: echo CANARY-NOLOG-7f3a\n"
        "      no_log: true\n      changed_when: false\n"
        "    - name: fail with a message\n      ansible.builtin.fail:\n        msg: failing on purpose\n"
    )
    inv = tmp_path / "hosts"
    inv.write_text("localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n")
    vf = tmp_path / "vault"
    vf.write_text("CANARY-VAULT-91bc\n")
    seen: list[R.HostEvent] = []
    os.environ["ORCH_TEST_CANARY"] = "CANARY-VAULT-91bc"
    try:
        res = R.execute(_req(tmp_path, vault_password_file=vf), seen.append)
    finally:
        del os.environ["ORCH_TEST_CANARY"]
    assert res.hosts["localhost"].status == "failed"
    assert res.hosts["localhost"].message == "failing on purpose"
    assert any(e.status == "failed" for e in seen)
    for f in (tmp_path / "work").rglob("*"):
        if f.is_file():
            text = f.read_text(errors="replace")
            assert "CANARY-NOLOG-7f3a" not in text, f
            assert "CANARY-VAULT-91bc" not in text, f


def test_ssh_keepalives_so_a_stale_control_master_cannot_hang_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    args = R.build_envvars(_req(tmp_path))["ANSIBLE_SSH_ARGS"]
    assert "ControlMaster=auto" in args and "ServerAliveInterval=" in args and "ServerAliveCountMax=" in args
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", "-o ControlMaster=no")
    assert R.build_envvars(_req(tmp_path))["ANSIBLE_SSH_ARGS"] == "-o ControlMaster=no"


def test_user_host_key_policy_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    assert R.build_envvars(_req(tmp_path))["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert R.build_envvars(_req(tmp_path))["ANSIBLE_HOST_KEY_CHECKING"] == "False"


def test_ansible_env_drops_what_runner_copied_from_orch_unless_allow_listed() -> None:
    parent = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "HF_TOKEN": "canary1",
        "AWS_SECRET_ACCESS_KEY": "canary2",
        "NCCL_SOME_TOKEN": "canary3",
        "ANSIBLE_NET_PASSWORD": "canary4",
        "ANSIBLE_CONFIG": "/etc/a.cfg",
        "PYTHONPATH": "/somewhere",
    }
    # What ansible-runner prepares: a copy of os.environ, then its own and orch's settings.
    prepared = {
        **parent,
        "PATH": "/venv/bin:/usr/bin",
        "ANSIBLE_STDOUT_CALLBACK": "awx_display",
        "ANSIBLE_CALLBACK_PLUGINS": "/x/callbacks",
        "RUNNER_OMIT_EVENTS": "False",
    }
    out = R.ansible_env(prepared, parent)
    assert out == {
        "PATH": "/venv/bin:/usr/bin",
        "HOME": "/root",
        "ANSIBLE_CONFIG": "/etc/a.cfg",
        "ANSIBLE_STDOUT_CALLBACK": "awx_display",
        "ANSIBLE_CALLBACK_PLUGINS": "/x/callbacks",
        "RUNNER_OMIT_EVENTS": "False",
    }


def test_scrub_artifacts_before_a_run_cleans_what_a_killed_run_left(tmp_path: Path) -> None:
    old = tmp_path / "work" / "artifacts" / "old"
    old.mkdir(parents=True)
    (old / "command").write_text(json.dumps({"command": ["x"], "env": {"HF_TOKEN": "canary"}}))
    (old / "stdout").write_text("become pw: s3cr3t\n")
    R.scrub_artifacts(tmp_path / "work", ["s3cr3t"])
    assert "canary" not in (old / "command").read_text()
    assert "s3cr3t" not in (old / "stdout").read_text()


_LOCAL_INV = "localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"


@pytest.mark.slow
def test_ansible_never_sees_orch_secrets_and_the_command_file_never_holds_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the play runs (before orch could strip anything), Ansible's own environment and the
    command file ansible-runner wrote at its start are read by the play itself."""
    canary = f"hfcanary{secrets.token_hex(6)}"
    monkeypatch.setenv("HF_TOKEN", canary)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", canary)
    pb = tmp_path / "pb"
    pb.mkdir()
    cmd = tmp_path / "work" / "artifacts" / "run" / "command"
    (pb / "p.yml").write_text(textwrap.dedent(f"""\
        - hosts: all
          gather_facts: false
          tasks:
            - name: Ansible's environment has no secret of orch's
              ansible.builtin.assert:
                that:
                  - lookup('env', 'HF_TOKEN') == ''
                  - lookup('env', 'AWS_SECRET_ACCESS_KEY') == ''
                  - lookup('env', 'HOME') != ''
            - name: the command file, as written at the start, holds no secret
              ansible.builtin.assert:
                that:
                  - "'{canary[:8]}' + '{canary[8:]}' not in lookup('file', '{cmd}')"
                  - "'HOME' in lookup('file', '{cmd}')"
        """))  # fmt: skip
    (tmp_path / "hosts").write_text(_LOCAL_INV)
    res = R.execute(_req(tmp_path))
    assert res.hosts["localhost"].status == "ok", res.hosts["localhost"].message
    assert res.hosts["localhost"].ok == 2


_DRIVER = """
import sys
from pathlib import Path
from orchestrator.provision.runner import PlaybookRequest, execute
req = PlaybookRequest(playbook="p.yml", playbooks_dir=Path(sys.argv[1]), inventory=Path(sys.argv[2]),
                      work_dir=Path(sys.argv[3]))
try:
    execute(req)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.slow
def test_sigint_stops_the_whole_playbook_tree(tmp_path: Path) -> None:
    """Ansible's workers run in sessions of their own: the interrupt must reach them too."""
    pb = tmp_path / "pb"
    pb.mkdir()
    marker = f"orchsleep{secrets.token_hex(4)}"
    (pb / "p.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        f"    - ansible.builtin.command:\n        argv: [bash, -c, 'sleep 300; true', {marker}]\n"
    )
    (tmp_path / "hosts").write_text(_LOCAL_INV)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(pb), str(tmp_path / "hosts"), str(tmp_path / "work")], env=env
    )
    tree: list[psutil.Process] = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(marker in " ".join(p.cmdline()) for p in tree):
        time.sleep(0.3)
        try:
            tree = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            tree = []
        tree = [p for p in tree if _alive(p)]
    assert any(marker in " ".join(p.cmdline()) for p in tree), "the play never started its task"
    # The premise: the play's processes span more than one session, so no single killpg stops them.
    assert len({_sid(p) for p in tree} - {None}) >= 2
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    _, alive = psutil.wait_procs(tree, timeout=10)
    left = [(p.pid, " ".join(p.cmdline())) for p in alive if _alive(p)]
    for p in alive:
        p.kill()
    assert not left, left


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _sid(p: psutil.Process) -> int | None:
    try:
        return os.getsid(p.pid)
    except OSError:
        return None
