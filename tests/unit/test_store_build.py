"""Synthetic run directories made from a real collbench output, for store/report/compare tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.metrics import verdict as V
from orchestrator.models.plan import Step
from orchestrator.models.results import CollRow
from orchestrator.models.run import RunResult, StepResult
from orchestrator.plan import resolve_plan
from orchestrator.scheduler.base import JobState, JobStatus
from orchestrator.store.load import load_run
from orchestrator.store.rundir import RunDir, atomic_write
from orchestrator.workloads.nccltests import parse_nccl_tests

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "collbench" / "smoke-n1xg4-rank0.log"
STEPS = (("n1xg1", 1), ("n1xg2", 2), ("n1xg4", 4))
Scale = dict[tuple[str, str, int], float]


def real_rows() -> list[CollRow]:
    return parse_nccl_tests(FIXTURE.read_text()).rows


def _rows(ranks: int, factor: float, scale: Scale, step: str, n_sizes: int | None) -> list[CollRow]:
    base = real_rows()
    if n_sizes is not None:  # extend the real ladder to n_sizes sizes (x2) by repeating its shape
        by_coll: dict[str, list[CollRow]] = {}
        for r in base:
            by_coll.setdefault(r.collective, []).append(r)
        base = []
        for rows in by_coll.values():
            for i in range(n_sizes):
                src = rows[i % len(rows)]
                base.append(src.model_copy(update={"size_bytes": 8 << i, "count": max(1, (8 << i) // 4)}))
    out = []
    for r in base:
        f = factor * scale.get((step, r.collective, r.size_bytes), 1.0)
        oop = r.out_of_place.model_copy(
            update={"busbw_gbs": r.out_of_place.busbw_gbs * f, "algbw_gbs": r.out_of_place.algbw_gbs * f}
        )
        out.append(r.model_copy(update={"nranks": ranks, "out_of_place": oop}))
    return out


def make_run(
    root: Path,
    run_id: str,
    *,
    finished: bool = True,
    done_steps: int | None = None,
    factor: float = 1.0,
    scale: Scale | None = None,
    plan_name: str = "smoke",
    started: datetime | None = None,
    n_sizes: int | None = None,
    steps: tuple[tuple[str, int], ...] = STEPS,
) -> Path:
    """A run directory as scale-test leaves it: finished, or killed after done_steps steps."""
    cluster = load_inventory(DEFAULT_INVENTORY)
    plan = resolve_plan("smoke").model_copy(update={"name": plan_name})
    rd = RunDir.create(root, run_id)
    rd.write_model("plan.json", plan)
    rd.write_model("inventory.json", cluster)
    ladder = [
        Step(
            id=sid,
            index=i,
            nnodes=1,
            ranks_per_node=g,
            nodes=["localhost"],
            world_size=g,
            collectives=list(plan.collectives),
            sizes=plan.sizes.values(),
        )
        for i, (sid, g) in enumerate(steps)
    ]
    atomic_write(rd.root / "steps.json", json.dumps({"steps": [s.model_dump(mode="json") for s in ladder]}))
    t0 = started or datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    events = [
        {
            "t": t0.isoformat(),
            "mono": 1.0,
            "event": "run_started",
            "run_id": run_id,
            "plan": plan_name,
            "backend": "local",
            "steps": [s.id for s in ladder],
            "pid": 999_999_999,
            "host": "gone",
            "user": "lab",
        }
    ]
    results: list[StepResult] = []
    n_done = len(ladder) if done_steps is None else done_steps
    for i, st in enumerate(ladder):
        if i >= n_done:
            results.append(StepResult(step=st))
            continue
        rows = _rows(st.world_size, factor, scale or {}, st.id, n_sizes)
        res = StepResult(
            step=st,
            job_id=f"local-1-{i}",
            job=JobState(job_id=f"local-1-{i}", status=JobStatus.COMPLETED, raw_state="COMPLETED"),
            rows=rows,
            summary=V.summarize(rows),
            verdict="pass",
            started_mono=2.0 + i,
            ended_mono=2.5 + i,
        )
        sd = rd.step_dir(st.id)
        (sd / "rank-0.log").write_text(FIXTURE.read_text())
        atomic_write(sd / "result.json", res.model_dump_json())
        events.append(
            {
                "t": (t0 + timedelta(seconds=i + 1)).isoformat(),
                "mono": 3.0 + i,
                "event": "step_done",
                "step": st.id,
                "verdict": "pass",
            }
        )
        results.append(res)
    if finished:
        V.apply_efficiency([(r.step, r.summary) for r in results])
        result = RunResult(
            run_id=run_id,
            run_dir=rd.root,
            plan=plan_name,
            backend="local",
            status="accepted",
            exit_code=0,
            steps=results,
            nodes={"localhost": "pass"},
            wall_s=12.0,
        )
        atomic_write(rd.root / "result.json", result.model_dump_json())
        events.append(
            {
                "t": (t0 + timedelta(seconds=12)).isoformat(),
                "mono": 13.0,
                "event": "run_finished",
                "status": "accepted",
                "exit_code": 0,
                "wall_s": 12.0,
            }
        )
    with open(rd.journal_path, "w") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in events)
    return rd.root


def test_builder_makes_a_loadable_run(tmp_path: Path) -> None:
    rec = load_run(make_run(tmp_path, "r1"))
    assert rec.status == "accepted"
    assert [s.step.id for s in rec.steps] == ["n1xg1", "n1xg2", "n1xg4"]
    assert len(rec.steps[2].rows) == 36
