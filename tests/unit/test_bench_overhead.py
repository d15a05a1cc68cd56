"""bench/overhead.py's arithmetic and what it prints, on made-up timings (no lab: the bench itself
runs on one; its figures are in docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # the bench imports its helpers (_lab, reframe_compare) beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_overhead", BENCH / "overhead.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["bench_overhead"] = mod
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))


bench = _load()
Timing = bench.Timing


def _timing(tool: str, wall: float, steps: list[int]) -> object:
    ids = [f"7.{i}" for i in range(len(steps))]
    return Timing(tool, wall, ids, dict(zip(ids, steps, strict=True)))


def test_describe_gives_the_ratio_with_its_one_second_per_step_range() -> None:
    line = bench.describe(_timing("orch allocation", 11.0, [2, 3, 5]))
    # 11 s over 2+3+5 = 10 s; every step 1 s longer: 11/13, 1 s shorter: 11/7
    assert "steps 2+3+5 = 10 s" in line
    assert f"wall/sum {11 / 10:.3f} (±1 s per step: {11 / 13:.3f}-{11 / 7:.3f})" in line


def test_both_ways_are_printed_and_the_target_is_judged_from_spawn_only() -> None:
    warm = [_timing(bench.WARM, w, [2, 3, 5]) for w in (10.5, 10.8, 12.0)]  # medians 1.08
    spawned = [_timing(bench.SPAWNED, w, [2, 3, 5]) for w in (11.5, 11.8, 13.0)]  # 1.18
    lines = bench.summary_lines({bench.WARM: warm, bench.SPAWNED: spawned})
    (warm_line,) = [ln for ln in lines if ln.strip().startswith(bench.WARM + " ")]
    (spawn_line,) = [ln for ln in lines if bench.SPAWNED in ln and "both ways" not in ln]
    pooled_warm = (10.5 + 10.8 + 12.0) / 30
    assert f"{10.8 / 10:.3f} (pooled {pooled_warm:.3f})" in warm_line and "target" not in warm_line
    # the warm figure alone would meet 1.10; the target's figure, from spawn, does not
    pooled_spawned = (11.5 + 11.8 + 13.0) / 30
    assert spawn_line.endswith(f"{11.8 / 10:.3f} (pooled {pooled_spawned:.3f})  target <= 1.1: NOT met")
    assert lines[-1] == (
        "allocation mode both ways: warm (in this process, no CLI start-up) 1.080; "
        "from spawn (the target's figure) 1.180"
    )


def test_the_target_is_met_from_spawn_and_a_way_that_did_not_run_is_a_dash() -> None:
    spawned = [_timing(bench.SPAWNED, 10.9, [4, 6])]
    lines = bench.summary_lines({bench.WARM: [], bench.SPAWNED: spawned, "orch per-step": []})
    assert lines[1].endswith("target <= 1.1: met")
    assert len(lines) == 3  # heading, the one way that ran, both ways
    both = r"warm \(in this process, no CLI start-up\) -; from spawn \(the target's figure\) 1\.090$"
    assert re.search(both, lines[-1])
