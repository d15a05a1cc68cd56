"""The Isolation section of a report: an isolate run, or a scale-test that ran `--isolate`.

Built from the run folder alone: isolation.json (IsolationRun: mode, rule, rounds, culprits and
their evidence, cleared, undecided and drained nodes), and from the isolate run's own folder (the
run itself, or for a scale-test the linked run beside it) the journal's times: each round's
(started to judged) and each test's (submitted to done). One list of sections feeds both the Markdown and
the HTML, so both say the same. Every value is data from files a user can edit: each goes through
escape.md() or escape.html_text().
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.models.isolation import IsolationRun, Outcome, Trial, partitions_line
from orchestrator.models.names import is_name
from orchestrator.models.plan import format_size
from orchestrator.report.sections import Section, sections_html, sections_markdown
from orchestrator.store.rundir import RunDir
from orchestrator.text import figure


@dataclass
class _Timing:
    """What the isolate run's own folder says of its rounds and tests."""

    round_s: dict[int, float] = field(default_factory=dict)
    step_of: dict[tuple[int, tuple[str, ...]], str] = field(default_factory=dict)
    step_s: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def isolate_folder(run_dir: Path, run_id: str, iso: IsolationRun) -> Path | None:
    """The folder of the isolate run: run_dir itself, or the linked run beside a scale-test's
    (by its id, never by the path isolation.json names); None when it is not there."""
    if iso.run_id == run_id:
        return run_dir
    if not is_name(iso.run_id, 200):
        return None
    linked = run_dir.parent / iso.run_id
    return linked if linked.is_dir() else None


def _time(ev: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(str(ev["t"]))
    except (KeyError, TypeError, ValueError):
        return None


def _timing(folder: Path | None) -> _Timing:
    out = _Timing()
    if folder is None:
        return out
    try:
        events = list(RunDir(folder).events())
    except ConfigError as e:
        out.warnings.append(e.message)
        return out
    began: dict[int, datetime] = {}
    submitted: dict[str, datetime] = {}
    done: dict[str, datetime] = {}
    for ev in events:
        t = _time(ev)
        step = ev.get("step")
        if t is not None and isinstance(step, str):
            if ev.get("event") == "step_submitted":
                submitted.setdefault(step, t)
            elif ev.get("event") == "step_done":
                done[step] = t
        rnd = ev.get("round")
        if not isinstance(rnd, int):
            continue
        if ev.get("event") == "isolation_round_started":
            if t is not None:
                began[rnd] = t
            steps, groups = ev.get("steps") or [], ev.get("groups") or []
            for sid, group in zip(steps, groups, strict=False):
                if isinstance(sid, str) and is_name(sid) and isinstance(group, list):
                    out.step_of[(rnd, tuple(str(n) for n in group))] = sid
        elif ev.get("event") == "isolation_round" and t is not None and rnd in began:
            out.round_s[rnd] = (t - began[rnd]).total_seconds()
    for sid in out.step_of.values():
        if sid in submitted and sid in done:
            out.step_s[sid] = (done[sid] - submitted[sid]).total_seconds()
    return out


def compared_with(o: Outcome, min_gbs: float | None) -> str:
    """'62% of the round's median single 1.02 GB/s (n=3); rule >= 80% = 0.816 GB/s'."""
    floor = f"; and >= {min_gbs:g} GB/s" if min_gbs else ""
    if not o.against:
        return "not recorded (a run made before orch kept it)" + floor
    if o.reference is None:
        return f"{o.against}: none (no single node passed){floor or '; completion only'}"
    ratio = f"{o.figure / o.reference:.0%} of " if o.figure is not None and o.reference else ""
    rule = ""
    if o.min_ratio is not None:
        rule = f"; rule >= {o.min_ratio:.0%} = {o.min_ratio * o.reference:.4g} GB/s"
    n = f" (n={o.samples})" if o.samples is not None else ""
    return f"{ratio}{o.against} {o.reference:.4g} GB/s{n}{rule}{floor}"


def _verdict(t: Trial) -> str:
    return "pass" if t.outcome.passed else "FAIL"


def isolation_sections(iso: IsolationRun, folder: Path | None, *, linked: bool = False) -> list[Section]:
    """The section's parts. folder: the isolate run's own folder (None: not there, times unknown);
    linked: shown in a scale-test's report (the isolate run is a run of its own beside it)."""
    found = iso.isolation
    rp = iso.rule_params
    timing = _timing(folder)
    iters = f"mean of {rp.iters} timed iterations" if rp else "iterations not recorded"
    if rp and rp.repeat_iters and rp.repeat_iters != rp.iters:
        iters += f"; a single's repeat: of {rp.repeat_iters}"
    mode = (
        "concurrent: a round's tests on disjoint nodes ran together"
        if iso.mode == "concurrent"
        else "sequential: a round's tests ran one after another"
    )
    every = sorted({n for p in iso.partitions for n in p.nodes}) or sorted(
        {n for r in found.rounds for t in r.trials for n in t.group}
    )
    summary = [
        (f"linked isolate run {iso.run_id}, after this scale-test" if linked else f"isolate run {iso.run_id}")
        + (f" after scale-test run {iso.parent_run}" if iso.parent_run and not linked else ""),
        f"mode: {mode}",
        f"{iso.collective} at {format_size(iso.size_bytes)} bytes; {len(found.rounds)} rounds (the bound "
        f"for one bad node, the search and its repeat: {iso.round_bound}); {iso.wall_s:.0f} s; "
        f"{iso.status}, exit {iso.exit_code}",
        "reference: median busbw of the single nodes that passed in the run: "
        + (f"{iso.reference_gbs:.4g} GB/s" if iso.reference_gbs is not None else "none"),
        partitions_line(iso.partitions),
    ]
    if not found.culprits:
        summary.append(
            "no culprit"
            + (
                f"; undecided: {', '.join(found.undecided)}"
                if found.undecided
                else f": all {len(found.good)} nodes cleared"
            )
        )
    else:
        summary.append("culprits: " + "; ".join(f"{c.kind} {'+'.join(c.nodes)}" for c in found.culprits))
    summary += [f"unconfirmed (not named): {u.line()}" for u in found.unconfirmed]
    if folder is None:
        summary.append("the isolate run's folder is not beside this one: round and test times unknown")
    summary += [f"not read: {w}" for w in timing.warnings]
    out = [Section("Isolation", "isolation-summary", summary)]

    rule_rows = [
        ["collective, size", f"{iso.collective}, {format_size(iso.size_bytes)} bytes", "one per test"]
    ]
    if rp:
        rule_rows += [
            ["iterations", f"{rp.iters} timed, {rp.warmup_iters} warm-up",
             "each busbw figure is the mean of the timed iterations"],
            *([["a single's repeat", f"{rp.repeat_iters} timed, {rp.repeat_warmup_iters} warm-up",
                "the test that can name a node measures longer than the one that made it a suspect"]]
              if rp.repeat_iters is not None else []),
            ["step timeout", f"{rp.timeout_s} s", "a test running longer fails"],
            ["tolerance", f"{rp.tolerance:g}",
             f"a single passes at >= {1 - rp.tolerance:.0%} of the round's median single (its kind); "
             "a repeat also within its kind's noise band (3 x 1.4826 x MAD of log busbw)"],
            ["min_efficiency", f"{rp.min_efficiency:g}",
             f"a group passes at >= {rp.min_efficiency:.0%} of the median single of the run so far "
             "(its kind)"],
            ["min_gbs", "none" if rp.min_gbs is None else f"{rp.min_gbs:g} GB/s", "an absolute busbw floor"],
        ]  # fmt: skip
    else:
        rule_rows.append(["settings", "not recorded", "a run made before orch kept them"])
    out.append(
        Section("Rule", "isolation-rule", [f"rule: {iso.rule}"], ["setting", "value", "meaning"], rule_rows)
    )

    min_gbs = rp.min_gbs if rp else None
    head = [
        "culprit",
        "why",
        "round",
        "test",
        "nodes",
        "verdict",
        f"busbw GB/s ({iters})",
        "compared with",
        "detail",
    ]
    rows: list[list[str]] = []
    lines: list[str] = []

    def evidence(name: str, why: str, t: Trial) -> list[str]:
        sid = timing.step_of.get((t.round, tuple(t.group)), "-")
        return [name, why, str(t.round), f"{t.kind} ({t.purpose}), step {sid}", "+".join(t.group),
                _verdict(t), figure(t.outcome.figure), compared_with(t.outcome, min_gbs),
                t.outcome.detail]  # fmt: skip

    for c in found.culprits:
        name = f"{c.kind} {'+'.join(c.nodes)}"
        lines.append(f"**{name}**: {c.why}")
        rows += [evidence(name, c.why, t) for t in c.evidence]
    if not found.culprits:
        lines.append("no culprit")
    for u in found.unconfirmed:  # failed once, passed its repeat: both tests, not named
        name = f"unconfirmed {u.kind} {'+'.join(u.nodes)}"
        lines.append(f"{name}: {u.line()}")
        rows += [evidence(name, u.why, t) for t in (u.first, u.repeat)]
    out.append(Section("Culprits and their evidence", "isolation-culprits", lines,
                       head if rows else [], rows, "culprit", named_class="culprit-name"))  # fmt: skip

    node_rows = [[n, "cleared", "passed a test with others, or known good"] for n in found.good]
    node_rows += [[n, "undecided", "the tests could not settle it"] for n in found.undecided]
    for c in found.culprits:
        node_rows += [[n, f"culprit ({c.kind})", c.why] for n in c.nodes]
    for u in found.unconfirmed:
        node_rows += [[n, f"unconfirmed ({u.kind})", u.line()] for n in u.nodes if n not in found.good]
    node_lines = [
        f"cleared: {', '.join(found.good) or 'none'}",
        f"undecided: {', '.join(found.undecided) or 'none'}",
    ]
    if iso.drained or iso.drain_refused:
        for n in iso.drained:
            node_rows.append([n, "drained", iso.drain_reasons.get(n, "reason not recorded")])
        node_lines.append(f"drained (--drain-bad): {', '.join(iso.drained) or 'none'}")
        if iso.drain_refused:
            node_lines.append(f"drain refused: {iso.drain_refused}")
    else:
        node_lines.append("drained: none (--drain-bad not given, or no node culprit)")
    seen = set(every) - {r[0] for r in node_rows}
    node_rows += [[n, "not settled", "in no recorded verdict"] for n in sorted(seen)]
    out.append(Section("Nodes", "isolation-nodes", node_lines, ["node", "state", "why"], node_rows))

    rnd_rows: list[list[str]] = []
    for rnd in found.rounds:
        wall = timing.round_s.get(rnd.index)
        for t in rnd.trials:
            test = timing.step_of.get((rnd.index, tuple(t.group)))
            step_s = timing.step_s.get(test) if test else None
            rnd_rows.append([
                str(rnd.index), "-" if wall is None else f"{wall:.1f}", test or "-", "+".join(t.group),
                f"{t.kind} ({t.purpose})", figure(t.outcome.figure), compared_with(t.outcome, min_gbs),
                _verdict(t), "-" if step_s is None else f"{step_s:.1f}",
                "" if t.outcome.passed else t.outcome.detail,
            ])  # fmt: skip
    rnd_head = ["round", "round wall s (started to judged)", "test", "nodes", "kind", f"busbw GB/s ({iters})",
                "compared with", "verdict", "test wall s (submitted to done)", "why it failed"]  # fmt: skip
    out.append(Section("Rounds", "isolation-rounds", [], rnd_head, rnd_rows, "trial"))
    return out


def isolation_markdown(
    iso: IsolationRun, folder: Path | None, *, linked: bool = False, level: int = 2
) -> str:
    """The section as Markdown (its title at `level`), every value through escape.md()."""
    return "\n".join(sections_markdown(isolation_sections(iso, folder, linked=linked), level=level))


def isolation_html(iso: IsolationRun, folder: Path | None, *, linked: bool = False) -> str:
    """The section as `<section id="isolation">`, every value through escape.html_text()."""
    return sections_html(isolation_sections(iso, folder, linked=linked), ident="isolation")
