"""Certificates from a finished run record: pure (no files; the clock is an argument).

A node gets a certificate when every step it took part in passed, it was not the target of a fault
the run did not recover from, and (when the run took a fingerprint) it matched the stack. Every
other node of the run is refused with the reasons. The figures are the run's own: the plan's
busbw thresholds held against the rows the verdict judged (metrics.verdict.busbw_measured), the
scaling efficiency against its noise band, and #wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from orchestrator.certs import digest
from orchestrator.errors import ConfigError
from orchestrator.metrics import verdict as V
from orchestrator.models.cert import (
    CertDiagnostic,
    Certificate,
    CertTest,
    RawLog,
    Refusal,
    StackSummary,
    SurvivedFault,
)
from orchestrator.models.fingerprint import COMPATS, Fingerprint
from orchestrator.models.names import is_name
from orchestrator.models.plan import Plan
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.models.run import RunRecord, StepResult
from orchestrator.stacks import manifest_sha256

_UNRECOVERED = ("not-recovered", "aborted")
_NOT_VERSIONS = ("node",)


def step_tests(plan: Plan, res: StepResult) -> list[CertTest]:
    """The figures of one finished step, each held against the plan's limit for it (if any)."""
    st = res.step
    out: list[CertTest] = []

    def add(coll: str, metric: str, size: int | None, th: float | None, got: float | None, ok: bool) -> None:
        out.append(
            CertTest.model_validate(
                dict(step=st.id, collective=coll, nnodes=st.nnodes, ranks=st.world_size, size_bytes=size,
                     metric=metric, threshold=th, measured=got, passed=ok)
            )
        )  # fmt: skip

    for coll, summ in res.summary.items():
        limits = [th for th in plan.thresholds.busbw if th.collective == coll]
        for th in limits:
            m = V.busbw_measured(th, res.rows, res.summary)
            ok = m.busbw_gbs is not None and m.busbw_gbs >= th.min_gbs
            add(coll, "busbw_gbs", m.size_bytes, th.min_gbs, m.busbw_gbs, ok)
        if not limits:
            add(coll, "busbw_gbs", summ.size_bytes, None, summ.busbw_gbs, True)
        limit = plan.thresholds.min_scaling_efficiency
        if limit is not None and summ.efficiency is not None:
            fails, _ = V.efficiency_failures(plan, {coll: summ})
            add(coll, "scaling_efficiency", summ.size_bytes, limit, summ.efficiency, not fails)
        if plan.check:
            add(coll, "wrong", None, 0.0, float(summ.wrong), summ.wrong == 0)
    return out


def node_diagnostics(steps: list[StepResult], node: str) -> tuple[list[CertDiagnostic], list[str]]:
    """The node's own results in the diagnostic steps it took part in (a perftest pair's is both
    nodes'): what its certificate carries, and why it is refused (a result that is not a pass;
    another node's missing tool is not this node's)."""
    diags: list[CertDiagnostic] = []
    reasons: list[str] = []
    for s in steps:
        d = s.step.diagnostic
        if d is None:
            continue
        mine = [
            n for n in s.diagnostics if n.node == node or (d.over_pairs and n.node == "-".join(s.step.nodes))
        ]
        if not mine:
            reasons.append(_step_refusal(s) if s.verdict != "pass" else f"step {s.step.id}: no result of it")
        for n in mine:
            if n.status != "pass" or n.report is None:
                reasons.append(f"step {s.step.id}: {n.note}")
                continue
            diags.append(CertDiagnostic(
                step=s.step.id, tool=d.tool, on=n.node, version=n.report.version,
                checks_passed=sum(c.status == "pass" for c in n.report.checks),
                figures=n.report.figures, thresholds=d.thresholds,
            ))  # fmt: skip
    return diags, reasons


def stack_summary(stack: str, taken_at: datetime | None, fp: Fingerprint) -> StackSummary:
    """The node's fingerprint in short, with the hash of the whole of it."""
    versions = {k: v for k, v in fp.model_dump().items() if isinstance(v, str) and k not in _NOT_VERSIONS}
    return StackSummary(
        stack=stack,
        taken_at=taken_at,
        versions=versions,
        gpus=[g.name or "?" for g in fp.gpus],
        fingerprint_sha256=digest.sha256(fp.model_dump(mode="json")),
        manifest_sha256=manifest_sha256(stack),
        compatibility="unchanged",
    )


def _targets(rec: RecoveryRecord, node: str) -> bool:
    """Whether a fault record's target ('node2', 'node2:eth1', 'node2 eth1') is node."""
    head = rec.target.replace(":", " ").replace("/", " ").split(" ", 1)[0]
    return head == node


def _faults(records: list[RecoveryRecord], node: str, steps: set[str]) -> list[SurvivedFault]:
    out = []
    for r in records:
        role = "target" if _targets(r, node) else "peer" if r.step in steps else None
        if role is None:
            continue
        out.append(
            SurvivedFault(fault=r.fault, fault_id=r.fault_id, target=r.target, role=role, step=r.step,
                          outcome=r.outcome, recover_s=r.timings.recover_s)
        )  # fmt: skip
    return out


def _run_nodes(rec: RunRecord) -> list[str]:
    if rec.cluster is not None:
        return [n.name for n in rec.cluster.nodes]
    seen: dict[str, None] = {}
    for s in rec.steps:
        seen.update(dict.fromkeys(s.step.nodes))
    return list(seen)


def _step_refusal(res: StepResult) -> str:
    sid = res.step.id
    why = "; ".join(res.reasons)
    blamed = f" (blamed on {', '.join(res.blamed_nodes)})" if res.blamed_nodes else ""
    if res.verdict == "skipped":
        return f"step {sid} did not run"
    what = "failed" if res.verdict == "fail" else "ended in an infrastructure error"
    return f"step {sid} {what}{blamed}" + (f": {why}" if why else "")


def thresholds_from(rec: RunRecord, plan: Plan) -> str:
    """Where a run's thresholds came from: its resolved plan (plan.json), and the hash of them."""
    held = digest.sha256(plan.thresholds.model_dump(mode="json"))
    return f"plan {plan.name} of run {rec.run_id} (plan.json), thresholds {held}"


def certify(
    rec: RunRecord,
    *,
    now: datetime,
    valid_days: int,
    logs: Mapping[str, list[RawLog]] | None = None,
    baseline_sha256: str | None = None,
    baseline_reasons: Mapping[str, list[str]] | None = None,
) -> tuple[list[Certificate], list[Refusal]]:
    """The certificates (sealed: field digests and content hash filled in) and the refusals of a run.

    logs: step id -> the hashes of the step's raw logs (service.raw_logs reads them), copied into
    the certificate of each node of the step. baseline_sha256: the fleet baseline the nodes were
    judged against (certs.fleet.judge_run), named in each certificate; baseline_reasons: node ->
    why it lies outside that baseline (refused).

    Raises ConfigError when the run is still running, valid_days is below 1, or the run has no
    readable plan (its thresholds are unknown).
    """
    if valid_days < 1:
        raise ConfigError(f"--valid-days {valid_days}: must be at least 1")
    if rec.status == "running":
        raise ConfigError(
            f"run {rec.run_id} is still running", hint="issue certificates once it has finished"
        )
    if rec.plan is None:
        raise ConfigError(
            f"{rec.run_dir}: plan.json cannot be read, so the thresholds are unknown",
            hint="certificates are issued only from a run folder with its plan",
        )
    run_wide: list[str] = []
    unrun = [sid for sid in rec.pending if rec.step(sid) is None]
    if unrun and rec.status not in ("accepted", "failed"):
        run_wide.append(f"run {rec.status}: steps {', '.join(unrun)} did not run")
    if rec.unreadable:
        run_wide.append("step results cannot be read: " + ", ".join(sorted(rec.unreadable.values())))

    certs: list[Certificate] = []
    refused: list[Refusal] = []
    fps = rec.fingerprint.nodes if rec.fingerprint else None
    drift = rec.drift
    for node in _run_nodes(rec):
        reasons = list(run_wide)
        if not is_name(node):
            refused.append(Refusal(node=node, reasons=["not a valid node name (models/names.py)"]))
            continue
        mine = [s for s in rec.steps if node in s.step.nodes]
        if not mine:
            reasons.append("took part in no step")
        reasons += [_step_refusal(s) for s in mine if s.verdict != "pass" and s.step.diagnostic is None]
        diagnostics, diag_reasons = node_diagnostics(mine, node)
        reasons += diag_reasons
        records = [r for r in rec.recovery if _targets(r, node) and r.outcome in _UNRECOVERED]
        reasons += [f"fault {r.fault_id} ({r.fault}) on it: {r.outcome}" for r in records]
        summary: StackSummary | None = None
        if fps is not None and rec.fingerprint is not None:
            fp = fps.get(node)
            if fp is None:
                reasons.append(f"no fingerprint in the run (stack {rec.fingerprint.stack})")
            else:
                summary = stack_summary(rec.fingerprint.stack, rec.fingerprint.taken_at, fp)
                drifted = drift.nodes.get(node, []) if drift else []
                if drifted:
                    summary.drift = drifted
                    summary.compatibility = max((d.verdict for d in drifted), key=COMPATS.index)
                    reasons.append(
                        f"differs from stack {summary.stack}: "
                        + "; ".join(f"{d.field} {d.expected} -> {d.found or 'missing'} ({d.verdict})"
                                    for d in drifted)
                    )  # fmt: skip
        tests = [t for s in mine if s.verdict == "pass" for t in step_tests(rec.plan, s)]
        if mine and not reasons and not tests and not diagnostics:
            reasons.append("its steps recorded no figures")
        reasons += [
            f"step {t.step}: {t.collective} {t.metric} {t.measured} misses {t.threshold}"
            for t in tests
            if not t.passed
        ]
        reasons += (baseline_reasons or {}).get(node, [])
        if reasons:
            refused.append(Refusal(node=node, reasons=reasons))
            continue
        steps = {s.step.id for s in mine}
        cert = Certificate(
            node=node,
            run_id=rec.run_id,
            plan=rec.plan_name,
            run_status=rec.status,
            issued_at=now,
            valid_until=now + timedelta(days=valid_days),
            stack=summary,
            tests=tests,
            faults=_faults(rec.recovery, node, steps),
            diagnostics=diagnostics,
            raw_logs=[r for s in mine for r in (logs or {}).get(s.step.id, [])],
            thresholds_from=thresholds_from(rec, rec.plan),
            baseline_sha256=baseline_sha256,
        )
        certs.append(seal(cert))
    return certs, refused


def seal(cert: Certificate) -> Certificate:
    """cert with its field digests and content hash filled in (certs.digest)."""
    return Certificate.model_validate(digest.seal(cert.model_dump(mode="json")))
