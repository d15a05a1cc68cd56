"""roles/slurm_hooks run for real on localhost through ansible-runner, against a temporary
slurm.conf and script folder, with `scontrol reconfigure` off: install writes orch's block and
the three scripts (their commands quoted, `bash -n` clean), --check changes nothing and shows the
diff, a second install changes nothing, remove gives slurm.conf back byte for byte, and a Prolog=
that orch did not write is refused, named."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fakes import run_play_on_localhost

from orchestrator.provision import hooks
from orchestrator.provision import runner as R
from orchestrator.stacks import PLAYBOOKS_DIR

pytestmark = pytest.mark.slow

CONF = (
    "ClusterName=lab\nSlurmctldHost=ctl\n# Prolog=/old/commented-out\n"
    "PrologSlurmctld=/usr/local/ctld.sh\nNodeName=node[1-3] CPUs=2\n"
)
ORCH = "/opt/orch venv/bin/orch"  # a space: the scripts must quote it


def _play(tmp_path: Path, state: str, **more: object) -> list[dict[str, Any]]:
    return [
        {
            "name": "slurm hooks",
            "hosts": "all",
            "gather_facts": False,
            "vars": {
                "slurm_hooks_state": state,
                "slurm_hooks_conf": str(tmp_path / "slurm.conf"),
                "slurm_hooks_dir": str(tmp_path / "hooks"),
                "slurm_hooks_orch": ORCH,
                "slurm_hooks_cert_dir": str(tmp_path / "certs $x"),
                "slurm_hooks_reconfigure": False,
                **more,
            },
            "roles": [{"role": str(PLAYBOOKS_DIR / "roles" / "slurm_hooks")}],
        }
    ]


def _run(tmp_path: Path, state: str, tag: str, *, check: bool = False, **more: object) -> R.PlaybookResult:
    return run_play_on_localhost(tmp_path, _play(tmp_path, state, **more), tag, check=check)


def _status(res: R.PlaybookResult) -> str:
    return res.hosts["localhost"].status


def _refused(res: R.PlaybookResult, line: str) -> None:
    assert _status(res) == "failed"
    assert line in (res.hosts["localhost"].message or ""), res.hosts


def test_install_check_idempotent_and_remove(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF)
    dry = _run(tmp_path, "present", "check", check=True)
    assert _status(dry) == "changed", dry.hosts
    assert conf.read_text() == CONF and not (tmp_path / "hooks").exists()
    shown = "\n".join(hooks.diffs(dry))
    assert "+Prolog=" + str(tmp_path / "hooks" / "prolog.sh") in shown
    assert "+SchedulerParameters=nohold_on_prolog_fail" in shown

    first = _run(tmp_path, "present", "1", slurm_hooks_pubkey="/etc/orch/cert key.pem")
    assert _status(first) == "changed", first.hosts
    text = conf.read_text()
    assert text.startswith(CONF)
    block = text[len(CONF) :].splitlines()
    d = tmp_path / "hooks"
    assert block[1:-1] == [
        f"Prolog={d}/prolog.sh",
        f"Epilog={d}/epilog.sh",
        f"HealthCheckProgram={d}/healthcheck.sh",
        "HealthCheckInterval=300",
        "SchedulerParameters=nohold_on_prolog_fail",
    ]
    assert block[0].startswith("# BEGIN ORCH SLURM HOOKS") and block[-1].startswith("# END ORCH SLURM HOOKS")
    prolog = (d / "prolog.sh").read_text()
    want = (
        f"exec {shlex.quote(ORCH)} check --quick --dir {shlex.quote(str(tmp_path / 'certs $x'))}"
        f' --pubkey {shlex.quote("/etc/orch/cert key.pem")} -- "$node"'
    )
    assert want in prolog.splitlines(), prolog
    for name in ("epilog", "healthcheck"):
        script = (d / f"{name}.sh").read_text().splitlines()
        assert f'{shlex.quote(ORCH)} health --local --drain --node="$node" --max-unavailable 1' in script, (
            script
        )
        assert script[-1] == "exit 0"  # the drain is orch's, under the cap: never Slurm's on an exit code
    for name in ("prolog", "epilog", "healthcheck"):
        path = d / f"{name}.sh"
        assert path.stat().st_mode & 0o777 == 0o755
        assert f"export SLURM_CONF={shlex.quote(str(conf))}" in path.read_text()
        assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0

    again = _run(tmp_path, "present", "2", slurm_hooks_pubkey="/etc/orch/cert key.pem")
    assert _status(again) == "ok", again.hosts
    assert conf.read_text() == text

    gone = _run(tmp_path, "absent", "3")
    assert _status(gone) == "changed", gone.hosts
    assert conf.read_bytes() == CONF.encode()
    assert not any((d / f"{n}.sh").exists() for n in ("prolog", "epilog", "healthcheck"))


def test_a_foreign_prolog_is_refused_by_name(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF + "prolog = /usr/local/site-prolog.sh\n")
    _refused(_run(tmp_path, "present", "1"), "prolog = /usr/local/site-prolog.sh")
    assert conf.read_text() == CONF + "prolog = /usr/local/site-prolog.sh\n"
    assert not (tmp_path / "hooks").exists()


def test_scheduler_parameters_without_nohold_are_refused_and_with_it_kept(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF + "SchedulerParameters=bf_continue\n")
    _refused(_run(tmp_path, "present", "1"), "SchedulerParameters=bf_continue")

    conf.write_text(CONF + "SchedulerParameters=bf_continue,nohold_on_prolog_fail\n")
    ok = _run(tmp_path, "present", "2")
    assert _status(ok) == "changed", ok.hosts
    assert conf.read_text().count("SchedulerParameters") == 1


def test_orch_hooks_install_check_shows_the_change_then_install_and_remove(tmp_path: Path) -> None:
    import sys

    from typer.testing import CliRunner

    from orchestrator.cli import build_app

    conf = tmp_path / "slurm.conf"
    conf.write_text(CONF)
    src = tmp_path / "health"
    (src / "sysfs" / "class" / "net" / "fab0").mkdir(parents=True)
    (src / "sysfs" / "class" / "net" / "fab0" / "operstate").write_text("up\n")
    (src / "tools").mkdir()
    (src / "kern.log").write_text("")
    inv = tmp_path / "inv.ini"
    inv.write_text(
        f"[local]\nlocalhost ansible_connection=local gpu_vendor=none gpus_per_node=1"
        f" ansible_python_interpreter={sys.executable}\n"
        f"[all:vars]\norch_slurm_conf={conf}\nslurm_hooks_dir={tmp_path / 'hooks'}\n"
        f"orch_health_kernel_log={src}/kern.log\norch_health_sysfs={src}/sysfs\norch_health_tools_dir={src}/tools\n"
    )
    app = build_app("hooks")
    args = ["-i", str(inv), "--out", str(tmp_path / "runs"), "--cert-dir", str(tmp_path / "certs")]

    dry = CliRunner().invoke(app, ["hooks", "install", "--check", *args])
    assert dry.exit_code == 0, dry.output
    assert f"+Prolog={tmp_path / 'hooks'}/prolog.sh" in dry.output
    assert conf.read_text() == CONF and not (tmp_path / "hooks").exists()

    done = CliRunner().invoke(app, ["hooks", "install", "--no-reconfigure", *args])
    assert done.exit_code == 0, done.output
    orch = Path(sys.executable).parent / "orch"  # the local inventory: this venv's orch
    prolog = (tmp_path / "hooks" / "prolog.sh").read_text()
    assert (
        f"exec {shlex.quote(str(orch))} check --quick --dir {shlex.quote(str(tmp_path / 'certs'))} --"
        in prolog
    )

    # the scripts run for real: the prolog refuses a node without a certificate, the health check
    # reads the node's planted sources (orch_health_* of the inventory) and finds nothing
    assert orch.exists(), orch  # the venv's orch entry point (pip install -e .)
    env = {**os.environ, "SLURMD_NODENAME": "node9"}
    pro = subprocess.run(
        [tmp_path / "hooks" / "prolog.sh"], env=env, capture_output=True, text=True, check=False
    )
    assert pro.returncode == 1 and "no certificate for node9" in pro.stderr, pro
    hc = [tmp_path / "hooks" / "healthcheck.sh"]
    health = subprocess.run(hc, env=env, capture_output=True, text=True, check=False)
    assert health.returncode == 0 and "node9: no findings" in health.stdout, health

    gone = CliRunner().invoke(
        app, ["hooks", "remove", "--no-reconfigure", "-i", str(inv), "--out", str(tmp_path)]
    )
    assert gone.exit_code == 0, gone.output
    assert conf.read_bytes() == CONF.encode()
