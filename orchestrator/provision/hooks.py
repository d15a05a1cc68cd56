"""`orch hooks install|remove`: Slurm's prolog, epilog and HealthCheckProgram calling orch.

hooks.yml (roles/slurm_hooks) writes three scripts on every node and one marked block into
slurm.conf; this module builds its variables from the inventory (orch on the nodes is the stack's
venv, stacks.node_python's bin/orch; the certificate folder; the inventory's orch_slurm_conf and
orch_cert_pubkey), runs it through runner.execute, and reads back the diff Ansible recorded, so
that `--check` shows the slurm.conf change before it is made. Nothing here prints or exits.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from pydantic import Field

from orchestrator.inventory import load_inventory
from orchestrator.models.base import StrictModel
from orchestrator.provision.runner import Listener, PlaybookResult, execute
from orchestrator.provision.service import playbook_request, playbook_run_dir
from orchestrator.stacks import node_python


class HooksRequest(StrictModel):
    """One `orch hooks install` or `orch hooks remove`."""

    inventory: Path
    remove: bool = False
    check: bool = Field(default=False, description="ansible --check --diff: show the change, make none")
    reconfigure: bool = Field(default=True, description="`scontrol reconfigure` after slurm.conf changed")
    cert_dir: Path = Field(default=Path("runs"), description="the certificates' folder, as the nodes see it")
    out_dir: Path = Path("runs")
    limit: str | None = None
    become: bool = False


class HooksReport(StrictModel):
    run_dir: Path
    result: PlaybookResult
    diffs: list[str] = Field(default_factory=list, description="unified diffs of each file changed")


def extravars(req: HooksRequest) -> dict[str, Any]:
    """hooks.yml's variables; slurm_hooks_dir and the interval stay the inventory's (or the role's)."""
    cluster = load_inventory(req.inventory)
    found: dict[str, Any] = {
        "slurm_hooks_state": "absent" if req.remove else "present",
        "slurm_hooks_orch": str(Path(node_python(cluster)).parent / "orch"),
        "slurm_hooks_cert_dir": str(req.cert_dir.absolute()),
        "slurm_hooks_reconfigure": req.reconfigure,
        "orch_become": req.become,
    }
    if cluster.vars.orch_slurm_conf is not None:
        found["slurm_hooks_conf"] = str(cluster.vars.orch_slurm_conf)
    if cluster.vars.orch_cert_pubkey is not None:
        found["slurm_hooks_pubkey"] = str(cluster.vars.orch_cert_pubkey)
    return found


def _diff_text(d: dict[str, Any]) -> str:
    if "prepared" in d:
        return str(d["prepared"])
    before, after = d.get("before", ""), d.get("after", "")
    if not isinstance(before, str) or not isinstance(after, str) or before == after:
        return ""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            str(d.get("before_header") or "before"),
            str(d.get("after_header") or "after"),
        )
    )


def diffs(result: PlaybookResult) -> list[str]:
    """The unified diff of each change the playbook made (or, under --check, would make), in order,
    read from ansible-runner's job events."""
    events = []
    for path in (result.artifacts_dir / "job_events").glob("*.json"):
        try:
            events.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    found: list[str] = []
    for ev in sorted(events, key=lambda e: int(e.get("counter", 0))):
        if ev.get("event") not in ("runner_on_ok", "runner_item_on_ok"):
            continue
        res = (ev.get("event_data") or {}).get("res") or {}
        if not res.get("changed"):
            continue
        raw = res.get("diff") or []
        for d in raw if isinstance(raw, list) else [raw]:
            if isinstance(d, dict) and (text := _diff_text(d)):
                found.append(text)
    return found


def apply(req: HooksRequest, listener: Listener | None = None) -> HooksReport:
    """Install (or remove) the hooks on the inventory's hosts; a failing host is reported (the
    role refuses a Prolog=, Epilog= or HealthCheckProgram= that orch did not write, naming it).

    Raises ConfigError/InventoryError for bad input (remote nodes without a stack that has orch's
    venv), ProvisionError when ansible-runner cannot run.
    """
    variables = extravars(req)
    run_dir = playbook_run_dir(req.out_dir, "hooks")
    request = playbook_request("hooks", req.inventory, run_dir, variables, check=req.check, limit=req.limit)
    result = execute(request, listener)
    return HooksReport(run_dir=run_dir, result=result, diffs=diffs(result))
