"""The HTML report: thresholds required against measured, #wrong, why a run was refused, and
plurals (issue 12, new user item 14)."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from test_store_build import make_run

from orchestrator.models.plan import BusbwThreshold, Plan, format_size
from orchestrator.models.run import RunResult
from orchestrator.report.formats import render
from orchestrator.store.load import load_run
from orchestrator.store.rundir import atomic_write
from orchestrator.text import plural


class _Tables(HTMLParser):
    """Rows (lists of cell texts) of every <table>, keyed by the id of the <h2> before it."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._section = ""
        self._cell: list[str] | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            self._section = dict(attrs).get("id") or ""
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables.setdefault(self._section, []).append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def tables(html: str) -> dict[str, list[list[str]]]:
    p = _Tables()
    p.feed(html)
    return p.tables


def _set_plan(run: Path, **thresholds: object) -> Plan:
    plan = Plan.model_validate_json((run / "plan.json").read_text())
    plan = plan.model_copy(update={"thresholds": plan.thresholds.model_copy(update=thresholds)})
    atomic_write(run / "plan.json", plan.model_dump_json())
    return plan


def test_thresholds_required_against_measured(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    _set_plan(
        run,
        busbw=[
            BusbwThreshold(collective="all_reduce", min_gbs=1000.0),
            BusbwThreshold(collective="all_gather", min_gbs=1e-6, size=1024),
        ],
    )
    rec = load_run(run)
    rows = tables(render(rec, "html", run))["thresholds"]
    assert rows[0] == ["step", "threshold", "required", "measured", "verdict"]
    body = rows[1:]
    assert len(body) == 2 * len(rec.steps)
    for s in rec.steps:
        mine = [r for r in body if r[0] == s.step.id]
        big = s.summary["all_reduce"]
        assert mine[0][1:] == [
            "busbw all_reduce@largest size",
            ">= 1000 GB/s",
            f"{big.busbw_gbs:.4g} GB/s at 1M",
            "fail",
        ]
        # all_gather at 1K runs as 1K rounded to 16-byte blocks per rank: a row is always found
        got = next(
            r for r in s.rows if r.collective == "all_gather" and r.size_bytes <= 1024 and r.size_bytes > 1000
        )
        assert mine[1][2:] == [
            ">= 1e-06 GB/s",
            f"{got.out_of_place.busbw_gbs:.4g} GB/s at {format_size(got.size_bytes)}",
            "pass",
        ]


def test_no_thresholds_says_so(tmp_path: Path) -> None:
    html = render(load_run(make_run(tmp_path, "r1")), "html", None)
    assert "thresholds" not in tables(html)
    assert "No performance thresholds in this plan" in html


def test_wrong_column_counts_wrong_elements(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1")
    result = RunResult.model_validate_json((run / "result.json").read_text())
    result.steps[1].summary["all_reduce"].wrong = 5
    result.steps[1].summary["sendrecv"].wrong = 2
    atomic_write(run / "result.json", result.model_dump_json())
    rows = tables(render(load_run(run), "html", run))["steps"]
    col = rows[0].index("#wrong")
    assert {r[0]: r[col] for r in rows[1:]} == {"n1xg1": "0", "n1xg2": "7", "n1xg4": "0"}


def test_refused_run_says_why(tmp_path: Path) -> None:
    run = make_run(tmp_path, "r1", finished=False, done_steps=0)
    why = "stack cpu-gloo: node localhost needs porting (torch 2.12 != 2.13)"
    with open(run / "journal.jsonl", "a") as fh:
        fh.write(json.dumps({"t": "2026-11-01T02:00:02+00:00", "mono": 2.0, "event": "run_finished",
                             "status": "refused", "exit_code": 2, "error": why}) + "\n")  # fmt: skip
    rec = load_run(run)
    assert rec.status == "failed" and rec.error == why
    html = render(rec, "html", None)
    assert f'id="why">refused: {why}<' in html.replace("&#39;", "'")


def test_plurals() -> None:
    assert [plural(n, "rank") for n in (0, 1, 2)] == ["0 ranks", "1 rank", "2 ranks"]
    assert plural(1, "entry", "entries") == "1 entry" and plural(3, "entry", "entries") == "3 entries"


def test_no_1_ranks_or_1_nodes_in_the_report(tmp_path: Path) -> None:
    rec = load_run(make_run(tmp_path, "r1", steps=(("n1xg1", 1), ("n1xg2", 2))))
    html = render(rec, "html", None)
    assert "n1xg1 (1 rank)" in html and "n1xg2 (2 ranks)" in html
    assert "Inventory (1 node)" in html
    assert "1 ranks" not in html and "1 nodes" not in html


def test_a_figure_is_shown_to_4_significant_digits_or_as_a_dash() -> None:
    from orchestrator.text import figure

    shown = [figure(v) for v in (None, 0.0, 1234.567, 0.000123456)]
    assert shown == ["-", "0", "1235", "0.0001235"]
