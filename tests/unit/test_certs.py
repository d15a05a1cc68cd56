"""Per-node certificates: who gets one, what it holds, and that any edit is found."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_store_build import make_run, real_rows

from orchestrator.certs import digest
from orchestrator.certs.build import certify
from orchestrator.certs.service import cert_path, entries, issue, latest, verify
from orchestrator.errors import ConfigError
from orchestrator.metrics import verdict as V
from orchestrator.models.fingerprint import DriftReport, FieldDrift, Fingerprint, FingerprintSet
from orchestrator.models.plan import BusbwThreshold, Step
from orchestrator.models.recovery import RecoveryRecord, RecoveryTimings
from orchestrator.models.run import RunRecord, StepResult
from orchestrator.plan import resolve_plan

NOW = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def _step(sid: str, nodes: list[str], index: int) -> Step:
    plan = resolve_plan("smoke")
    return Step(
        id=sid,
        index=index,
        nnodes=len(nodes),
        ranks_per_node=1,
        nodes=nodes,
        world_size=len(nodes),
        collectives=list(plan.collectives),
        sizes=plan.sizes.values(),
    )


def _result(step: Step, verdict: str, reasons: list[str] | None = None) -> StepResult:
    rows = [r.model_copy(update={"nranks": step.world_size}) for r in real_rows()]
    return StepResult.model_validate(
        {
            "step": step,
            "rows": rows,
            "summary": V.summarize(rows),
            "verdict": verdict,
            "reasons": reasons or [],
        }
    )


def _record(steps: list[tuple[str, list[str], str]], **kw: Any) -> RunRecord:
    plan = resolve_plan("smoke")
    results = [
        _result(_step(sid, nodes, i), v, ["busbw 0.1 GB/s < threshold 5 GB/s"] if v == "fail" else None)
        for i, (sid, nodes, v) in enumerate(steps)
    ]
    fields: dict[str, Any] = dict(run_id="r1", run_dir=Path("/nonexistent/r1"), plan_name="smoke",
                                  backend="slurm", status="failed", plan=plan, step_ids=[s[0] for s in steps],
                                  steps=results)  # fmt: skip
    fields.update(kw)
    return RunRecord.model_validate(fields)


LADDER = [
    ("n1a", ["node1"], "pass"),
    ("n1b", ["node2"], "pass"),
    ("n2a", ["node1", "node2"], "pass"),
    ("n2b", ["node3", "node4"], "fail"),
]


def test_only_nodes_whose_every_step_passed_are_certified() -> None:
    certs, refused = certify(_record(LADDER), now=NOW, valid_days=7)
    assert [c.node for c in certs] == ["node1", "node2"]
    assert {r.node for r in refused} == {"node3", "node4"}
    for r in refused:
        assert r.reasons == ["step n2b failed: busbw 0.1 GB/s < threshold 5 GB/s"]
    node1 = certs[0]
    assert {t.step for t in node1.tests} == {"n1a", "n2a"}
    assert node1.valid_until - node1.issued_at == timedelta(days=7)
    assert node1.run_id == "r1" and node1.content_hash.startswith("sha256:")


def test_tests_carry_the_plans_threshold_and_the_row_it_was_held_against() -> None:
    rec = _record(LADDER[:1])
    assert rec.plan is not None
    size = rec.steps[0].rows[-1].size_bytes
    rec.plan.thresholds.busbw = [BusbwThreshold(collective="all_reduce", min_gbs=1e-6, size=size)]
    rec.plan.thresholds.min_scaling_efficiency = None
    (cert,), _ = certify(rec, now=NOW, valid_days=1)
    ar = [t for t in cert.tests if t.collective == "all_reduce" and t.metric == "busbw_gbs"]
    row = next(r for r in rec.steps[0].rows if r.collective == "all_reduce" and r.size_bytes == size)
    assert len(ar) == 1
    assert (ar[0].threshold, ar[0].measured, ar[0].size_bytes) == (1e-6, row.out_of_place.busbw_gbs, size)
    assert ar[0].passed and ar[0].ranks == 1 and ar[0].nnodes == 1
    # collectives the plan sets no busbw threshold for are recorded with none
    others = [t for t in cert.tests if t.metric == "busbw_gbs" and t.collective != "all_reduce"]
    assert others and all(t.threshold is None for t in others)
    wrong = [t for t in cert.tests if t.metric == "wrong"]
    assert {t.collective for t in wrong} == set(rec.plan.collectives) and all(t.measured == 0 for t in wrong)


def test_a_node_that_missed_a_threshold_in_a_passing_step_is_refused() -> None:
    rec = _record(LADDER[:1])
    assert rec.plan is not None
    rec.plan.thresholds.busbw = [BusbwThreshold(collective="all_reduce", min_gbs=1e9)]
    certs, refused = certify(rec, now=NOW, valid_days=1)
    assert certs == []
    assert "all_reduce busbw_gbs" in refused[0].reasons[0] and "1000000000" in refused[0].reasons[0]


def _fp(node: str) -> Fingerprint:
    return Fingerprint(node=node, os="Debian 12", kernel="6.1.0", torch="2.13.0")


def test_drifted_or_unfingerprinted_nodes_are_refused_and_the_fingerprint_is_summarised() -> None:
    fps = FingerprintSet(stack="cpu-gloo", taken_at=NOW, nodes={"node1": _fp("node1"), "node2": _fp("node2")})
    drift = DriftReport(
        stack="cpu-gloo",
        nodes={
            "node2": [FieldDrift(field="torch", expected="2.13.0", found="2.12.0", verdict="needs porting")]
        },
    )
    rec = _record(LADDER[:3], fingerprint=fps, drift=drift)
    certs, refused = certify(rec, now=NOW, valid_days=1)
    assert [c.node for c in certs] == ["node1"]
    assert refused[0].node == "node2"
    assert refused[0].reasons == ["differs from stack cpu-gloo: torch 2.13.0 -> 2.12.0 (needs porting)"]
    s = certs[0].stack
    assert s is not None and s.compatibility == "unchanged" and s.versions["torch"] == "2.13.0"
    assert s.fingerprint_sha256 == digest.sha256(_fp("node1").model_dump(mode="json"))
    # a node of the ladder without a fingerprint in a fingerprinted run
    fps.nodes.pop("node1")
    _, refused = certify(rec, now=NOW, valid_days=1)
    assert "no fingerprint in the run (stack cpu-gloo)" in refused[0].reasons


def _fault(fid: str, target: str, step: str, outcome: str) -> RecoveryRecord:
    return RecoveryRecord.model_validate(
        dict(fault_id=fid, fault="kill_worker", target=target, step=step, injected_at=NOW, outcome=outcome,
             timings=RecoveryTimings(recover_s=1.5))
    )  # fmt: skip


def test_faults_survived_are_listed_and_an_unrecovered_one_refuses_its_target() -> None:
    rec = _record(LADDER[:3], recovery=[_fault("f1", "node1:eth1", "n2a", "recovered")])
    certs, _ = certify(rec, now=NOW, valid_days=1)
    by = {c.node: c for c in certs}
    assert [(f.fault_id, f.role, f.recover_s) for f in by["node1"].faults] == [("f1", "target", 1.5)]
    assert [(f.fault_id, f.role) for f in by["node2"].faults] == [("f1", "peer")]
    rec.recovery = [_fault("f2", "node2", "n2a", "not-recovered")]
    certs, refused = certify(rec, now=NOW, valid_days=1)
    assert [c.node for c in certs] == ["node1"]
    assert refused[0].reasons == ["fault f2 (kill_worker) on it: not-recovered"]


def test_running_runs_and_bad_validity_are_refused() -> None:
    with pytest.raises(ConfigError, match="still running"):
        certify(_record(LADDER, status="running"), now=NOW, valid_days=1)
    with pytest.raises(ConfigError, match="valid-days"):
        certify(_record(LADDER), now=NOW, valid_days=0)


def test_an_interrupted_run_certifies_no_one_with_steps_left() -> None:
    rec = _record(LADDER[:2], status="interrupted", step_ids=["n1a", "n1b", "n2a"])
    certs, refused = certify(rec, now=NOW, valid_days=1)
    assert certs == []
    assert all("run interrupted: steps n2a did not run" in r.reasons for r in refused)


# --- the content hash ------------------------------------------------------------------------------


def _sealed() -> dict[str, Any]:
    (cert, *_), _ = certify(_record(LADDER[:3]), now=NOW, valid_days=3)
    return json.loads(json.dumps(cert.model_dump(mode="json")))


def test_an_intact_certificate_has_no_changes_whatever_the_layout() -> None:
    data = _sealed()
    assert digest.changes(data) == []
    reordered = dict(reversed(list(data.items())))
    assert digest.changes(json.loads(json.dumps(reordered, indent=7))) == []


def test_one_changed_figure_is_named() -> None:
    data = _sealed()
    data["tests"][3]["measured"] = data["tests"][3]["measured"] + 0.001
    problems = digest.changes(data)
    assert problems[0].startswith("the content hash does not match")
    assert problems[1:] == ["tests[3] changed"]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d.update(valid_until="2099-01-01T00:00:00Z"), "valid_until changed"),
        (lambda d: d.update(note="trust me"), "note added"),
        (lambda d: d.pop("faults"), "faults removed"),
        (lambda d: d["tests"].pop(), "tests[{last}] removed"),
        (lambda d: d["tests"][0].update(measured=str(d["tests"][0]["measured"])), "tests[0] changed"),
    ],
)
def test_every_kind_of_edit_is_named(edit: Any, named: str) -> None:
    data = _sealed()
    last = len(data["tests"]) - 1
    edit(data)
    assert named.format(last=last) in digest.changes(data)


def test_editing_the_digests_to_match_is_still_caught() -> None:
    data = _sealed()
    data["tests"][0]["passed"] = not data["tests"][0]["passed"]
    data["field_digests"] = digest.field_digests(data)
    problems = digest.changes(data)
    assert problems and "field_digests or content_hash was edited" in problems


def _leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))]
    if isinstance(obj, list):
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))]
    return [path]


@settings(max_examples=60, deadline=None)
@given(pick=st.integers(min_value=0), value=st.one_of(st.integers(), st.floats(allow_nan=False), st.text()))
def test_any_leaf_set_to_another_value_is_detected(pick: int, value: Any) -> None:
    data = _sealed()
    # the signature is outside the hash (it signs it): test_cert_sign.py covers its edits
    leaves = [p for p in _leaves(data) if p[0] not in ("content_hash", "field_digests", "signature")]
    path = leaves[pick % len(leaves)]
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    same = parent[path[-1]] == value and type(parent[path[-1]]) is type(value)
    parent[path[-1]] = value
    assert (digest.changes(data) == []) == same


# --- files and commands ----------------------------------------------------------------------------


def test_issue_writes_private_files_that_verify_and_show(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    res = issue(run, valid_days=10, now=NOW)
    assert list(res.issued) == ["localhost"] and res.refused == []
    path = cert_path(run, "localhost")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert verify(path).ok
    found, cert, problems = latest("localhost", tmp_path)
    assert found == path and problems == [] and cert.valid_until == NOW + timedelta(days=10)
    with pytest.raises(ConfigError, match="not a valid name"):
        latest("../etc", tmp_path)


def test_verify_names_the_changed_figure_in_the_file(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    issue(run, now=NOW)
    path = cert_path(run, "localhost")
    text = path.read_text()
    data = json.loads(text)
    old = data["tests"][2]["measured"]
    data["tests"][2]["measured"] = old + 1
    path.write_text(json.dumps(data, indent=2))
    check = verify(path)
    assert not check.ok and "tests[2] changed" in check.problems


def test_list_expired_and_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from orchestrator.cli import app

    old = make_run(tmp_path, "r-old")
    new = make_run(tmp_path, "r-new")
    issue(old, valid_days=1, now=NOW - timedelta(days=40))
    issue(new, valid_days=30)
    got = entries(tmp_path)
    assert [(e.run_id, e.expired, e.intact) for e in got] == [("r-old", True, True), ("r-new", False, True)]
    runner = CliRunner()

    def orch(*args: str) -> tuple[int, str]:
        r = runner.invoke(app, list(args), standalone_mode=False)
        assert r.exception is None, r.output
        return int(r.return_value), r.output

    rc, text = orch("cert", "list", "--expired", "--dir", str(tmp_path))
    assert rc == 0 and "r-old" in text and "r-new" not in text
    path = cert_path(old, "localhost")
    assert orch("cert", "verify", str(path))[0] == 0
    data = json.loads(path.read_text())
    data["tests"][0]["threshold"] = 0.5
    path.write_text(json.dumps(data))
    rc, text = orch("cert", "verify", str(path))
    assert rc == 1 and "tests[0] changed" in text
    rc, text = orch("cert", "show", "localhost", "--dir", str(tmp_path))
    assert rc == 0 and "r-new" in text
    rc, text = orch("cert", "issue", str(new), "--valid-days", "5")
    assert rc == 0 and "certified" in text


def test_report_sections_list_certified_and_refused_nodes() -> None:
    from orchestrator.report.certs import certificates_html, certificates_md

    certs, refused = certify(_record(LADDER), now=NOW, valid_days=3)
    text = certificates_md(certs, refused)
    assert "| node1 | r1 |" in text and "- node3: step n2b failed" in text
    html = certificates_html(certs, refused)
    assert html.count("<tr><td>") == 2 and certs[0].content_hash in html


def test_a_run_with_unreadable_step_results_certifies_no_one() -> None:
    rec = _record(LADDER[:3], unreadable={"n3": "steps/n3/result.json"})
    certs, refused = certify(rec, now=NOW, valid_days=1)
    assert certs == []
    assert all("step results cannot be read: steps/n3/result.json" in r.reasons for r in refused)


def test_a_certificate_without_a_time_zone_is_invalid_not_a_crash(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    issue(run, now=NOW)
    path = cert_path(run, "localhost")
    data = json.loads(path.read_text())
    data["valid_until"] = "2027-01-01T00:00:00"
    path.write_text(json.dumps(data))
    (entry,) = entries(tmp_path)
    assert not entry.intact and any("valid_until" in p for p in entry.problems)


def test_the_cli_exits_1_on_a_refusal_and_2_on_a_file_that_is_no_certificate(tmp_path: Path) -> None:
    from orchestrator.cli import main

    run = make_run(tmp_path, "r1", finished=False, done_steps=2)
    with pytest.raises(SystemExit) as info:
        main(["cert", "issue", str(run)])
    assert info.value.code == 1
    assert not (run / "certs").exists()
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    with pytest.raises(SystemExit) as info:
        main(["cert", "verify", str(junk)])
    assert info.value.code == 2
