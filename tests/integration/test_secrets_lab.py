"""Secrets stay out of everything orch writes: a canary as an Ansible vault variable, a become
password and environment variables of the orch process (also NCCL_*/GLOO_* ones, which a stack's
environment passes on) is searched for, as bytes, after provision, fingerprint, scale-test and
every report format. Never brings the lab up or down; writes only under tmp_path.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ORCH = [sys.executable, "-m", "orchestrator"]
VAULT = str(Path(sys.executable).with_name("ansible-vault"))


def orch(lab: Lab, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ORCH, *args], capture_output=True, text=True, env=env, timeout=900)


def hits(root: Path, canaries: dict[str, str]) -> list[str]:
    """Every file under root whose bytes hold a canary as plain bytes."""
    found = []
    for p in sorted(q for q in root.rglob("*") if q.is_file()):
        data = p.read_bytes()
        found += [f"{name} in {p.relative_to(root)}" for name, c in canaries.items() if c.encode() in data]
    return found


def test_canary_secrets_are_nowhere(lab: Lab, tmp_path: Path) -> None:
    tok = secrets.token_hex(8)
    canaries = {
        "vault-var": f"vaultcanary{tok}",
        "vault-password": f"vaultpw{tok}",
        "become-password": f"becomecanary{tok}",
        "env": f"envcanary{tok}",
        "nccl-env": f"ncclcanary{tok}",
        "gloo-env": f"ateloocanary{tok}",
    }
    inv_dir = tmp_path / "inv"
    (inv_dir / "group_vars" / "all").mkdir(parents=True)
    shutil.copy(lab.inventory, inv_dir / "lab.ini")
    pw = tmp_path / "vault-pass"
    pw.write_text(canaries["vault-password"] + "\n")
    bp = tmp_path / "become-pass"
    bp.write_text(canaries["become-password"] + "\n")
    enc = subprocess.run(
        [VAULT, "encrypt_string", "--vault-password-file", str(pw), canaries["vault-var"],
         "--name", "site_canary"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (inv_dir / "group_vars" / "all" / "vault.yml").write_text(enc.stdout)
    inventory = str(inv_dir / "lab.ini")
    runs, store = tmp_path / "runs", tmp_path / "store" / "orch.db"
    env = {
        **lab.env,
        "ORCH_STORE": str(store),
        "ORCH_TEST_CANARY": canaries["env"],
        "NCCL_TEST_CANARY": canaries["nccl-env"],
        "GLOO_TEST_CANARY": canaries["gloo-env"],
    }
    # The vault variable is really decrypted (else the test would prove nothing about it).
    shown = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "-i", inventory, "node1", "-m", "debug",
         "-a", "var=site_canary", "--vault-password-file", str(pw)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert canaries["vault-var"] in shown.stdout

    prov = orch(lab, env, "provision", "-i", inventory, "--stack", "cpu-gloo", "--out", str(runs),
                "--vault-password-file", str(pw), "--become-password-file", str(bp))  # fmt: skip
    assert prov.returncode == 0, prov.stdout[-3000:] + prov.stderr
    fp = orch(lab, env, "fingerprint", "-i", inventory, "--stack", "cpu-gloo", "--out", str(runs))
    assert fp.returncode == 0, fp.stdout[-3000:] + fp.stderr
    st = orch(lab, env, "scale-test", "-i", inventory, "--gpus-per-node", "1", "--nodes", "1,2",
              "--sizes", "1K:4K:x2", "--out", str(runs))  # fmt: skip
    assert st.returncode in (0, 1), st.stdout[-3000:] + st.stderr
    run_dirs = [p for p in runs.iterdir() if (p / "journal.jsonl").exists() and "smoke" in p.name]
    assert run_dirs, list(runs.iterdir())
    reports = tmp_path / "reports"
    reports.mkdir()
    formats = (("html", "html"), ("md", "md"), ("json", "json"), ("junit", "xml"), ("openmetrics", "txt"))
    for fmt, ext in formats:
        rep = orch(lab, env, "report", str(run_dirs[0]), "-f", fmt, "-o", str(reports / f"r.{ext}"),
                   "--store", str(store))  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        assert (reports / f"r.{ext}").stat().st_size > 0
    assert list(runs.rglob("artifacts")), "no ansible-runner artifacts to search (test would not bite)"
    assert store.exists()
    planted = tmp_path / "planted"  # the search itself bites
    planted.mkdir()
    (planted / "x.bin").write_bytes(b"\0" + canaries["env"].encode() + b"\0")
    assert hits(planted, canaries) == ["env in x.bin"]
    written = [runs, store.parent, reports]
    found = [h for root in written for h in hits(root, canaries)]
    outputs = prov.stdout + prov.stderr + fp.stdout + fp.stderr + st.stdout + st.stderr
    found += [f"{name} in console output" for name, c in canaries.items() if c in outputs]
    assert not found, found
