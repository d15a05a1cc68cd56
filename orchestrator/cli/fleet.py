"""CLI commands: the fleet baseline (`orch fleet baseline/outliers`; docs/fleet.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from orchestrator.certs import fleet
from orchestrator.cli.common import Cell, Col, err, fitted_table, out
from orchestrator.cli.runs import StoreOpt, open_existing, store_path
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.models.fleet import FleetBaseline
from orchestrator.models.plan import format_size
from orchestrator.store.db import ResultsStore

fleet_app = typer.Typer(
    name="fleet",
    help="Each kind of node against its own certified nodes: build the baseline, list the outliers.",
    no_args_is_help=True,
)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _print_baseline(b: FleetBaseline) -> None:
    runs = ", ".join(b.runs) or "none"
    out.print(f"fleet baseline {b.sha256} (k {b.k:g}, floor {b.floor:.0%}; runs: {runs})", markup=False)
    cols = [Col("kind", whole=True), Col("scope", whole=True), Col("collective", whole=True),
            Col("ranks/node", whole=True), Col("size", whole=True), Col("nodes", whole=True),
            Col("median GB/s", whole=True), Col("MAD", whole=True)]  # fmt: skip
    rows: list[list[Cell]] = [
        [f.kind, f.scope, f.collective, str(f.ranks_per_node), format_size(f.size_bytes), str(f.nodes),
         f"{f.median_gbs:.4g}", f"{f.mad:.1%}"]
        for f in b.figures
    ]  # fmt: skip
    out.print(fitted_table("figures", cols, rows, out.width))
    for n in b.notes:
        err.print(f"note: {n}", markup=False)


def _existing(store: str | None) -> ResultsStore:
    """The results store to read, never created; raises ConfigError when there is none."""
    opened = open_existing(store)
    if opened is None:
        raise ConfigError(f"no results store at {store_path(store)}", hint="orch runs ingest RUN_DIR")
    return opened


@fleet_app.command("baseline")
def baseline_cmd(
    k: Annotated[
        float, typer.Option("--k", help="An outlier lies more than k x 1.4826 x MAD below its kind.")
    ] = fleet.K,
    floor: Annotated[
        float, typer.Option("--floor", help="The least band, a share of the median (0.05: 5%).")
    ] = fleet.FLOOR,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Build each kind's baseline from the store's certified figures, store it by its hash, print it."""
    with _existing(store) as db:
        b = fleet.build(db, k=k, floor=floor)
        db.save_fleet_baseline(b)
    if as_json:
        out.print_json(b.model_dump_json())
    else:
        _print_baseline(b)
    return EXIT_OK


@fleet_app.command("outliers")
def outliers_cmd(
    baseline: Annotated[
        str | None,
        typer.Option("--baseline", help="A stored baseline's hash or its prefix (default: the newest)."),
    ] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """The nodes whose figure lies below their kind's band. Exit 1 when there is one."""
    with _existing(store) as db:
        b = db.fleet_baseline(baseline)
        if b is None:
            raise ConfigError(f"no fleet baseline {baseline or ''} in {db.path}", hint="orch fleet baseline")
        found = fleet.outliers(db, b)
    if as_json:
        out.print_json(data={"baseline": b.sha256, "outliers": [o.model_dump(mode="json") for o in found]})
        return EXIT_THRESHOLDS if found else EXIT_OK
    out.print(f"against fleet baseline {b.sha256}: {len(found)} outliers", markup=False)
    heads = ("node", "kind", "figure", "size", "node GB/s", "median", "MAD", "k", "limit", "run")
    cols = [Col(h, whole=True) for h in heads]
    rows: list[list[Cell]] = [
        [o.node, f.kind, f"{f.scope} {f.collective} {f.ranks_per_node}/node", format_size(f.size_bytes),
         f"{o.value_gbs:.4g}", f"{f.median_gbs:.4g}", f"{f.mad:.1%}", f"{o.k:g}", f"{o.limit_gbs:.4g}",
         o.run_id]
        for o in found
        for f in [o.figure]
    ]  # fmt: skip
    if rows:
        out.print(fitted_table("outliers", cols, rows, out.width))
    return EXIT_THRESHOLDS if found else EXIT_OK


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(fleet_app)
