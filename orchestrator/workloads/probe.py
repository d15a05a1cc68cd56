"""The recovery probe: a long loop of small collectives, one heartbeat JSON line per step.

    torchrun --nnodes 3 --nproc-per-node 2 --node-rank K --master-addr A --master-port P \
        --max-restarts 3 -m orchestrator.workloads.probe --out DIR [--size 64K] [--pg-timeout 30]

Each rank appends to ``DIR/hb-rank<R>.jsonl``: a ``start`` line (its settings), a ``step`` line per
completed collective (step, wall start/end, monotonic end, seconds, busbw, generation, restart
counts, PID, node), and an ``error`` line when a collective fails (then it exits 1 so that torchrun
or Slurm restarts it). A file ``DIR/stop`` ends every rank cleanly, after one same step: a rank that
sees the file on its node says so in that step's all_reduce (its first element), so the ranks of
nodes whose stop file comes later, or never, stop with it.

Restarts. Under torchrun every worker of the job restarts once per failure, and a restarted
container or a requeued job starts fresh agents, so torchrun's own restart count cannot key the
process group. Each starting worker adds 1 to a counter in the job's store; ``generation =
(count - 1) // world``, and the process group rendezvous lives under that generation's prefix.
On start the ranks agree (all_reduce MIN) on the last step every rank completed, from their own
heartbeat files, and resume after it.

Timeouts decide what "recovery" means (PyTorch's watchdog defaults to 10 minutes): the process
group timeout is a flag, and every setting is written in the start line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

from orchestrator.envpolicy import record_env
from orchestrator.metrics.busbw import busbw_factor
from orchestrator.models.plan import parse_size
from orchestrator.models.recovery_request import ProbeSettings as ProbeSettings  # re-exported
from orchestrator.safefs import json_lines, make_dir, open_write

STORE_PREFIX = "orch-probe"


def torchrun_argv(
    s: ProbeSettings,
    *,
    python: str,
    out_dir: Path,
    node_rank: int | None,
    nnodes: int,
    master_addr: str,
    run_id: str,
) -> list[str]:
    """argv of one node's torchrun agent (static rendezvous: c10d hangs on the lab).

    node_rank None: torchrun takes it from PET_NODE_RANK (one argv for every node of a Slurm job).
    """
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={s.nproc_per_node}",
        *([f"--node-rank={node_rank}"] if node_rank is not None else []),
        f"--master-addr={master_addr}",
        f"--master-port={s.master_port}",
        f"--max-restarts={s.max_restarts}",
        f"--monitor-interval={s.monitor_interval_s:g}",
        f"--rdzv-id={run_id}",
        "-m",
        "orchestrator.workloads.probe",
        "--out",
        str(out_dir),
        "--size",
        str(s.size_bytes),
        "--backend",
        s.backend,
        "--pg-timeout",
        f"{s.pg_timeout_s:g}",
        "--step-sleep",
        f"{s.step_sleep_s:g}",
    ]


# --- the worker --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="orch-probe", description="recovery probe (one heartbeat per step)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--size", type=parse_size, default=64 * 1024)
    p.add_argument("--backend", default="gloo")
    p.add_argument("--pg-timeout", type=float, default=30.0)
    p.add_argument("--step-sleep", type=float, default=0.0)
    p.add_argument("--max-steps", type=int, default=0, help="0: until DIR/stop exists")
    return p.parse_args(argv)


def _max_heartbeat(path: Path, event: str, field: str, default: int | None = None) -> int:
    """The highest `field` of a heartbeat file's `event` lines, -1 when none (or no file).

    Lines that are not JSON are skipped. A line without `field` counts as `default`; with no
    default it raises KeyError."""
    last = -1
    for rec in json_lines(path):
        if rec.get("ev") == event:
            last = max(last, int(rec[field] if default is None else rec.get(field, default)))
    return last


def last_completed_step(path: Path) -> int:
    """The highest step in a heartbeat file, -1 when none."""
    return _max_heartbeat(path, "step", "step")


def last_generation(path: Path) -> int:
    """The highest generation in a heartbeat file's start lines, -1 when none."""
    return _max_heartbeat(path, "start", "gen", default=-1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0")))
    world = int(os.environ.get("WORLD_SIZE", os.environ.get("SLURM_NTASKS", "1")))
    make_dir(args.out)  # the heartbeat folders: mode set, never the umask's
    hb_path = args.out / f"hb-rank{rank}.jsonl"
    with os.fdopen(open_write(hb_path, append=True), "a", encoding="utf-8") as hb:
        try:
            return _run(args, rank, world, hb, hb_path)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"[:500]
            _write(hb, {"ev": "error", "rank": rank, "node": node_name(), "error": error})
            return 1


def node_name() -> str:
    """The node this rank runs on, as heartbeats name it: ORCH_NODE (the inventory name, set by
    orch), else Slurm's $SLURMD_NODENAME (which recovery-test maps to an inventory name)."""
    return os.environ.get("ORCH_NODE", os.environ.get("SLURMD_NODENAME", ""))


def _write(hb: IO[str], rec: dict[str, Any]) -> None:
    rec.setdefault("wall", time.time())
    rec.setdefault("mono", time.monotonic())
    hb.write(json.dumps(rec, separators=(",", ":")) + "\n")
    hb.flush()


def _run(args: argparse.Namespace, rank: int, world: int, hb: IO[str], hb_path: Path) -> int:
    import torch
    import torch.distributed as dist

    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "29500"))
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    timeout = timedelta(seconds=args.pg_timeout)
    store = dist.TCPStore(  # type: ignore[attr-defined]
        addr, port, world, is_master=(rank == 0 and not agent_store), timeout=timeout
    )
    # A requeued job (or a restarted master container) brings a fresh store whose counter starts
    # at 0 again: the first rank to start sets the base to one past the last generation it wrote.
    base = int(store.compare_set(f"{STORE_PREFIX}/base", "", str(last_generation(hb_path) + 1)))
    gen = base + (int(store.add(f"{STORE_PREFIX}/starts", 1)) - 1) // world
    pg_store = dist.PrefixStore(  # type: ignore[attr-defined]
        f"{STORE_PREFIX}/gen{gen}", store
    )
    common = {
        "rank": rank,
        "world": world,
        "gen": gen,
        "pid": os.getpid(),
        "node": node_name(),
        "restarts": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "slurm_restarts": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
    }
    settings = {
        "size": args.size,
        "backend": args.backend,
        "pg_timeout_s": args.pg_timeout,
        # The transport settings the rank really ran with; values only where envpolicy allows.
        **record_env(os.environ, prefixes=("GLOO_", "NCCL_", "TORCH_")),
    }
    _write(hb, {"ev": "start", **common, "settings": settings})
    dist.init_process_group(args.backend, store=pg_store, rank=rank, world_size=world, timeout=timeout)
    mine = torch.tensor([last_completed_step(hb_path)], dtype=torch.int64)
    dist.all_reduce(mine, op=dist.ReduceOp.MIN)
    step = int(mine.item()) + 1
    buf = torch.ones(max(args.size // 4, 1), dtype=torch.float32)
    factor = busbw_factor("all_reduce", world)
    stop = args.out / "stop"
    stopping = False
    while not stopping and (args.max_steps <= 0 or step < args.max_steps):
        if stop.exists():
            buf[0] = float(world + 1)  # this rank's stop request rides in the step's own all_reduce
        w0, m0 = time.time(), time.monotonic()
        dist.all_reduce(buf)
        m1 = time.monotonic()
        dt = m1 - m0
        _write(
            hb,
            {
                "ev": "step",
                **common,
                "step": step,
                "t_start": w0,
                "wall": w0 + dt,
                "mono": m1,
                "dt": dt,
                "busbw_gbs": args.size * factor / dt / 1e9 if dt > 0 else 0.0,
            },
        )
        # The sum of world ones is world; more means a rank saw its stop file: every rank ends
        # after this same step. A rank that left on its own would leave the others in a collective
        # that never completes (seen: a 20 s grace and SIGTERM at the end of every recovery-test).
        stopping = float(buf[0].item()) > world + 0.5
        buf.fill_(1.0)
        step += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
    _write(hb, {"ev": "stop", **common, "step": step})
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
