"""Inventory options that make ssh or Ansible run a command on the controller are refused unless
the inventory opts in (orch_allow_controller_commands=true); the refusal names file, host and
variable. Loading never runs them (the canary file never appears)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import InventoryError
from orchestrator.inventory import ALLOW_COMMANDS_VAR, load_inventory


def _refused(path: Path) -> str:
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.exit_code == 2
    return str(info.value)


SSH_VARS = ["ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args",
            "ansible_sftp_extra_args", "ansible_scp_extra_args"]  # fmt: skip
SSH_FORMS = [
    "-o ProxyCommand=touch {c}",
    "-oProxyCommand=touch {c}",
    '-o "ProxyCommand touch {c}"',
    "-o proxycommand=touch {c}",
    "-o PROXYCOMMAND touch {c}",
    "-C -vo ProxyCommand=touch {c}",
    "-o LocalCommand=touch {c} -o PermitLocalCommand=yes",
    "-oPermitLocalCommand=yes",
    "-o permitlocalcommand yes",
    "-o KnownHostsCommand=touch {c}",
    "-o UserKnownHostsFile=/k -o ProxyCommand=touch {c}",
    # Issue 25: the deny-list let these through; the allow-list refuses them (ssh loads the
    # library, or reads a config or another host that can run anything, as the user, often root).
    "-o PKCS11Provider={c}.so",
    "-oPKCS11Provider={c}.so",
    "-I {c}.so",
    "-CI{c}.so",
    "-o SecurityKeyProvider={c}.so",
    "-o ProxyJump=bastion",
    "-J bastion",
    "-F {c}.conf",
    "-o Include={c}.conf",
    "-E {c}.log",
    "-o ForwardAgent=yes",
    "-o UserKnownHostsFile=/k host.example",
]


@pytest.mark.parametrize("var", SSH_VARS)
@pytest.mark.parametrize("form", SSH_FORMS)
def test_ssh_options_that_run_commands_are_refused(tmp_path: Path, var: str, form: str) -> None:
    canary = tmp_path / "CANARY"
    value = form.format(c=canary)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nn1 ansible_host=10.0.0.1\n[gpu:vars]\n{var}='{value}'\n")
    message = _refused(inv)
    assert str(inv) in message and "host n1" in message and var in message
    assert "ssh option" in message and ALLOW_COMMANDS_VAR in message
    assert not canary.exists() and not list(tmp_path.glob("CANARY*"))


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("ansible_python_interpreter", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("ansible_python_interpreter", "{{ q('pipe', 'touch CANARY') }}"),
        ("ansible_python_interpreter", "{% if true %}/usr/bin/python3{% endif %}"),
        ("ansible_python_interpreter", "{{ some_var }}"),
        ("ansible_perl_interpreter", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("ansible_shell_executable", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("ansible_ssh_executable", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("ansible_become_exe", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("ansible_ssh_executable", "/tmp/not-ssh"),
        ("ansible_ssh_common_args", "{{ lookup('pipe', 'touch CANARY') }}"),
    ],
)
def test_templates_in_program_paths_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, var: str, value: str
) -> None:
    monkeypatch.chdir(tmp_path)
    inv = tmp_path / "hosts.yml"
    inv.write_text(f'all:\n  hosts:\n    n1:\n      ansible_host: 10.0.0.1\n      {var}: "{value}"\n')
    message = _refused(inv)
    assert str(inv) in message and "host n1" in message and var in message
    # A lookup orch itself would render is refused while rendering (never run, even with the
    # opt-in); a template Ansible renders itself is refused naming the opt-in.
    assert (("template" in message or "other than ssh" in message) and ALLOW_COMMANDS_VAR in message) or (
        "lookups are not run while orch reads an inventory" in message
    )
    assert not (tmp_path / "CANARY").exists()


@pytest.mark.parametrize("opt_in", ["true", "True", "yes", "1"])
def test_the_inventory_can_opt_in(tmp_path: Path, opt_in: str) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu]\nn1 ansible_host=10.0.0.1 ansible_ssh_common_args='-o ProxyCommand=\"nc %h %p\"'"
        " ansible_python_interpreter=\"{{ lookup('env', 'PY') }}\"\n"
        f"[gpu:vars]\n{ALLOW_COMMANDS_VAR}={opt_in}\n"
    )
    node = load_inventory(inv).node("n1")
    # Kept as written, for Ansible; orch's own SSH never runs ProxyCommand.
    assert node.python_interpreter == "{{ lookup('env', 'PY') }}"


def test_the_opt_in_is_per_host(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu]\n"
        f"n1 ansible_host=10.0.0.1 ansible_ssh_common_args='-o ProxyCommand=x' {ALLOW_COMMANDS_VAR}=true\n"
        "n2 ansible_host=10.0.0.2 ansible_ssh_common_args='-o ProxyCommand=x'\n"
    )
    message = _refused(inv)
    assert "host n2" in message and "host n1" not in message


def test_a_bad_opt_in_value_is_refused(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nn1 ansible_host=10.0.0.1 {ALLOW_COMMANDS_VAR}=maybe\n")
    assert ALLOW_COMMANDS_VAR in _refused(inv)


@pytest.mark.parametrize(
    "line",
    [
        "n1 ansible_ssh_common_args='-o UserKnownHostsFile=/k -o StrictHostKeyChecking=yes'",
        # Ansible's own default ansible_ssh_args, and the usual connection settings.
        "n1 ansible_ssh_args='-C -o ControlMaster=auto -o ControlPersist=60s'",
        "n1 ansible_ssh_common_args='-p 2222 -l root -i /k/id -o ConnectTimeout=5 -o ServerAliveInterval=10'",
        "n1 ansible_ssh_common_args='-o \"UserKnownHostsFile /k\" -o Ciphers=aes128-ctr -4'",
        "n1 ansible_python_interpreter=/usr/bin/python3",
        'n1 ansible_python_interpreter="{{ ansible_playbook_python }}"',
        "n1 ansible_ssh_extra_args='-o ControlMaster=auto'",
        f"n1 {ALLOW_COMMANDS_VAR}=false",
    ],
)
def test_ordinary_options_still_load(tmp_path: Path, line: str) -> None:
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\n{line}\n")
    assert load_inventory(inv).names == ["n1"]


@pytest.mark.parametrize(
    "args",
    ["-o PKCS11Provider={c}.so", "-I {c}.so", "-o SecurityKeyProvider={c}.so", "-o ProxyJump=bastion"],
)
def test_orch_fingerprint_refuses_the_probes_ssh_options_before_any_ssh(tmp_path: Path, args: str) -> None:
    """issue 25: `orch fingerprint` with these options made ssh load the library as root. Now the
    command ends with exit 2 naming the option, before Ansible or ssh start; nothing is loaded."""
    canary = tmp_path / "CANARY"
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"[gpu]\nn1 ansible_host=10.0.0.1 ansible_ssh_common_args='{args.format(c=canary)}'\n")
    argv = ["fingerprint", "-i", str(inv), "--stack", "cpu-gloo", "--out", str(tmp_path / "runs")]
    r = subprocess.run([sys.executable, "-m", "orchestrator", *argv],
                       capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    option = args.split()[1].split("=")[0] if args.startswith("-o") else args.split()[0]
    assert r.returncode == 2 and option in r.stderr and ALLOW_COMMANDS_VAR in r.stderr, r.stderr
    assert not list(tmp_path.glob("CANARY*")) and not (tmp_path / "runs").exists()
