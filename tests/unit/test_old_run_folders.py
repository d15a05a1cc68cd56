"""Run folders, JSON files and the results store written by orch before the one-home refactor
(main at 12fd743) are read by this orch: each folder loads, its report is rebuilt in every format
from the folder alone, it ingests into a new store, and the old store opens and lists its runs.

The folders are tests/fixtures/old_runs/<kind>/<run id>/, one of each kind orch writes, made by the
old code (tests/fixtures/old_runs/SOURCE.md says how). They are copied to tmp_path before anything
that writes. Old spellings in them (`no_interruption`, `no-impact`, a migration's `log_ratio` and
`direction`) are read in the current ones (orchestrator/models/decision.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from orchestrator.certs.service import latest, verify
from orchestrator.models.decision import recovery_word
from orchestrator.models.migrate import MigrateRun
from orchestrator.runs.stragglers import MatrixRun
from orchestrator.store.db import SCHEMA_VERSION, ResultsStore
from orchestrator.store.load import RunRecord, finished_steps, load_run, require_model, run_kind

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "old_runs"
OLD_COMMIT = "12fd743"
RUNS = {
    "scale-test": "20261204T235814Z-tiny-9754",
    "scale-test-interrupted": "20261205T001500Z-smoke-killed",
    "serving": "20261204T235843Z-serve-test-f7ca",
    "serving-faults": "20261204T235916Z-serve-fault-4605",
    "recovery": "20261205T000500Z-recovery-kill-worker",
    "isolate": "20261204T235933Z-isolate-6ab3",
    "stragglers": "20261204T235938Z-stragglers-6429",
    "migrate": "20261204T235943Z-migrate-2947",
    "migrate-interrupted": "20261205T001020Z-migrate-99ba",
    "rollback": "20261205T001020Z-rollback-076f",
    "certificate": "r1",
}
MIGRATE_KINDS = ("migrate", "migrate-interrupted", "rollback")
RUN_KIND = {
    "scale-test": "scale-test",
    "scale-test-interrupted": "scale-test",
    "serving": "scale-test",
    "serving-faults": "scale-test",
    "recovery": "recovery-test",
    "isolate": "isolate",
    "stragglers": "stragglers",
    "migrate": "migrate",
    "migrate-interrupted": "migrate",
    "rollback": "rollback",
    "certificate": "scale-test",
}
FORMATS = ("html", "md", "json", "junit", "openmetrics")
OLD_REPORTS = {
    kind: ("md", "html") if kind in MIGRATE_KINDS else ("md", "junit", "openmetrics") for kind in RUNS
}
"""The reports the old code made of each folder (<kind>/<run id>.<format>); the html of the other
kinds is not kept (it carries the time it was made)."""
KEPT_INSIDE = {"migrate", "rollback"}
"""Kinds whose old html report is kept once, as the folder's own report.html: the one `orch report`
made beside the folder was the same bytes (SOURCE.md)."""
OLD_REPORT_ROOT = "/tmp/oldrep"  # where the old code made them (SOURCE.md)
OLD_WORDS = {"no_interruption", "no-impact", "not_recovered", "not_detected"}


def _inside(kind: str, fmt: str) -> bool:
    """The old report of this kind and format is the folder's own (KEPT_INSIDE)."""
    return kind in KEPT_INSIDE and fmt == "html"


@pytest.fixture
def old(tmp_path: Path) -> Path:
    """A copy of tests/fixtures/old_runs (nothing here writes into the fixtures)."""
    return Path(shutil.copytree(OLD, tmp_path / "old_runs"))


def _dir(old: Path, kind: str) -> Path:
    return old / kind / RUNS[kind]


def _raw(path: Path) -> Any:
    return json.loads(path.read_text())


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    got = capsys.readouterr()
    return (e.value.code if isinstance(e.value.code, int) else 1), got.out, got.err


def _status(run_dir: Path) -> str:
    """The status the old code journaled at the run's end (run_finished); interrupted without one
    (the run's process is gone)."""
    events = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
    end = [e for e in events if e["event"] == "run_finished"]
    return str(end[-1]["status"]) if end else "interrupted"


# --- the fixtures themselves ----------------------------------------------------------------------


def test_one_old_folder_of_each_kind_with_its_source() -> None:
    assert {p.name for p in OLD.iterdir() if p.is_dir()} == {*RUNS, "compare"}
    for kind, run_id in RUNS.items():
        reports = [f"{run_id}.{fmt}" for fmt in OLD_REPORTS[kind] if not _inside(kind, fmt)]
        assert sorted(p.name for p in (OLD / kind).iterdir()) == sorted([run_id, *reports])
        assert run_kind(OLD / kind / run_id) == RUN_KIND[kind]
    source = (OLD / "SOURCE.md").read_text()
    assert OLD_COMMIT in source and "orch.db" in source
    for kind, run_id in RUNS.items():
        assert f"`{kind}/{run_id}`" in source, kind
    raw = "".join(p.read_text() for p in OLD.rglob("*.json"))
    # the folders carry the old spellings this module proves are still read
    assert '"no_interruption"' in raw.replace(" ", "") and '"no-impact"' in raw
    assert '"log_ratio"' in raw and '"direction"' in raw


# --- each kind, loaded ----------------------------------------------------------------------------


def test_scale_test_folder(old: Path) -> None:
    d = _dir(old, "scale-test")
    raw = _raw(d / "result.json")
    rec = load_run(d)
    assert rec.warnings == []
    assert rec.kind == "scale-test" and rec.status == raw["status"] == "failed" and rec.exit_code == 1
    assert [s.step.id for s in rec.steps] == ["n1xg1", "n1xg2"] == [s["step"]["id"] for s in raw["steps"]]
    assert {s.step.id: s.verdict for s in rec.steps} == {"n1xg1": "fail", "n1xg2": "pass"}
    assert any("threshold 1e-06 GB/s" in r for r in rec.steps[0].reasons)
    busbw = rec.steps[1].summary["all_reduce"].busbw_gbs
    assert busbw is not None and busbw > 0
    assert busbw == raw["steps"][1]["summary"]["all_reduce"]["busbw_gbs"]
    assert len(rec.steps[1].rows) == len(raw["steps"][1]["rows"]) == 6
    assert rec.nodes == {"localhost": "fail"}


def test_a_killed_scale_test_folder_is_interrupted_with_its_steps_left(
    old: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _dir(old, "scale-test-interrupted")
    events = [json.loads(x)["event"] for x in (d / "journal.jsonl").read_text().splitlines()]
    assert events == ["run_started", "step_done"] and not (d / "result.json").exists()
    rec = load_run(d)
    assert rec.status == "interrupted" and rec.exit_code is None
    assert rec.step_ids == ["n1xg1", "n1xg2", "n1xg4"] and [s.step.id for s in rec.steps] == ["n1xg1"]
    assert list(finished_steps(d, rec.step_ids)) == ["n1xg1"]
    raw = _raw(d / "steps" / "n1xg1" / "result.json")
    assert rec.steps[0].summary["all_reduce"].busbw_gbs == raw["summary"]["all_reduce"]["busbw_gbs"] > 0
    code, out, err = _cli(capsys, "runs", "show", str(d))
    assert code == 0, err
    assert "interrupted" in out and "n1xg2" in out and "n1xg4" in out


def test_scale_test_with_serving_steps_folder(old: Path) -> None:
    d = _dir(old, "serving")
    raw = _raw(d / "steps" / "fake-r1" / "serving.json")
    rec = load_run(d)
    assert rec.warnings == [] and rec.status == "accepted" and rec.exit_code == 0
    assert [s.step.id for s in rec.steps] == ["n1xg1"] and [s.step.id for s in rec.serving] == ["fake-r1"]
    sv = rec.serving[0]
    assert sv.verdict == "pass" and [lv.level for lv in sv.levels] == ["c1", "c4"]
    for lv, lv_raw in zip(sv.levels, raw["levels"], strict=True):
        assert lv.summary is not None and lv.summary.n == lv_raw["summary"]["n"] == 100
        assert lv.summary.ttft_ms.p99 == lv_raw["summary"]["ttft_ms"]["p99"]
        assert lv.summary.output_tokens_per_s == lv_raw["summary"]["output_tokens_per_s"] > 0
        # the old `goodput` was the share now named SLO attainment; goodput is derived as a rate
        old_share = lv_raw["summary"]["goodput"]
        assert "slo_attainment" not in lv_raw["summary"] and lv.summary.slo_attainment == old_share
        assert lv.summary.request_goodput == pytest.approx(
            round(old_share * lv.summary.n) / lv.summary.duration_s
        )


def test_serving_faults_folder_reads_no_impact_as_no_interruption(old: Path) -> None:
    d = _dir(old, "serving-faults")
    raw = _raw(d / "steps" / "fake-r1" / "serving.json")
    old_words = [(f.get("recovery") or {}).get("status") for f in raw["faults"]]
    assert old_words[:4] == ["no-impact", "no-impact", "no-impact", "not-recovered"]
    rec = load_run(d)
    assert rec.warnings == [] and rec.status == "accepted"
    faults = rec.serving[0].faults
    words = [f.recovery.status if f.recovery else None for f in faults]
    assert words == [recovery_word(w) for w in old_words]
    assert words[:4] == ["no-interruption", "no-interruption", "no-interruption", "not-recovered"]
    assert [f.kind for f in faults[:4]] == ["pause-worker"] * 4
    first = faults[0].recovery
    assert first is not None and first.to_steady_s == raw["faults"][0]["recovery"]["to_steady_s"]


def test_recovery_test_folder_reads_underscore_outcomes(old: Path) -> None:
    d = _dir(old, "recovery")
    raws = [_raw(d / "recovery" / f"kill-{k}.json") for k in range(3)]
    assert [r["outcome"] for r in raws] == ["recovered", "no_interruption", "not_recovered"]
    rec = load_run(d)
    assert rec.warnings == [] and rec.kind == "recovery-test"
    assert rec.status == "failed" and rec.exit_code == 1 and rec.plan_name == "recovery-kill-worker"
    assert rec.request is not None and rec.request.repeat == 3 and rec.request.target == "node2:1"
    assert [r.outcome for r in rec.recovery] == ["recovered", "no-interruption", "not-recovered"]
    assert [r.verdict for r in rec.recovery] == [r["verdict"] for r in raws]
    assert rec.recovery[0].timings.recover_s == raws[0]["timings"]["recover_s"] == 2.5
    assert all(r.heartbeats for r in rec.recovery)


def test_isolate_folder(old: Path) -> None:
    d = _dir(old, "isolate")
    raw = _raw(d / "isolation.json")
    rec = load_run(d)
    assert rec.warnings == [] and rec.kind == "isolate" and rec.status == "failed"
    iso = rec.isolation
    assert iso is not None and iso.reference_gbs == raw["reference_gbs"]
    assert [c.nodes for c in iso.isolation.culprits] == [["node3"]]
    assert iso.isolation.good == ["node1", "node2"]
    assert len(iso.isolation.rounds) == len(raw["isolation"]["rounds"]) == 4


def test_stragglers_folder(old: Path) -> None:
    d = _dir(old, "stragglers")
    matrix = require_model(MatrixRun, d, d / "stragglers.json")
    assert matrix.stragglers == ["node4"] and matrix.status == "failed" and len(matrix.pairs) == 15
    rec = load_run(d)
    assert rec.warnings == [] and rec.kind == "stragglers" and rec.status == "failed"
    assert len(rec.steps) == 15 and {s.verdict for s in rec.steps} == {"pass"}
    slow = [p.figure or 0.0 for p in matrix.pairs if "node4" in (p.a, p.b)]
    others = [p.figure or 0.0 for p in matrix.pairs if "node4" not in (p.a, p.b)]
    assert len(slow) == 5 and min(slow) > 2 * max(others) > 0  # the old latencies, node4's doubled


def test_migrate_folder_reads_log_ratio_and_direction(old: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _dir(old, "migrate")
    raw = _raw(d / "migrate.json")
    state = require_model(MigrateRun, d, d / "migrate.json")
    assert state.status == "failed" and state.failed_phase == "compare" and state.rolled_back
    assert state.comparison is not None
    coll = state.comparison.collectives[0]
    raw_sizes = raw["comparison"]["collectives"][0]["sizes"]
    assert len(coll.sizes) == len(raw_sizes) == 8
    for size, raw_size in zip(coll.sizes, raw_sizes, strict=True):
        old_change = raw_size["change"]
        assert size.change.change == old_change["direction"]
        assert size.change.ratio == pytest.approx(math.exp(old_change["log_ratio"]))
        assert size.change.band == pytest.approx(math.expm1(old_change["band"]))
    assert [s.change.change for s in coll.sizes].count("worse") == 6
    # written again in the current form, it reads back the same
    code, _, err = _cli(capsys, "report", str(d), "--format", "json", "--out", str(d.parent / "again.json"))
    assert code == 0, err
    assert MigrateRun.model_validate_json((d.parent / "again.json").read_text()) == state


def test_an_interrupted_migrate_folder_and_the_rollback_to_its_reference(old: Path) -> None:
    d = _dir(old, "migrate-interrupted")
    raw = _raw(d / "migrate.json")
    state = require_model(MigrateRun, d, d / "migrate.json")
    assert state.status == raw["status"] == "running" and _status(d) == "interrupted"
    assert [(p.phase, p.state) for p in state.phases] == [(p["phase"], p["state"]) for p in raw["phases"]]
    assert state.phases[-1].phase == "compare" and state.phases[-1].state == "failed"
    r = _dir(old, "rollback")
    back = require_model(MigrateRun, r, r / "migrate.json")
    assert back.kind == "rollback" and back.status == "accepted" and back.from_stack == "cpu-gloo"
    assert [p.phase for p in back.phases] == ["rollback", "certify"]
    cert = back.certification
    assert (
        cert is not None
        and cert.against == "reference"
        and cert.reference_from == RUNS["migrate-interrupted"]
    )
    assert [n.ok for n in cert.nodes] == [True, True, True]


def test_an_old_certificate_verifies_is_found_and_still_catches_an_edit(
    old: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = old / "certificate"
    path = _dir(old, "certificate") / "certs" / "localhost.json"
    raw = _raw(path)
    assert verify(path).ok
    found, cert, problems = latest("localhost", root)
    assert found == path and problems == [] and cert.run_id == "r1" and cert.run_status == "accepted"
    assert len(cert.tests) == len(raw["tests"]) > 0 and cert.tests[0].measured == raw["tests"][0]["measured"]
    assert load_run(_dir(old, "certificate")).status == "accepted"
    code, out, err = _cli(capsys, "cert", "verify", str(path))
    assert code == 0 and "intact" in out + err
    raw["tests"][0]["measured"] += 1
    path.write_text(json.dumps(raw))
    check = verify(path)
    assert not check.ok and "tests[0] changed" in check.problems


# --- reports in every format, from the folder alone -----------------------------------------------


def _check_report(fmt: str, text: str, rec: RunRecord) -> None:
    if fmt == "html":
        assert text.lstrip().lower().startswith("<!doctype html") and rec.run_id in text
    elif fmt == "md":
        assert text.startswith("# orch") and rec.run_id in text and rec.status in text
    elif fmt == "json":
        got = json.loads(text)
        assert got["run_id"] == rec.run_id and got["status"] == rec.status
    elif fmt == "junit":
        root = ET.fromstring(text)
        props = {p.get("name"): p.get("value") for p in root.iter("property")}
        assert props["run_id"] == rec.run_id and props["status"] == rec.status
        assert int(root.get("tests") or -1) == len(list(root.iter("testcase")))
    else:
        lines = text.splitlines()
        assert lines[-1] == "# EOF"
        samples = [x for x in lines if not x.startswith("#")]
        assert samples and all(
            re.fullmatch(r"orch_[a-z_]+\{[^}]*\} -?[0-9.e+-]+|orch_[a-z_]+ \S+", x) for x in samples
        )
        accepted = next(x for x in samples if x.startswith("orch_run_accepted{"))
        assert f'run_id="{rec.run_id}"' in accepted and accepted.endswith(
            " 1.0" if rec.status == "accepted" else " 0.0"
        )


@pytest.mark.parametrize("kind", [k for k in RUNS if k not in MIGRATE_KINDS])
def test_every_report_format_is_rebuilt_from_an_old_folder(
    kind: str, old: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _dir(old, kind)
    rec = load_run(d)
    assert rec.status == _status(d)
    texts = {}
    for fmt in FORMATS:
        out = tmp_path / f"report.{fmt}"
        code, _, err = _cli(capsys, "report", str(d), "--format", fmt, "--out", str(out))
        assert code == 0, err
        texts[fmt] = out.read_text()
        _check_report(fmt, texts[fmt], rec)
    every = "".join(texts.values())
    assert not OLD_WORDS & set(re.findall(r"[a-z]+[_-][a-z]+", every))
    if kind == "serving-faults":
        assert "no-interruption" in texts["md"] and "not-recovered" in texts["md"]
        junit = ET.fromstring(texts["junit"])
        assert junit.get("failures") == "1"  # the one injection that did not recover
    if kind == "recovery":
        assert "repeats: 3 of 3 done" in texts["md"] and "no-interruption" in texts["md"]
    if kind == "stragglers":  # the heatmap and the verdict, recomputed from the old 2-node steps
        assert '<ul class="stragglers"><li>node4: ' in texts["html"]
        assert re.findall(r'class="tick (?:row|col) flagged"[^>]*>([^<]+)<', texts["html"]) == [
            "node4",
            "node4",
        ]
    if kind == "isolate":
        assert "node3" in texts["md"] and "node3" in texts["html"]


def test_a_migrate_folder_reports_in_its_own_formats(
    old: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _dir(old, "migrate")
    raw = _raw(d / "migrate.json")
    sizes = raw["comparison"]["collectives"][0]["sizes"]
    at_16k = next(s["change"] for s in sizes if s["size_bytes"] == 16384)
    for fmt in ("md", "html", "json"):
        out = tmp_path / f"migrate.{fmt}"
        code, _, err = _cli(capsys, "report", str(d), "--format", fmt, "--out", str(out))
        assert code == 0, err
        text = out.read_text()
        assert RUNS["migrate"] in text and "cpu-gloo-slow" in text
        if fmt == "md":
            assert (
                "the compare gate failed: cpu-gloo-slow is worse" in text
                and "rolled back to cpu-gloo" in text
            )
            # the B/A and band columns from the old log-scale figures, as the old code showed them
            row = next(x for x in text.splitlines() if "| 16 KiB |" in x)
            assert f"{100 * math.expm1(at_16k['log_ratio']):.1f}%" in row and f"±{at_16k['band']:.3f}" in row
            assert "| worse | flagged |" in row
    for fmt in ("junit", "openmetrics"):
        code, _, err = _cli(capsys, "report", str(d), "--format", fmt, "--out", str(tmp_path / "x"))
        assert code == 2 and f"a migrate run has no {fmt} report" in err


CLIENT_COUNT = (
    " (client-side count; closed loop: each worker retries 50 ms after a refused connection, so the count"
    " while the engine is down is the client's retry pace, not a rate of the service)"
)
# issue 24: the share orch called goodput is SLO attainment; goodput (req/s) is a column added after it
SLO_WORDS = {
    "### SLOs and goodput": "### SLOs, attainment and goodput",
    "| goodput | of n |": "| SLO attainment | of n |",
}
REWORDED: dict[tuple[str, str], dict[str, str]] = {
    # Wording changed on purpose since 12fd743, old text -> new text (the figures and verdicts stay).
    # Columns added to a table need no entry (the old cells must still be there, in order).
    ("serving-faults", "md"): {"| failed |": "| failed (client-side count) |", **SLO_WORDS},
    ("serving", "md"): SLO_WORDS,
    ("serving", "openmetrics"): {
        "orch_serving_goodput_ratio": "orch_serving_slo_attainment_ratio",
        "ratio share of counted requests that succeeded": "ratio SLO attainment: share of counted requests "
        "that succeeded",
    },
    ("serving-faults", "junit"): {"0 failed, 0 aborted;": f"0 failed, 0 aborted{CLIENT_COUNT};"},
    ("isolate", "md"): {  # the isolation search's confirmation round (docs/isolation.md)
        "(the bar for one bad node, ceil(log2 N) + 2: 4)": (
            "(the bound for one bad node, the search and its repeat: 3)"
        ),
        "median single (its kind) |": (
            "median single (its kind); a repeat also within its kind&#x27;s noise band"
            " (3 x 1.4826 x MAD of log busbw) |"
        ),
    },
}
BOX = set("━┏┓┗┛┡┩┣┫┳┻╇╋└┘┴┬├┤─│┃ ")
# Kinds with no step cases: their JUnit gained the run itself as one case (report/formats.py
# _run_case; the old file said tests="0" failures="0" of a failed run, which a CI passes).
RUN_CASE = {"recovery", "isolate"}


# Sections added on purpose since 12fd743: (kind, format) -> the heading of the one section the old
# report lacked (report/stragglers.py: the Markdown report gained the straggler section the HTML had).
ADDED: dict[tuple[str, str], str] = {("stragglers", "md"): "## Stragglers"}
# OpenMetrics families added on purpose since 12fd743: (kind, format) -> the family the old file lacked.
ADDED_FAMILY = {("serving", "openmetrics"): "orch_serving_goodput_requests_per_second"}


def _without_the_added_section(md: str, heading: str) -> str:
    """The Markdown as the old code wrote it: the added section (its heading to the next "## ")
    taken out, after checking that it is there once and names the old run's straggler."""
    parts = re.split(rf"\n\n{re.escape(heading)}\n(.*?)(?=\n\n## |\Z)", md, flags=re.S)
    assert len(parts) == 3 and "- node4: median" in parts[1], md
    return parts[0] + parts[2]


def _without_the_run_case(junit: str, kind: str) -> str:
    """The JUnit as the old code wrote it: the run's one case and its counts taken out, after
    checking that the case is there, the only one, and failed (both runs of RUN_CASE failed)."""
    cases = re.findall(r"\n *<testcase [^>]*?(?:/>|>.*?</testcase>)", junit, flags=re.S)
    assert len(cases) == 1 and "<failure " in cases[0], (kind, junit)
    junit = junit.replace(cases[0], "")
    return re.sub(r' (tests|failures|errors|skipped)="\d+"', lambda m: f' {m.group(1)}="0"', junit)


def _cells(line: str) -> list[str] | None:
    """The cells of a Markdown or terminal table row; None for any other line."""
    if line.startswith("|"):
        return [c.strip() for c in line.strip().strip("|").split("|")]
    if line[:1] in ("│", "┃"):
        return [c.strip() for c in re.split("[│┃]", line.strip())[1:-1]]
    return None


def _subsequence(small: list[str], big: list[str]) -> bool:
    rest = iter(big)
    return all(any(c == x for x in rest) for c in small)


def _same_to_the_user(before: str, after: str, reworded: dict[str, str]) -> None:
    """after says what before said, line for line: equal, but for the wording in reworded and for
    columns added to a table (every old cell is still there, in order); table borders are free."""
    old_lines, new_lines = before.splitlines(), after.splitlines()
    assert len(new_lines) == len(old_lines), "lines added or removed"
    for old_line, new_line in zip(old_lines, new_lines, strict=True):
        for was, now in reworded.items():
            old_line = old_line.replace(was, now)
        if old_line == new_line or (set(old_line) <= BOX and set(new_line) <= BOX):
            continue
        old_cells, new_cells = _cells(old_line), _cells(new_line)
        assert old_cells is not None and new_cells is not None, (old_line, new_line)
        assert _subsequence(old_cells, new_cells), (old_line, new_line)


@pytest.mark.parametrize("kind", list(RUNS))
def test_each_report_says_what_the_old_code_said(
    kind: str, old: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every line as the old code wrote it, but for the folder's path, the recovery status words in
    their one spelling (`no-impact` was the old word of a serving fault that did not interrupt the
    service), the rewording listed in REWORDED, the sections listed in ADDED and columns added to
    tables."""
    d = _dir(old, kind)
    for fmt in OLD_REPORTS[kind]:
        out = d.parent / f"{d.name}.{fmt}"  # where the old one was written: relative links are alike
        kept = OLD / kind / d.name / "report.html" if _inside(kind, fmt) else OLD / kind / out.name
        out.unlink(missing_ok=True)
        code, _, err = _cli(capsys, "report", str(d), "--format", fmt, "--out", str(out))
        assert code == 0, err
        before = kept.read_text().replace(OLD_REPORT_ROOT, str(old))
        before = re.sub("|".join(OLD_WORDS), lambda m: str(recovery_word(m.group())), before)
        after = out.read_text()
        if fmt == "junit" and kind in RUN_CASE:
            after = _without_the_run_case(after, kind)
        if (kind, fmt) in ADDED:
            after = _without_the_added_section(after, ADDED[(kind, fmt)])
        if (kind, fmt) in ADDED_FAMILY:
            family = re.compile(rf"^(# \w+ )?{ADDED_FAMILY[(kind, fmt)]}\b")
            after = "".join(x for x in after.splitlines(keepends=True) if not family.match(x))
        _same_to_the_user(before, after, REWORDED.get((kind, fmt), {}))


COMPARES = {  # A, B, the old exit code: a serving A/B (worse), a ladder against a killed run (same)
    "20261204T235843Z-serve-test-f7ca--20261204T235916Z-serve-fault-4605": ("serving", "serving-faults", 1),
    "r1--20261205T001500Z-smoke-killed": ("certificate", "scale-test-interrupted", 0),
}


@pytest.mark.parametrize("name", list(COMPARES))
def test_compare_of_two_old_folders_says_what_the_old_code_said(
    name: str, old: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, old_code = COMPARES[name]
    monkeypatch.setenv("COLUMNS", "200")  # as the old output was made (SOURCE.md)
    code, out, err = _cli(
        capsys, "compare", str(_dir(old, a)), str(_dir(old, b)), "--store", str(old / "none.db")
    )
    assert code == old_code

    # one rewording: a reason's band as the range it admits, `-52.0%..+108.2%` (decision.band_text),
    # where the old code printed `+-108.2%`; the low edge, from the rounded upper one, compared by
    # its rule (1/(1 + band) - 1 within rounding), then masked
    def low_edge(m: re.Match[str]) -> str:
        assert abs(-float(m[1]) / 100 - (1 / (1 + float(m[2]) / 100) - 1)) < 0.0015, m[0]
        return f"(band ~..+{m[2]}%"

    before = re.sub(r"\(band \+-(\d+\.\d)%", r"(band ~..+\1%", (OLD / "compare" / f"{name}.out").read_text())
    out = re.sub(r"\(band -(\d+\.\d)%\.\.\+(\d+\.\d)%", low_edge, out)
    _same_to_the_user(before, out, {})
    assert err == (OLD / "compare" / f"{name}.err").read_text()


# --- the results store ----------------------------------------------------------------------------


def test_every_old_folder_ingests_into_a_new_store_and_reads_back(old: Path, tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    with ResultsStore.open(db) as store:
        for kind in RUNS:
            store.ingest(_dir(old, kind))
        rows = {r.run_id: r for r in store.runs(limit=100)}
        assert set(rows) == set(RUNS.values())
        for kind, run_id in RUNS.items():
            assert rows[run_id].status == _status(_dir(old, kind)), kind
            got = store.run(run_id)
            assert got is not None and got.run_dir == _dir(old, kind)
        assert rows[RUNS["stragglers"]].steps_done == rows[RUNS["stragglers"]].steps_planned == 15
        assert rows[RUNS["serving"]].steps_done == 2
    with sqlite3.connect(db) as c:
        before = c.execute("SELECT count(*) FROM coll_rows").fetchone()[0]
    with ResultsStore.open(db) as store:
        store.ingest(_dir(old, "scale-test"))  # idempotent
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM coll_rows").fetchone()[0] == before > 0
        outcomes = [r[0] for r in c.execute("SELECT outcome FROM recoveries ORDER BY repeat")]
        statuses = {r[0] for r in c.execute("SELECT status FROM serving_faults WHERE status IS NOT NULL")}
    assert outcomes == ["recovered", "no-interruption", "not-recovered"]
    assert statuses == {"no-interruption", "not-recovered"}


def test_the_old_store_opens_and_lists_its_runs(
    old: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = old / "orch.db"
    with sqlite3.connect(db) as c:
        old_version = c.execute("PRAGMA user_version").fetchone()[0]
    assert 1 <= old_version <= SCHEMA_VERSION
    with ResultsStore.open(db) as store:
        assert store.version == SCHEMA_VERSION and store.integrity_ok()
        rows = {r.run_id: r for r in store.runs(limit=100)}
        assert set(rows) == set(RUNS.values())
        for kind, run_id in RUNS.items():
            assert rows[run_id].status == _status(_dir(old, kind)), kind
        assert rows[RUNS["scale-test"]].plan == "tiny" and rows[RUNS["scale-test"]].steps_done == 2
        assert [r.run_id for r in store.runs(plan="recovery-kill-worker")] == [RUNS["recovery"]]
        raw = _raw(_dir(old, "scale-test") / "result.json")
        assert store.busbw(RUNS["scale-test"]) == {
            (st["step"]["id"], r["collective"], r["size_bytes"]): r["out_of_place"]["busbw_gbs"]
            for st in raw["steps"]
            for r in st["rows"]
        }
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = _cli(capsys, "runs", "list", "--store", str(db))
    assert code == 0, err
    for kind, run_id in RUNS.items():
        line = next(x for x in out.splitlines() if run_id in x)
        assert f" {_status(_dir(old, kind))} " in line
    code, out, err = _cli(capsys, "history", "--plan", "tiny", "--store", str(db))
    assert code == 0, err
    n1xg2 = next(st for st in raw["steps"] if st["step"]["id"] == "n1xg2")
    assert f"{n1xg2['summary']['all_reduce']['busbw_gbs']:.4g}" in out and RUNS["scale-test"] in out
