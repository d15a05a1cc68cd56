"""The one environment allow-list: what orch records and what it hands to Ansible."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.envpolicy import MASK, looks_secret, record_env, recordable, tool_env, value_is_secret
from orchestrator.workloads.probe import ProbeSettings

REPO = Path(__file__).resolve().parents[2]

SECRET_NAMES = [
    "HF_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "NCCL_SOME_TOKEN",
    "GLOO_PASSWORD",
    "TORCH_API_KEY",
    "nccl_lower_token",
    "GITHUBTOKEN",
    "SLURM_AUTH",
    "ANSIBLE_NET_PASSWORD",
    "ANSIBLE_BECOME_PASS",
    "REGISTRY_CREDS",
    # issue 25: the probe recorded these in clear
    "NCCL_KEY_PASSPHRASE",
    "TORCH_BEARER",
    "NCCL_API_JWT",
    "GLOO_STORAGE_SAS",
    "NCCL_BEARERTOKEN",
]
SETTING_NAMES = [
    "NCCL_SOCKET_IFNAME",
    "NCCL_DEBUG",
    "NCCL_IB_HCA",
    "GLOO_SOCKET_IFNAME",
    "TORCH_DISTRIBUTED_DEBUG",
    "OMP_NUM_THREADS",
    "MASTER_ADDR",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_credential_names_are_never_recordable(name: str) -> None:
    assert looks_secret(name)
    assert not recordable(name)
    assert record_env({name: "canary"}) == {name: MASK}


@pytest.mark.parametrize("name", SETTING_NAMES)
def test_transport_settings_are_recorded_with_their_values(name: str) -> None:
    assert not looks_secret(name)
    assert record_env({name: "eth0"}) == {name: "eth0"}


def test_names_outside_the_allow_list_are_recorded_by_name_only() -> None:
    rec = record_env({"MY_APP_SETTING": "x", "NCCL_DEBUG": "INFO"})
    assert rec == {"MY_APP_SETTING": MASK, "NCCL_DEBUG": "INFO"}


def test_prefix_filter() -> None:
    env = {"NCCL_DEBUG": "INFO", "NCCL_SOME_TOKEN": "canary", "HOME": "/root", "GLOO_SOCKET_IFNAME": "fab0"}
    assert record_env(env, prefixes=("NCCL_", "GLOO_")) == {
        "GLOO_SOCKET_IFNAME": "fab0",
        "NCCL_DEBUG": "INFO",
        "NCCL_SOME_TOKEN": MASK,
    }


def test_paths_and_switches_named_after_credentials_are_not_credentials() -> None:
    for name in ("ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_PRIVATE_KEY_FILE", "SSH_AUTH_SOCK",
                 "ANSIBLE_HOST_KEY_CHECKING"):  # fmt: skip
        assert not looks_secret(name), name


def test_tool_env_keeps_what_ansible_needs_and_nothing_else() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "SSH_AUTH_SOCK": "/run/agent.sock",
        "ANSIBLE_CONFIG": "/etc/ansible.cfg",
        "ANSIBLE_VAULT_PASSWORD_FILE": "/root/.vault",
        "ANSIBLE_NET_PASSWORD": "canary1",
        "HF_TOKEN": "canary2",
        "AWS_SECRET_ACCESS_KEY": "canary3",
        "NCCL_SOME_TOKEN": "canary4",
        "NCCL_DEBUG": "INFO",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    out = tool_env(env)
    assert set(out) == {"PATH", "HOME", "LANG", "LC_ALL", "SSH_AUTH_SOCK", "ANSIBLE_CONFIG",
                        "ANSIBLE_VAULT_PASSWORD_FILE"}  # fmt: skip
    assert not any(v.startswith("canary") for v in out.values())


def test_probe_record_masks_secret_plan_variables() -> None:
    s = ProbeSettings(extra_env={"NCCL_SOME_TOKEN": "canary", "NCCL_DEBUG": "WARN"})
    rec = s.record()
    assert rec["env.NCCL_SOME_TOKEN"] == MASK
    assert rec["env.NCCL_DEBUG"] == "WARN"
    assert rec["env.GLOO_SOCKET_IFNAME"] == "fab0"
    assert "canary" not in repr(rec)
    # The workers still get the real value: only the record hides it.
    assert s.env()["NCCL_SOME_TOKEN"] == "canary"


@pytest.mark.slow
def test_probe_heartbeat_records_secret_variables_by_name_only(tmp_path: Path) -> None:
    """A real 1-rank probe (gloo, torch on CPU) with a secret NCCL_* variable in its environment."""
    pytest.importorskip("torch")
    canary = f"ncclcanary{secrets.token_hex(6)}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "NCCL_SOME_TOKEN": canary,
        "NCCL_DEBUG": "WARN",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    out = tmp_path / "hb"
    subprocess.run(
        [sys.executable, "-m", "orchestrator.workloads.probe", "--out", str(out), "--max-steps", "2"],
        env=env, check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    data = (out / "hb-rank0.jsonl").read_bytes()
    assert canary.encode() not in data
    start = json.loads(data.splitlines()[0])
    assert start["settings"]["NCCL_SOME_TOKEN"] == MASK
    assert start["settings"]["NCCL_DEBUG"] == "WARN"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "value",
    [
        "postgres://u:pw@h/db",
        "postgresql://orch:hunter2@[::1]:5432/orch",
        "https://user:tok@registry.example/v2",
        "redis://:pw@cache:6379/0",
        "postgresql://u:pw@[::1/db",  # malformed: still treated as a secret
    ],
)
def test_a_url_with_a_password_is_a_secret_whatever_its_name(value: str) -> None:
    """issue 25: NCCL_/TORCH_ settings were recorded in clear when their value was a DSN."""
    assert value_is_secret(value)
    assert record_env({"NCCL_DEBUG_URL": value, "TORCH_STORE": value}) == {
        "NCCL_DEBUG_URL": MASK,
        "TORCH_STORE": MASK,
    }
    assert "ANSIBLE_DSN_X" not in tool_env({"ANSIBLE_DSN_X": value, "ANSIBLE_CACHE_URL": value})
    assert tool_env({"ANSIBLE_CACHE_URL": value}) == {}


@pytest.mark.parametrize("value", ["http://host:8000/v1", "tcp://10.0.0.1:29500", "user@host", "eth0"])
def test_a_url_without_a_password_is_recorded(value: str) -> None:
    assert not value_is_secret(value)
    assert record_env({"NCCL_X": value}) == {"NCCL_X": value}
