"""CLI commands: per-node certificates (`orch cert keygen/issue/show/verify/list/resume/readmit`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.certs import service
from orchestrator.cli.common import Cell, Col, OutDirOpt, err, fitted_table, out, styled
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS
from orchestrator.models.cert import Certificate, CertTest
from orchestrator.models.plan import format_size, parse_size
from orchestrator.text import figure

cert_app = typer.Typer(
    name="cert",
    help="Per-node certificates: make a signing key, issue from a run, show, verify, list; resume a "
    "drained node.",
    no_args_is_help=True,
)
DirOpt = Annotated[
    Path,
    typer.Option("--dir", help="A folder of run folders, or one run folder (default: runs)."),
]


@cert_app.command("keygen")
def keygen_cmd(
    private_key: Annotated[Path, typer.Argument(help="The private key file to create (mode 0600).")],
    public_key: Annotated[
        Path | None, typer.Option("--pub", help="The public key file to create (default: PRIVATE_KEY.pub).")
    ] = None,
) -> int:
    """Make an Ed25519 key pair for signing certificates; never overwrites a file. Keep the private
    key with the lab team; give the public key to whoever verifies (and to check --quick)."""
    from orchestrator.certs import sign

    pair = sign.keygen(private_key, public_key)
    out.print(f"private key {pair.private_key} (0600), public key {pair.public_key}", markup=False)
    out.print(f"key id {pair.key_id}", markup=False)
    return EXIT_OK


@cert_app.command("issue")
def issue_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run folder of a finished scale-test.")],
    valid_days: Annotated[
        int, typer.Option("--valid-days", min=1, help="Days until the certificates expire.")
    ] = service.DEFAULT_VALID_DAYS,
    key: Annotated[
        Path | None,
        typer.Option(
            "--key", help="Sign with the Ed25519 private key in this file (mode 0600; cert keygen)."
        ),
    ] = None,
    fleet_baseline: Annotated[
        str | None,
        typer.Option(
            "--fleet-baseline",
            help="Judge the nodes against this stored fleet baseline ('latest', or its hash or a prefix): "
            "refuse its outliers, name its hash in each certificate (orch fleet baseline).",
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store", envvar="ORCH_STORE", help="Results store of --fleet-baseline.", show_default=False
        ),
    ] = None,
) -> int:
    """Certify each node whose every step passed: RUN_DIR/certs/NODE.json. Exit 1 when a node is refused."""
    sha, reasons = None, None
    if fleet_baseline is not None:
        from orchestrator.certs.fleet import judge_run
        from orchestrator.store.db import ResultsStore, default_store_path
        from orchestrator.store.location import parse_store

        with ResultsStore.open(parse_store(store) if store else default_store_path()) as db:
            rec = db.ingest(run_dir)
            sha, reasons = judge_run(db, rec.run_id, None if fleet_baseline == "latest" else fleet_baseline)
    res = service.issue(
        run_dir, valid_days=valid_days, key=key, baseline_sha256=sha, baseline_reasons=reasons
    )
    for node, path in res.issued.items():
        out.print(styled("certified", "green"), f"{node}: {path}")
    for r in res.refused:
        out.print(styled("refused", "red"), f"{r.node}: " + "; ".join(r.reasons))
    if not res.issued and not res.refused:
        out.print(f"run {res.run_id} has no nodes", markup=False)
    return EXIT_THRESHOLDS if res.refused else EXIT_OK


def _limit(t: CertTest) -> str:
    if t.threshold is None:
        return "-"
    return f"<= {t.threshold:g}" if t.metric == "wrong" else f">= {t.threshold:g}"


def _show(path: Path, cert: Certificate, problems: list[str]) -> None:
    state = styled("INTACT", "green") if not problems else styled("EDITED", "red")
    out.print(f"{cert.node}: certificate of run {cert.run_id} (plan {cert.plan}) —", state)
    out.print(f"file {path}; issued {cert.issued_at:%Y-%m-%d %H:%M:%S %Z}; valid until "
              f"{cert.valid_until:%Y-%m-%d %H:%M:%S %Z}")  # fmt: skip
    if cert.stack is not None:
        versions = ", ".join(f"{k} {v}" for k, v in cert.stack.versions.items())
        out.print(f"stack {cert.stack.stack}: {cert.stack.compatibility}; {versions}")
    else:
        out.print("stack: no fingerprint was taken in this run")
    if cert.signature is not None:
        out.print(f"signed by {cert.signature.key_id} (orch cert verify FILE --pubkey KEY.pub checks it)",
                  markup=False)  # fmt: skip
    else:
        out.print("unsigned: only the content hash guards it", markup=False)
    cols = [Col("step", whole=True), Col("ranks", whole=True), Col("collective", whole=True),
            Col("size", whole=True), Col("metric", whole=True), Col("limit", whole=True),
            Col("measured", whole=True), Col("", whole=True)]  # fmt: skip
    rows: list[list[Cell]] = [
        [t.step, str(t.ranks), t.collective, "-" if t.size_bytes is None else format_size(t.size_bytes),
         t.metric, _limit(t), figure(t.measured),
         styled("pass", "green") if t.passed else styled("FAIL", "red")]
        for t in cert.tests
    ]  # fmt: skip
    out.print(fitted_table("tests", cols, rows, out.width))
    for f in cert.faults:
        out.print(f"survived {f.fault} ({f.role}, {f.target}, step {f.step or '-'}): {f.outcome}")
    if cert.diagnostics:
        from orchestrator.report.diagnostics import figure_summary

        for d in cert.diagnostics:
            out.print(f"diagnostic {d.step} ({d.tool} on {d.on}): {d.checks_passed} checks passed; "
                      f"{figure_summary(d.figures)}", markup=False)  # fmt: skip
    for p in problems:
        err.print(f"{path}: {p}")


@cert_app.command("show")
def show_cmd(node: Annotated[str, typer.Argument(help="Node name.")], root: DirOpt = Path("runs")) -> int:
    """The newest certificate of NODE under --dir, with its tests and figures."""
    path, cert, problems = service.latest(node, root)
    _show(path, cert, problems)
    return EXIT_OK if not problems else EXIT_THRESHOLDS


@cert_app.command("verify")
def verify_cmd(
    file: Annotated[Path, typer.Argument(help="A certificate file (NODE.json).")],
    pubkey: Annotated[
        Path | None,
        typer.Option(
            "--pubkey", help="Also require a valid signature by the Ed25519 public key in this file."
        ),
    ] = None,
) -> int:
    """Check FILE's content hash, and with --pubkey its signature; exit 1 naming what changed when
    it was edited, or why the signature does not hold (an unsigned certificate fails with --pubkey)."""
    check = service.verify(file, pubkey=pubkey)
    if check.ok:
        if check.signature_checked:
            sig = f"signed by {check.signed_by}, signature valid"
        elif check.signed_by:
            sig = f"signed by {check.signed_by}, signature not checked (no --pubkey)"
        else:
            sig = "unsigned (only the content hash is checked: anyone can recompute it)"
        out.print(
            styled("intact", "green"), f"{file}: certificate of {check.node}, content hash matches; {sig}"
        )
        return EXIT_OK
    for p in check.problems:
        err.print(f"{file}: {p}", style="red")
    return EXIT_THRESHOLDS


@cert_app.command("list")
def list_cmd(
    root: DirOpt = Path("runs"),
    expired: Annotated[bool, typer.Option("--expired", help="Only certificates past valid_until.")] = False,
) -> int:
    """Certificates under --dir: node, run, validity, and whether each is intact."""
    found = [e for e in service.entries(root) if e.expired or not expired]
    if not found:
        out.print(f"no {'expired ' if expired else ''}certificates under {root}")
        return EXIT_OK
    cols = [Col("node", whole=True), Col("run", whole=True), Col("issued", optional=True),
            Col("valid until", whole=True), Col("state", whole=True), Col("file", optional=True)]  # fmt: skip
    rows: list[list[Cell]] = []
    for e in found:
        state = (styled("edited", "red") if not e.intact else styled("expired", "yellow") if e.expired
                 else styled("valid", "green"))  # fmt: skip
        rows.append([e.node or "?", e.run_id or "?",
                     f"{e.issued_at:%Y-%m-%d %H:%M}" if e.issued_at else "-",
                     f"{e.valid_until:%Y-%m-%d %H:%M}" if e.valid_until else "-", state, e.path])  # fmt: skip
    out.print(fitted_table(f"certificates under {root}", cols, rows, out.width))
    return EXIT_OK


@cert_app.command("resume")
def resume_cmd(
    node: Annotated[str, typer.Argument(help="A node drained in Slurm (by --drain-bad).")],
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")],
    out_dir: OutDirOpt = Path("runs"),
    size: Annotated[str, typer.Option("--size", help="Message size of the re-test, e.g. 64M.")] = "64M",
    min_efficiency: Annotated[
        float, typer.Option("--min-efficiency", help="The pair passes at this share of the node alone.")
    ] = 0.5,
) -> int:
    """Re-test a drained NODE (alone, then with a known-good partner) and return it to service when
    it passes; a failing re-test drains it again naming the re-test run (exit 1)."""
    from orchestrator.cli.isolate import print_round, render_isolation
    from orchestrator.runs.node_resume import resume_node

    res = resume_node(
        node, inventory, out_dir, print_round, size=parse_size(size), min_efficiency=min_efficiency
    )
    render_isolation(res.retest)
    if res.resumed:
        out.print(styled("resumed", "green"), f"{node} (was {res.was}); re-test {res.retest.run_id} passed")
        return EXIT_OK
    out.print(styled("still drained", "red"), f"{node}: re-test {res.retest.run_id} did not pass")
    return EXIT_THRESHOLDS


@cert_app.command("readmit")
def readmit_cmd(
    inventory: Annotated[Path, typer.Option("--inventory", "-i", help="Ansible inventory.")],
    out_dir: OutDirOpt = Path("runs"),
    delay: Annotated[
        str, typer.Option("--delay", help="Re-test a node this long after orch drained it, e.g. 10m.")
    ] = "10m",
    max_unavailable: Annotated[
        int | None,
        typer.Option(
            "--max-unavailable",
            min=0,
            help="Re-test none while more nodes than this are out of service (default: the inventory's "
            "orch_max_unavailable, 1).",
        ),
    ] = None,
    every: Annotated[
        str | None, typer.Option("--every", help="Loop in the foreground: a pass this often, e.g. 1h.")
    ] = None,
) -> int:
    """Drain, test again, re-admit: each node orch drained is re-tested after --delay (alone, then
    with a known-good partner) and returned on pass; a failing one stays drained with the re-test
    as evidence. Nodes drained by others are left alone. Exit 1 when a node stays drained."""
    import time

    from orchestrator.inventory import load_inventory
    from orchestrator.models.fault import parse_duration
    from orchestrator.runs.readmit import ReadmitPolicy, readmit_pass

    cluster = load_inventory(inventory)
    budget = max_unavailable if max_unavailable is not None else cluster.vars.orch_max_unavailable
    policy = ReadmitPolicy(delay_s=parse_duration(delay), max_unavailable=budget)
    period = parse_duration(every) if every is not None else None
    while True:
        done = readmit_pass(inventory, out_dir, policy)
        out.print(
            f"readmit: {len(done.unavailable)} of {len(cluster.nodes)} nodes unavailable, budget "
            f"max_unavailable {policy.max_unavailable}, delay {policy.delay_s:g} s",
            markup=False,
        )
        cols = [Col("node", whole=True), Col("action", whole=True), Col("detail"),
                Col("re-test", whole=True, optional=True), Col("was", optional=True)]  # fmt: skip
        colour = {"returned": "green", "kept drained": "red", "budget reached": "red"}
        rows: list[list[Cell]] = [
            [e.node, styled(e.action, colour.get(e.action, "yellow")), e.detail, e.retest or "-",
             f"{e.state} ({e.reason})"]
            for e in done.entries
        ]  # fmt: skip
        if rows:
            out.print(fitted_table(None, cols, rows, out.width))
        else:
            out.print("no node drained", markup=False)
        if period is None:
            return EXIT_THRESHOLDS if done.kept else EXIT_OK
        time.sleep(period)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(cert_app)
