"""A run folder with a serving step into which two engine kills were injected, built here: orch's
own request records (synthetic, one request every 0.1 s at level c4), the recovery figures
computed from them by metrics/serving_recovery, and the ServingStepResult that carries them
(as runs/serving.py writes it). For the store and report tests of faults during serving."""

from __future__ import annotations

import json
from pathlib import Path

from test_store_build import make_run

from orchestrator.metrics.serving import summarize_level
from orchestrator.metrics.serving_recovery import serving_recovery
from orchestrator.models.run import RunResult
from orchestrator.models.serving import ServingStep
from orchestrator.models.serving_recovery import EngineRestart, ServingFaultResult, SteadyRule
from orchestrator.models.serving_results import (
    RequestRecord,
    RequestStatus,
    ServingLevelResult,
    ServingStepResult,
)
from orchestrator.store.rundir import atomic_write

T0 = 1_790_000_000.0
STEP = "chat-r1"
RECORDS = f"steps/{STEP}/records-c4.jsonl"
FAULT1 = T0 + 10.0  # request 100 is sent at the first fault
FAULT2 = T0 + 30.0  # request 300 at the second


def rec(i: int, *, ttft: float = 0.1, status: RequestStatus = "ok", warmup: bool = False) -> RequestRecord:
    s = T0 + 0.1 * i - (1.0 if warmup else 0.0)
    i += 1000 if warmup else 0
    if status != "ok":
        return RequestRecord(id=i, level="c4", warmup=warmup, server="localhost", send=s, end=s + 0.01,
                             status=status, error="connection refused", input_tokens=8, output_tokens=0,
                             requested_output_tokens=3)  # fmt: skip
    ft = s + ttft
    times = [ft, ft + 0.05, ft + 0.15]
    return RequestRecord(id=i, level="c4", warmup=warmup, server="localhost", send=s, first_token=ft,
                         token_times=times, end=times[-1], status="ok", input_tokens=8, output_tokens=3,
                         requested_output_tokens=3)  # fmt: skip


def records(*, recover_second: bool = True) -> list[RequestRecord]:
    """0-99 ok; fault 1: 100-119 fail, 120-139 slow, then ok; fault 2 at 300: 300-314 aborted or
    failed, then ok again (or, without recover_second, failing to the end)."""
    out = [rec(i, warmup=True, ttft=3.0) for i in range(4)]  # sent before the counted ones
    for i in range(0, 400):
        if 100 <= i < 120:
            out.append(rec(i, status="error"))
        elif 120 <= i < 140:
            out.append(rec(i, ttft=0.8))
        elif 300 <= i < 315 or (i >= 300 and not recover_second):
            out.append(rec(i, status="aborted" if i % 2 else "error"))
        else:
            out.append(rec(i))
    return out


def step_result(recs: list[RequestRecord], *, target: str = "localhost:engine", kind: str = "kill-worker",
                step_id: str = STEP) -> ServingStepResult:  # fmt: skip
    rule = SteadyRule()
    step = ServingStep(
        id=step_id, index=0, workload="chat", engine="transformers", replicas=1, nodes_per_replica=1,
        gpus_per_replica_node=1, nodes=["localhost"], levels=["c4"],
    )  # fmt: skip
    faults = []
    for n, at in enumerate((FAULT1, FAULT2), 1):
        restart = EngineRestart(node="localhost", ended_at=at + 0.2, reason="exit 137", attempt=n,
                                started_at=at + 0.5, healthy_at=at + 1.9, job_id=f"local-{n}")  # fmt: skip
        faults.append(ServingFaultResult(
            kind=kind, target=target, repeat=n, level="c4", injected_at=at, reverted_at=at + 0.1,
            outcome="done" if kind in ("kill-worker", "restart-container") else "reverted",
            record=f"faults/f{n}.json", restarts=[restart],
            recovery=serving_recovery(recs, at, level="c4", rule=rule, until=FAULT2 if n == 1 else None),
        ))  # fmt: skip
    return ServingStepResult(
        step=step, verdict="pass", levels=[ServingLevelResult(level="c4", records=RECORDS,
                                                              summary=summarize_level(recs))],
        faults=faults, restarts=[r for f in faults for r in f.restarts],
    )  # fmt: skip


def make_fault_run(root: Path, run_id: str = "20261202T120000Z-serving-aaaa", **kw: object) -> Path:
    """A finished run folder whose result.json carries the serving step with its faults, and whose
    step folder holds the level's records."""
    recs = records(**kw)  # type: ignore[arg-type]
    run = make_run(root, run_id)
    sres = step_result(recs)
    (run / "steps" / STEP).mkdir(parents=True, exist_ok=True)
    (run / RECORDS).write_text("".join(r.model_dump_json() + "\n" for r in recs))
    result = RunResult.model_validate_json((run / "result.json").read_text())
    atomic_write(run / "result.json", result.model_copy(update={"serving": [sres]}).model_dump_json())
    atomic_write(run / "serving-steps.json", json.dumps({"steps": [sres.step.model_dump(mode="json")]}))
    return run
