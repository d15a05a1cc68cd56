"""CLI commands: isolate (find the bad node or link) and stragglers (the node-pair matrix); check
--quick is in check.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from orchestrator.cli.common import InventoryOpt, OutOpt, err, name_list, out, styled
from orchestrator.inventory import DEFAULT_INVENTORY
from orchestrator.models.isolation import Round, partitions_line
from orchestrator.models.plan import parse_size
from orchestrator.models.requests import MAX_TIMEOUT_S, MIN_PARTNERS, IsolateRequest, StragglersRequest
from orchestrator.models.run import StepResult
from orchestrator.runs.isolate import IsolationRun, run_isolation
from orchestrator.runs.stragglers import (
    MatrixCollective,
    latency,
    run_stragglers,
    straggler_lines,
)

Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"]


def print_round(rnd: Round) -> None:
    """Each test of a round as it ends (Trial.line(), then why a failing one failed)."""
    for t in rnd.trials:
        line = t.line() + ("" if t.outcome.passed else f"  [{t.outcome.detail}]")
        err.print(line, markup=False, style=None if t.outcome.passed else "red")


def render_isolation(r: IsolationRun) -> None:
    """The culprits with their evidence, the mode, the verdict line."""
    iso = r.isolation
    out.print(
        f"orch isolate {r.run_id}: {len(iso.rounds)} rounds, run {r.mode}, {r.wall_s:.0f} s", markup=False
    )
    out.print(partitions_line(r.partitions), markup=False)
    for c in iso.culprits:
        out.print(styled(f"culprit {c.kind} {'+'.join(c.nodes)}", "red"), f"— {c.why}", markup=False)
        for t in c.evidence:
            out.print(f"    {t.line()}", markup=False)
    if not iso.culprits:
        out.print(styled("no culprit", "green"), markup=False)
    for u in iso.unconfirmed:  # failed once, passed its repeat: not named
        out.print(styled(f"unconfirmed {u.line()}", "yellow"), "— not named: its repeat passed", markup=False)
    if iso.undecided:
        out.print(f"undecided: {', '.join(iso.undecided)}", markup=False)
    if r.drained:
        out.print(f"drained: {', '.join(r.drained)}", markup=False)
    if r.drain_refused:
        out.print(styled(f"drain refused: {r.drain_refused}", "red"), markup=False)
    out.print(f"good: {', '.join(iso.good) or 'none'} — {r.run_dir}", markup=False)


def _say_rounds(what: str, concurrent: bool) -> None:
    """Say on stderr how the rounds of isolate or stragglers run."""
    err.print(f"{what}: rounds run {'concurrent' if concurrent else 'sequential'}", markup=False)


def isolate_cmd(
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Suspects, comma list (default: every node).")
    ] = None,
    known_good: Annotated[str | None, typer.Option("--known-good", help="Partners known to pass.")] = None,
    collective: Annotated[
        Collective, typer.Option("--collective", help="The one collective of the tests.")
    ] = "all_reduce",
    size: Annotated[str, typer.Option("--size", help="Message size, e.g. 64M.")] = "64M",
    timeout: Annotated[
        int, typer.Option("--timeout", min=5, max=MAX_TIMEOUT_S, help="Time limit of one test (s).")
    ] = MAX_TIMEOUT_S,
    iters: Annotated[int, typer.Option("--iters", min=1, help="Timed iterations per test.")] = 5,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            help="A single node passes within this of the median single (a repeat: or in the noise band).",
        ),
    ] = 0.2,
    min_efficiency: Annotated[
        float, typer.Option("--min-efficiency", help="A group passes at this share of the median single.")
    ] = 0.5,
    min_gbs: Annotated[float | None, typer.Option("--min-gbs", help="Absolute busbw floor, GB/s.")] = None,
    concurrent: Annotated[
        bool, typer.Option("--concurrent", help="Run a round's disjoint tests together (real clusters).")
    ] = False,
    drain_bad: Annotated[
        bool, typer.Option("--drain-bad", help="Drain the culprit nodes (confirmed by a repeat) in Slurm.")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Drain past the plan's max_share.")] = False,
    out_dir: OutOpt = None,
) -> int:
    """Find the bad node or link: singles, pairs with known-good partners, bisection (exit 0: no
    culprit, 1: culprits named, 2: drain refused, 3: infra)."""
    req = IsolateRequest(
        inventory=inventory,
        nodes=name_list(nodes),
        known_good=name_list(known_good) or [],
        collective=collective,
        size=parse_size(size),
        timeout_s=timeout,
        iters=iters,
        tolerance=tolerance,
        min_efficiency=min_efficiency,
        min_gbs=min_gbs,
        concurrent=concurrent,
        drain_bad=drain_bad,
        force=force,
        out_dir=out_dir or Path("runs"),
    )
    _say_rounds("isolation", concurrent)
    result = run_isolation(req, on_round=print_round)
    render_isolation(result)
    return result.exit_code


def stragglers_cmd(
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    nodes: Annotated[
        str | None, typer.Option("--nodes", help="Nodes of the matrix, comma list (default: every node).")
    ] = None,
    collective: Annotated[
        MatrixCollective, typer.Option("--collective", help="The collective of each pair.")
    ] = "sendrecv",
    size: Annotated[str, typer.Option("--size", help="Message size, e.g. 1M.")] = "1M",
    iters: Annotated[int, typer.Option("--iters", min=1, help="Timed iterations per pair.")] = 20,
    timeout: Annotated[
        int, typer.Option("--timeout", min=5, max=MAX_TIMEOUT_S, help="Time limit of one pair (s).")
    ] = MAX_TIMEOUT_S,
    sample: Annotated[
        int | None,
        typer.Option("--sample", min=MIN_PARTNERS, help="Large clusters: every node in at least K pairs."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample.")] = 0,
    concurrent: Annotated[
        bool, typer.Option("--concurrent", help="Run a round's disjoint pairs together (real clusters).")
    ] = False,
    out_dir: OutOpt = None,
) -> int:
    """Name the slow nodes from a node-pair matrix: every pair of nodes of a kind (or a sample),
    in rounds of disjoint pairs (exit 0: none named, 1: stragglers named, a pair failed or nodes
    not judged, 2: usage, 3: infra)."""
    req = StragglersRequest(
        inventory=inventory,
        nodes=name_list(nodes),
        collective=collective,
        size=parse_size(size),
        iters=iters,
        timeout_s=timeout,
        sample=sample,
        seed=seed,
        concurrent=concurrent,
        out_dir=out_dir or Path("runs"),
    )
    _say_rounds("stragglers", concurrent)

    def progress(i: int, n: int, results: list[StepResult]) -> None:
        each = [
            f"{'+'.join(r.step.nodes)} "
            + (f"{fig:.4g} us" if (fig := latency(r)) is not None else r.verdict.upper())
            for r in results
        ]
        err.print(f"round {i}/{n}: " + ", ".join(each), markup=False)

    result = run_stragglers(req, on_round=progress)
    out.print(f"orch stragglers {result.run_id}: {result.sample_line()}, run {result.mode}, "
              f"{result.wall_s:.0f} s", markup=False)  # fmt: skip
    for line in straggler_lines(result):
        bad = line.lstrip().startswith(("straggler", "failed"))
        out.print(styled(line, "red") if bad else line, markup=False)
    verdict = f"stragglers: {', '.join(result.stragglers)}" if result.stragglers else "no straggler"
    if result.not_judged:
        verdict += f"; not judged: {', '.join(result.not_judged)}"
    out.print(f"{verdict} — {result.run_dir}", markup=False)
    return result.exit_code


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("isolate")(isolate_cmd)
    app.command("stragglers")(stragglers_cmd)
