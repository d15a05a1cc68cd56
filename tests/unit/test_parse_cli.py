"""`orch parse` end to end through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.parse import detect_kind, parse_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_detect_kinds() -> None:
    assert (
        detect_kind((FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt").read_text())
        == "rccl-tests"
    )
    assert detect_kind((FIXTURES / "nccl-tests/all_reduce-a100x8-legacy.txt").read_text()) == "nccl-tests"
    assert detect_kind("JobId=12 JobName=x\n   JobState=RUNNING Reason=None\n") == "scontrol"


def test_collective_from_file_name() -> None:
    parsed = parse_file(FIXTURES / "nccl-tests/reduce_scatter-a100x8-legacy.txt")
    assert parsed.run is not None and parsed.run.collective == "reduce_scatter"
    parsed = parse_file(FIXTURES / "nccl-tests/reduce-a100x8-legacy.txt")
    assert parsed.run is not None and parsed.run.collective == "reduce"


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["parse", str(FIXTURES / "nccl-tests/all_reduce-gh200x2-2.17.8-wrong.txt")], capsys)
    assert rc == 0
    assert "busbw" in out and "#wrong total 128" in out


def test_json_output_marks_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "nccl-tests/all_reduce-gh200x8-2.17.8-aborted.txt"
    rc, out, _ = _run(["parse", "--json", str(path)], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc[0]["run"]["truncated"] is True and doc[0]["run"]["aborted"]


def test_json_has_recomputed_busbw(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt"
    rc, out, _ = _run(["parse", "--json", "--kind", "rccl-tests", str(path)], capsys)
    doc = json.loads(out)
    assert rc == 0 and len(doc[0]["recomputed_busbw"]) == len(doc[0]["run"]["rows"])


def test_unparseable_file_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    rc, _, err = _run(["parse", str(bad)], capsys)
    assert rc == 2
    # one message; the stderr console may wrap it at the terminal width (common.err has no soft_wrap)
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "notes.txt" in err and "cannot tell what tool wrote this file" in " ".join(err.split())
