"""A run refused before its steps (unreachable node, full disk, bad config) still loads."""

from __future__ import annotations

from pathlib import Path

from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir


def test_refused_run_loads_as_infra_or_failed(tmp_path: Path) -> None:
    for code, want in ((3, "infra"), (2, "failed")):
        rd = RunDir.create(tmp_path, f"smoke-{code}")
        rd.event("run_started", run_id=rd.run_id, steps=["n1xg1"], pid=1, host="elsewhere")
        rd.event("run_finished", status="refused", exit_code=code, error="No space left on device")
        assert load_run(rd.root).status == want
