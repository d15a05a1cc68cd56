"""ansible-runner wrapper: pure builders, event parsing, and a secrets canary through a real run."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert "ANSIBLE_HOST_KEY_CHECKING" not in kw["envvars"]
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
    import os

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
