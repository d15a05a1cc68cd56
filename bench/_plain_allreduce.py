"""The reference loop bench/fidelity.py sets collbench against (not a bench of its own).

Run under srun, one task per node: a plain loop of torch.distributed all_reduce on one float32
tensor over gloo, nothing else — no check, no table, no out-of-place copy. It is the "plain loop
of 256 MiB gloo all_reduces" measured by hand in LAB-NOTES, written down so that collbench's
harness can be compared with it in the same run. Rank and world size come from srun
(SLURM_PROCID, SLURM_NTASKS); MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME from the caller.
Prints one line on rank 0: `plain-allreduce <bytes> <busbw GB/s>` (slowest rank's time,
busbw = algbw x 2(n-1)/n as nccl-tests counts it).

Usage: srun ... python bench/_plain_allreduce.py <bytes> <warmup> <iters>
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta


def main() -> None:
    import torch
    import torch.distributed as dist

    size, warmup, iters = (int(a) for a in sys.argv[1:4])
    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=300))
    buf = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    took = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    if rank == 0:
        busbw = size / float(took.item()) * 2 * (world - 1) / world / 1e9
        print(f"plain-allreduce {size} {busbw:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
