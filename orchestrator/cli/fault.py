"""CLI commands: `orch fault list|inject|sweep` and `orch recovery-test`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import Col, InventoryOpt, OutDirOpt, err, fitted_table, out
from orchestrator.errors import EXIT_INFRA
from orchestrator.faults import service
from orchestrator.faults.catalog import CATALOG, fault_info
from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.models.container import ContainerChoice
from orchestrator.models.fault import (
    IFACE_KINDS,
    FaultKind,
    FaultParams,
    FaultSpec,
    FaultTarget,
    RecoverySummary,
    parse_duration,
)
from orchestrator.models.recovery_request import Launcher
from orchestrator.remote.shells import node_shells
from orchestrator.runs.recovery import run_recovery_test, summary_ending
from orchestrator.runs.recovery_request import RecoveryTestRequest
from orchestrator.store.rundir import new_run_id

fault_app = typer.Typer(name="fault", help="Inject, list and sweep faults.", no_args_is_help=True)


@fault_app.command("list")
def list_faults() -> None:
    """The fault catalog: target form, transports each fault can reach, revert, timer."""
    cols = [Col("kind", whole=True), Col("target", whole=True), Col("transports"),
            Col("revert", optional=True), Col("timer", whole=True), Col("what")]  # fmt: skip
    cells = [
        [i.kind, targets, ", ".join(i.transports), i.revert, "yes" if i.timer else "-", i.summary]
        for i in CATALOG.values()
        for targets in [i.target.replace("|", "\n")]  # one target form a line: each whole and copyable
    ]
    t = fitted_table("faults", cols, cells, out.width)
    out.print(t)


@fault_app.command("inject")
def inject(
    kind: Annotated[str, typer.Option("--kind", help="a kind from `orch fault list`")],
    target: Annotated[str, typer.Option("--target", help="NODE[:IFACE|:RANK]")],
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    duration: Annotated[str, typer.Option("--duration", help="e.g. 5s, 250ms")] = "5s",
    margin: Annotated[float, typer.Option("--margin", help="node-side timer = duration + margin (s)")] = 2.0,
    force: Annotated[bool, typer.Option("--force", help="allow non-RDMA interfaces / many nodes")] = False,
    probability: Annotated[
        float, typer.Option("--probability", help="loss: share of packets dropped (0-1)")
    ] = 0.05,
    rate: Annotated[str, typer.Option("--rate", help="throttle: tc rate, e.g. 50mbit")] = "50mbit",
    signal: Annotated[
        str, typer.Option("--signal", help="kill-worker: signal name, e.g. KILL, TERM")
    ] = "KILL",
    runs: Annotated[Path, typer.Option("--runs", help="fault records go to RUNS/<id>/faults/")] = Path(
        "runs"
    ),
) -> None:
    """Inject one fault, hold it for the duration, revert it (a node-side timer guards it)."""
    fault_info(kind)  # an unknown kind: ConfigError listing the known ones
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
    fault: Annotated[str, typer.Option("--fault", help="fault kind (orch fault list)")],
    target: Annotated[
        str, typer.Option("--target", help="NODE[:IFACE|:RANK]; default: the second node")
    ] = "",
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    repeat: Annotated[int, typer.Option("--repeat", "-k", help="how many times to inject the fault")] = 1,
    duration: Annotated[str, typer.Option("--duration", help="how long each fault is held, e.g. 5s")] = "5s",
    pg_timeout: Annotated[float, typer.Option("--pg-timeout", help="process-group timeout (s)")] = 30.0,
    window: Annotated[float, typer.Option("--window", help="max wait for recovery per repeat (s)")] = 60.0,
    force: Annotated[bool, typer.Option("--force", help="allow non-RDMA interfaces / many nodes")] = False,
    out_dir: OutDirOpt = Path("runs"),
    runs: Annotated[Path | None, typer.Option("--runs", hidden=True, help="deprecated: --out")] = None,
    launcher: Annotated[
        Launcher,
        typer.Option(
            "--launcher",
            help="slurm: one sbatch --requeue job; ssh: torchrun over SSH; auto: slurm when the inventory"
            " has Slurm (orch_slurm_conf or remote hosts, as scale-test decides)",
        ),
    ] = "auto",
    container: Annotated[
        ContainerChoice,
        typer.Option(
            "--container",
            help="on: the probe runs in the stack's image with each node's container_runtime;"
            " auto: for restart-container only",
        ),
    ] = "auto",
) -> None:
    """Run the recovery probe, inject FAULT K times, print detect/recover/restore per repeat and median."""
    if runs is not None:
        if out_dir != Path("runs") and out_dir != runs:
            raise typer.BadParameter(
                "give --out only (--runs is its deprecated old name)", param_hint="--runs"
            )
        err.print("warning: --runs is deprecated; use --out", markup=False, style="yellow")
        out_dir = runs
    fault_info(fault)  # an unknown kind: ConfigError listing the known ones
    cluster = load_inventory(inventory)
    kind: FaultKind = fault  # type: ignore[assignment]
    if not target:
        second = cluster.nodes[min(1, len(cluster.nodes) - 1)]
        iface = second.rdma_ifaces[0] if second.rdma_ifaces else ""
        target = f"{second.name}:{iface}" if kind in IFACE_KINDS else f"{second.name}:{second.gpus_per_node}"
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
            "in_container": None if container == "auto" else container == "on",
        }
    )
    root = out_dir / new_run_id(f"recovery-{kind}")
    with node_shells(cluster) as shells:
        summary = run_recovery_test(cluster, shells, req, root, progress=lambda m: err.print(m, markup=False))
    for w in summary.warnings:
        err.print(f"warning: {w}", markup=False, style="yellow")
    render_recovery(summary, f"recovery-test {kind} on {target} x{repeat} — {root}")
    if (code := summary_ending(summary).exit_code) != 0:
        raise typer.Exit(code)


def _s(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "—"


def render_recovery(summary: RecoverySummary, title: str) -> None:
    """Per repeat (verdict, timings, why a figure is absent), then the medians and what they leave out."""
    t = Table(title=title)
    for col in ("repeat", "verdict", "detect s", "recover s", "restore s", "held s", "notes"):
        t.add_column(col, justify="right" if col.endswith(" s") or col == "repeat" else "left")
    for r in summary.results:
        notes = [n for n in r.notes if not n.startswith("fault held ")]
        t.add_row(str(r.repeat), r.verdict, _s(r.detect_s), _s(r.recover_s), _s(r.restore_s), _s(r.held_s),
                  "; ".join(notes))  # fmt: skip
    out.print(t)
    t = Table(title="over the repeats that have each figure")
    for col in ("", "n", "median s", "p95 s (n>=20)", "spread s"):
        t.add_column(col)
    for name, st in (("detect", summary.detect), ("recover", summary.recover), ("restore", summary.restore)):
        t.add_row(name, str(st.n), _s(st.median), _s(st.p95), _s(st.spread))
    out.print(t)
    for note in summary.notes:
        out.print(f"note: {note}", markup=False)
    out.print("verdicts: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.verdicts.items())), markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(fault_app)
    app.command("recovery-test")(recovery_test)
