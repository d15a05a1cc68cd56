"""CLI commands: `orch fault list|inject|sweep` and `orch recovery-test`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import err, out
from orchestrator.errors import EXIT_INFRA, EXIT_THRESHOLDS
from orchestrator.faults import service
from orchestrator.faults.catalog import CATALOG
from orchestrator.faults.recovery_test import RecoveryTestRequest, run_recovery_test
from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.models.fault import FaultKind, FaultParams, FaultSpec, FaultTarget, parse_duration
from orchestrator.store.rundir import new_run_id

fault_app = typer.Typer(name="fault", help="Inject, list and sweep faults.", no_args_is_help=True)

InventoryOpt = Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")]


@fault_app.command("list")
def list_faults() -> None:
    """The fault catalog: target form, transports each fault can reach, revert, timer."""
    t = Table(title="faults")
    for col in ("kind", "target", "transports", "revert", "timer", "what"):
        t.add_column(col)
    for info in CATALOG.values():
        t.add_row(
            info.kind,
            info.target,
            ",".join(info.transports),
            info.revert,
            "yes" if info.timer else "-",
            info.summary,
        )
    out.print(t)


@fault_app.command("inject")
def inject(
    kind: Annotated[str, typer.Option("--kind", help="a kind from `orch fault list`")],
    target: Annotated[str, typer.Option("--target", help="NODE[:IFACE|:RANK]")],
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    duration: Annotated[str, typer.Option("--duration", help="e.g. 5s, 250ms")] = "5s",
    margin: Annotated[float, typer.Option("--margin", help="node-side timer = duration + margin (s)")] = 2.0,
    force: Annotated[bool, typer.Option("--force", help="allow non-RDMA interfaces / many nodes")] = False,
    probability: Annotated[float, typer.Option("--probability")] = 0.05,
    rate: Annotated[str, typer.Option("--rate")] = "50mbit",
    signal: Annotated[str, typer.Option("--signal")] = "KILL",
    runs: Annotated[Path, typer.Option("--runs", help="fault records go to RUNS/<id>/faults/")] = Path(
        "runs"
    ),
) -> None:
    """Inject one fault, hold it for the duration, revert it (a node-side timer guards it)."""
    spec = FaultSpec.model_validate(
        {
            "kind": kind,
            "target": FaultTarget.parse(target, kind),  # type: ignore[arg-type]
            "duration_s": parse_duration(duration),
            "margin_s": margin,
            "force": force,
            "params": FaultParams.model_validate(
                {"probability": probability, "rate": rate, "signal": signal}
            ),
        }
    )
    cluster = load_inventory(inventory)
    record = service.inject_for(cluster, spec, runs / new_run_id("fault") / "faults")
    out.print(
        f"{record.kind} on {record.target}: {record.outcome} — {record.message}"
        f" (inject {1000 * (record.inject_latency_s or 0):.1f} ms)",
        markup=False,
    )
    if record.outcome == "failed":
        raise typer.Exit(EXIT_INFRA)


@fault_app.command("sweep")
def sweep(inventory: InventoryOpt = DEFAULT_INVENTORY) -> None:
    """Remove everything tagged as orch's (records, iptables chain ORCH-FAULT, tc handle 4f52:).

    Every reachable node is swept; exit 3 when any node could not be (it is named, with why).
    """
    failed = 0
    for r in service.sweep(load_inventory(inventory)):
        if r.error is not None:
            failed += 1
            err.print(f"{r.node}: unreachable or not swept: {r.error}", markup=False)
        else:
            out.print(f"{r.node}: " + (", ".join(r.found) if r.found else "clean"), markup=False)
    if failed:
        raise typer.Exit(EXIT_INFRA)


def recovery_test(
    fault: Annotated[str, typer.Option("--fault", help="fault kind")],
    target: Annotated[str, typer.Option("--target", help="NODE[:IFACE|:RANK]")] = "",
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    repeat: Annotated[int, typer.Option("--repeat", "-k")] = 1,
    duration: Annotated[str, typer.Option("--duration")] = "5s",
    pg_timeout: Annotated[float, typer.Option("--pg-timeout", help="process-group timeout (s)")] = 30.0,
    window: Annotated[float, typer.Option("--window", help="max wait for recovery per repeat (s)")] = 60.0,
    force: Annotated[bool, typer.Option("--force")] = False,
    runs: Annotated[Path, typer.Option("--runs")] = Path("runs"),
    launcher: Annotated[
        str, typer.Option("--launcher", help="ssh: torchrun over SSH; slurm: one sbatch --requeue job")
    ] = "ssh",
) -> None:
    """Run the recovery probe, inject FAULT K times, print detect/recover/restore median and p95."""
    cluster = load_inventory(inventory)
    kind: FaultKind = fault  # type: ignore[assignment]
    if not target:
        second = cluster.nodes[min(1, len(cluster.nodes) - 1)]
        iface = second.rdma_ifaces[0] if second.rdma_ifaces else ""
        target = (
            f"{second.name}:{iface}"
            if kind in {"link-down", "link-flap", "roce-drop", "packet-loss", "throttle", "delay"}
            else f"{second.name}:{second.gpus_per_node}"
        )
    req = RecoveryTestRequest.model_validate(
        {
            "kind": kind,
            "target": target,
            "repeat": repeat,
            "duration_s": parse_duration(duration),
            "force": force,
            "window_s": window,
            "probe": {"pg_timeout_s": pg_timeout},
            "launcher": launcher,
        }
    )
    root = runs / new_run_id(f"recovery-{kind}")
    with service.node_shells(cluster) as shells:
        summary = run_recovery_test(cluster, shells, req, root, progress=lambda m: err.print(m, markup=False))
    for w in summary.warnings:
        err.print(f"warning: {w}", markup=False, style="yellow")
    t = Table(title=f"recovery-test {kind} on {target} x{repeat} — {root}")
    for col in ("", "n", "median s", "p95 s (n>=20)", "spread s"):
        t.add_column(col)
    for name, s in (("detect", summary.detect), ("recover", summary.recover), ("restore", summary.restore)):
        t.add_row(
            name, str(s.n), *(f"{v:.3f}" if v is not None else "-" for v in (s.median, s.p95, s.spread))
        )
    out.print(t)
    out.print("verdicts: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.verdicts.items())), markup=False)
    if summary.verdicts.get("not-recovered") or summary.verdicts.get("no-data"):
        raise typer.Exit(EXIT_THRESHOLDS)


def register(app: typer.Typer) -> None:
    app.add_typer(fault_app)
    app.command("recovery-test")(recovery_test)
