"""collbench run for real (gloo, 1 and 2 ranks) through the local scheduler backend."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.metrics.busbw import busbw_factor
from orchestrator.models.results import COLLECTIVES, CollRow
from orchestrator.scheduler.base import JobSpec, JobStatus
from orchestrator.scheduler.local import LocalScheduler, free_port
from orchestrator.workloads.collbench import ORCH_JSON_PREFIX, channel_slices, fmt_float, layout

SIZES = "1K:4K:x4"  # 1 KiB and 4 KiB


def spec(tmp: Path, argv: list[str], ranks: int, limit: int = 120, name: str = "t") -> JobSpec:
    return JobSpec(
        name=name, step_id=f"n1xg{ranks}", nodes=["localhost"], nnodes=1, ranks_per_node=ranks, argv=argv,
        env={"GLOO_SOCKET_IFNAME": "lo"}, master_addr="127.0.0.1", master_port=free_port(),
        time_limit_s=limit, workdir=tmp / name,
    )  # fmt: skip


def collbench(*extra: str) -> list[str]:
    return [sys.executable, "-m", "orchestrator.workloads.collbench", "--sizes", SIZES, "--warmup", "1",
            "--iters", "2", "--timeout", "60", *extra]  # fmt: skip


def run(tmp: Path, argv: list[str], ranks: int, name: str = "t") -> tuple[JobStatus, str, str]:
    sched = LocalScheduler()
    s = spec(tmp, argv, ranks, name=name)
    job = sched.submit(s)
    state = sched.wait(job, timeout_s=120)
    logs = sched.collect(job, s).ranks
    assert [r.rank for r in logs] == list(range(ranks))
    return state.status, logs[0].log.read_text(), state.raw_state


def orch_rows(text: str) -> list[CollRow]:
    return [
        CollRow.model_validate(json.loads(line[len(ORCH_JSON_PREFIX) :]))
        for line in text.splitlines()
        if line.startswith(ORCH_JSON_PREFIX)
    ]


def check_rows(rows: list[CollRow], nranks: int) -> None:
    sizes = [1024, 4096]
    assert {(r.collective, r.size_bytes) for r in rows} == {
        (c, layout(c, s, 4, nranks).size_bytes) for c in COLLECTIVES for s in sizes
    }
    for r in rows:
        assert r.nranks == nranks and r.dtype == "float" and r.in_place is not None
        for p in (r.out_of_place, r.in_place):
            assert p.wrong == 0
            assert p.time_us > 0
            assert p.busbw_gbs == pytest.approx(p.algbw_gbs * busbw_factor(r.collective, nranks), rel=1e-12)
            assert p.algbw_gbs == pytest.approx(r.size_bytes / (p.time_us * 1e3), rel=1e-12)
            if nranks > 1 or r.collective in ("broadcast", "sendrecv"):
                assert p.busbw_gbs > 0
            # every timed iteration (2) kept: p50 with its n; p95/p99 hidden under 20 and 100
            lat = p.latency_us
            assert lat is not None and lat.n == 2 and lat.p50 is not None and lat.p50 > 0
            assert lat.p95 is None and lat.p99 is None


def test_collbench_one_rank(tmp_path: Path) -> None:
    status, out, _ = run(tmp_path, collbench("--check"), 1)
    assert status is JobStatus.COMPLETED, out
    check_rows(orch_rows(out), 1)


def test_collbench_two_ranks_table_and_json(tmp_path: Path) -> None:
    status, out, _ = run(tmp_path, collbench("--check"), 2)
    assert status is JobStatus.COMPLETED, out
    check_rows(orch_rows(out), 2)
    lines = out.splitlines()
    header = [ln.split() for ln in lines if ln.startswith("# ") and "redop" in ln]
    assert header[0] == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                         "time", "algbw", "busbw", "#wrong"]  # fmt: skip
    assert len(header) == len(COLLECTIVES)
    assert sum(ln == "# Out of bounds values : 0 OK" for ln in lines) == len(COLLECTIVES)
    assert sum(ln.startswith("# Avg bus bandwidth    : ") for ln in lines) == len(COLLECTIVES)
    data = [ln.split() for ln in lines if ln and not ln.startswith("#")]
    assert len(data) == 2 * len(COLLECTIVES) and all(len(d) == 13 for d in data)
    first = data[0]
    assert first[:5] == ["1024", "256", "float", "sum", "-1"] and first[8] == "0" and first[12] == "0"


def test_collbench_counts_wrong_elements(tmp_path: Path) -> None:
    argv = collbench("--check", "--inject-wrong", "--collectives", "all_reduce,alltoall")
    status, out, raw = run(tmp_path, argv, 2)
    assert status is JobStatus.FAILED and raw == "FAILED"
    rows = orch_rows(out)
    assert len(rows) == 4  # printed everything before failing
    assert all(r.out_of_place.wrong == 1 and r.in_place and r.in_place.wrong == 1 for r in rows)
    assert "# Out of bounds values : 4 FAILED" in out


def test_reduce_scatter_fallback_is_correct(tmp_path: Path) -> None:
    argv = collbench("--check", "--rs-fallback", "--collectives", "reduce_scatter")
    status, out, _ = run(tmp_path, argv, 2)
    assert status is JobStatus.COMPLETED, out
    assert "emulated by all_reduce" in out
    assert all(r.out_of_place.wrong == 0 for r in orch_rows(out))


def test_channel_slices_cover_the_buffer_once() -> None:
    mib = 1 << 20
    assert channel_slices(0, 4, 4) == [slice(0, 0)]
    assert channel_slices(256, 4, 4) == [slice(0, 256)]  # 1 KiB: one call
    assert channel_slices(4 * mib // 4, 4, 4, min_bytes=mib) == [
        slice(i * mib // 4, (i + 1) * mib // 4) for i in range(4)
    ]
    for count in (1, 7, 1000, 2**20 + 3):
        for k in (1, 2, 3, 4, 8):
            parts = channel_slices(count, 4, k, min_bytes=4)
            assert 1 <= len(parts) <= k
            assert parts[0].start == 0 and parts[-1].stop == count
            assert all(a.stop == b.start for a, b in itertools.pairwise(parts))


def test_collbench_channels_give_the_right_sum(tmp_path: Path) -> None:
    # 16 MiB: split into 4 concurrent all_reduce calls (4 MiB each); --check compares every element.
    argv = [sys.executable, "-m", "orchestrator.workloads.collbench", "--sizes", "16M", "--warmup", "1",
            "--iters", "1", "--timeout", "60", "--collectives", "all_reduce", "--check",
            "--channels", "4"]  # fmt: skip
    status, out, _ = run(tmp_path, argv, 2)
    assert status is JobStatus.COMPLETED, out
    assert "run as up to 4 concurrent calls" in out
    (row,) = orch_rows(out)
    assert row.out_of_place.wrong == 0 and row.in_place is not None and row.in_place.wrong == 0


def test_collbench_without_check_prints_na(tmp_path: Path) -> None:
    status, out, _ = run(tmp_path, collbench("--collectives", "broadcast"), 1)
    assert status is JobStatus.COMPLETED
    assert all(r.out_of_place.wrong is None for r in orch_rows(out))
    assert "   N/A" in out


def test_fmt_float_widths() -> None:
    assert fmt_float(1.234, 6) == "  1.23"
    assert fmt_float(12345.678, 7) == "12345.7"
    assert fmt_float(1234567.0, 7) == "1234567"
    assert len(fmt_float(123456789.0, 7)) == 7


SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_local_render_has_no_side_effects(tmp_path: Path) -> None:
    s = spec(tmp_path, ["python", "-m", "x"], 2)
    text = LocalScheduler().render(s)
    assert (
        "RANK=0" in text and "RANK=1" in text and "WORLD_SIZE=2" in text and "MASTER_ADDR=127.0.0.1" in text
    )
    assert f"MASTER_PORT={s.master_port}" in text and sys.executable in text
    assert not s.workdir.exists()


def test_local_cancel_leaves_no_process(tmp_path: Path) -> None:
    sched = LocalScheduler(kill_grace_s=2)
    s = spec(tmp_path, SLEEP, 2)
    job = sched.submit(s)
    assert sched.poll([job])[job].status is JobStatus.RUNNING
    pids = [p.pid for p in sched._jobs[job].procs]
    assert all(psutil.pid_exists(p) for p in pids)
    sched.cancel([job])
    sched.cancel([job])  # idempotent
    assert sched.poll([job])[job].status is JobStatus.CANCELLED
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)


def test_local_time_limit_gives_failed_timeout(tmp_path: Path) -> None:
    sched = LocalScheduler(kill_grace_s=2)
    s = spec(tmp_path, SLEEP, 1, limit=1)
    job = sched.submit(s)
    t0 = time.monotonic()
    state = sched.wait(job, timeout_s=20)
    assert time.monotonic() - t0 < 10
    assert state.status is JobStatus.FAILED and state.raw_state == "TIMEOUT"


def test_local_after_runs_jobs_one_at_a_time(tmp_path: Path) -> None:
    sched = LocalScheduler()
    first = sched.submit(spec(tmp_path, [sys.executable, "-c", "import time; time.sleep(1)"], 1, name="a"))
    second = sched.submit(
        spec(tmp_path, [sys.executable, "-c", "raise SystemExit(3)"], 1, name="b"), after=first
    )
    states = sched.poll([first, second])
    assert states[first].status is JobStatus.RUNNING and states[second].status is JobStatus.PENDING
    assert sched.wait(first, 20).status is JobStatus.COMPLETED
    last = sched.wait(second, 20)
    assert last.status is JobStatus.FAILED and last.exit_code == 3
    assert sched.poll(["nope"])["nope"].status is JobStatus.UNKNOWN
