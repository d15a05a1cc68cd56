"""bench/fidelity.py — collbench's large-message busbw over the TCP bandwidth of the same link.

Method: on the running virtual lab, between its first two nodes (node1, node2 of the inventory),
in one run, per round:
  1. iperf3 over the fabric addresses, server in node2's namespace
     (`ip netns exec orch-node2 iperf3 -s -1 -B <node2 fabric>`), client in node1's
     (`iperf3 -c <node2 fabric> -B <node1 fabric> -t 5 -J`), iperf3's defaults otherwise:
     (a) one TCP stream one way, received bytes/s; (b) the same with --bidir (one stream each
     way at once), the mean of the two directions' received bytes/s.
  2. collbench through Slurm, as orch's sbatch template runs it: `srun -N 2 --ntasks-per-node=1
     --nodelist=node1,node2 --exclusive python -m orchestrator.workloads.collbench
     --collectives C --sizes 256M --warmup 3 --iters 10 --backend gloo --socket-ifname <fabric
     NIC>` with MASTER_ADDR = node1's fabric address; 2 ranks, one per node, float32, 256 MiB,
     for C = all_reduce and C = broadcast. busbw = algbw for n = 2 (nccl-tests' rules).
  3. bench/_plain_allreduce.py the same way: a bare loop of dist.all_reduce on one 256 MiB
     tensor (the hand-measured reference of LAB-NOTES), to show what collbench's harness costs.
  4. iperf3 (a) and (b) again; each TCP figure is the mean of its two runs (all printed).
Figures, medians of --rounds rounds:
  - all_reduce busbw / iperf3 one-way: the literal figure. On 2 ranks every byte of busbw
    crosses the link in both directions at once, so it cannot exceed (b) / (a) — printed as the
    bound; on a veth pair whose both ends share 2 cores that bound is about 0.55.
  - all_reduce busbw / iperf3 --bidir per direction, and broadcast busbw / iperf3 one-way: each
    collective against TCP moving the same pattern (both ways at once; one way). Target >= 0.7.
  - collbench all_reduce / the plain loop: the harness's own cost (1.0 = none).
Out-of-place (orch's summary figure) and in-place are both printed. Traffic stays in the lab
(198.18.0.0/15). The lab's cores are shared with everything else on the machine, so the load
average is printed with every round. Never part of the pass/fail test run; needs root (ip
netns).

Usage: .venv/bin/python bench/fidelity.py [--inventory inventories/lab.ini] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _lab import load_note, slurm_env, wait_idle

from orchestrator.inventory import load_inventory
from orchestrator.models.cluster import Node
from orchestrator.workloads.collbench import ORCH_JSON_PREFIX

TARGET = 0.7
BENCH = Path(__file__).resolve().parent


def netns(node: Node) -> str:
    return f"orch-{node.name}"  # the lab's namespace naming (orch lab status)


def iperf3_gbs(server: Node, client: Node, seconds: int, *, bidir: bool = False) -> float:
    """TCP bandwidth client -> server over their fabric addresses, GB/s (1e9 bytes/s); with
    bidir, one stream each way at once and the mean of the two directions."""
    port = str(5201 + secrets.randbelow(1000))
    srv = subprocess.Popen(
        ["ip", "netns", "exec", netns(server), "iperf3", "-s", "-1", "-B", str(server.fabric_address),
         "-p", port],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        time.sleep(0.5)
        out = subprocess.run(
            ["ip", "netns", "exec", netns(client), "iperf3", "-c", str(server.fabric_address),
             "-B", str(client.fabric_address), "-p", port, "-t", str(seconds), "-J",
             *(["--bidir"] if bidir else [])],
            capture_output=True, text=True, timeout=seconds + 30, check=True,
        ).stdout  # fmt: skip
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    end = json.loads(out)["end"]
    keys = ["sum_received", "sum_received_bidir_reverse"] if bidir else ["sum_received"]
    return statistics.mean(float(end[k]["bits_per_second"]) for k in keys) / 8e9


def srun_two(a: Node, b: Node, env: dict[str, str], argv: list[str]) -> str:
    """Run argv as 2 tasks, one on each of a and b, the way orch's sbatch template sets up gloo;
    returns stdout (exits with the output on failure)."""
    iface = a.rdma_ifaces[0]
    cmd = [
        "srun", "-N", "2", "--ntasks-per-node=1", f"--nodelist={a.name},{b.name}", "--exclusive",
        "--kill-on-bad-exit=1", "--time=10", *argv,
    ]  # fmt: skip
    port = str(20000 + secrets.randbelow(20000))
    run_env = {**env, "MASTER_ADDR": str(a.fabric_address), "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": iface}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=900)
    if proc.returncode != 0:
        tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        sys.exit(f"{' '.join(argv[:4])} failed ({proc.returncode}):\n{tail}")
    return proc.stdout


def collbench_gbs(
    a: Node, b: Node, env: dict[str, str], collective: str, size: str, iters: int
) -> tuple[float, float]:
    """(out-of-place, in-place) busbw GB/s of a 2-rank collective on nodes a, b through srun."""
    out = srun_two(a, b, env, [
        sys.executable, "-m", "orchestrator.workloads.collbench", "--collectives", collective,
        "--sizes", size, "--warmup", "3", "--iters", str(iters), "--backend", "gloo",
        "--socket-ifname", a.rdma_ifaces[0], "--timeout", "300",
    ])  # fmt: skip
    rows = [json.loads(line[len(ORCH_JSON_PREFIX):]) for line in out.splitlines()
            if line.startswith(ORCH_JSON_PREFIX)]  # fmt: skip
    if not rows:
        sys.exit(f"collbench printed no rows:\n{out[-3000:]}")
    row = rows[-1]
    return float(row["out_of_place"]["busbw_gbs"]), float(row["in_place"]["busbw_gbs"])


def plain_gbs(a: Node, b: Node, env: dict[str, str], size_bytes: int, iters: int) -> float:
    """busbw GB/s of bench/_plain_allreduce.py (a bare loop of dist.all_reduce) on a, b."""
    argv = [sys.executable, str(BENCH / "_plain_allreduce.py"), str(size_bytes), "3", str(iters)]
    out = srun_two(a, b, env, argv)
    for line in out.splitlines():
        if line.startswith("plain-allreduce "):
            return float(line.split()[2])
    sys.exit(f"the plain loop printed no figure:\n{out[-3000:]}")


def size_bytes(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1:].upper() in units else int(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--inventory", type=Path, default=Path("inventories/lab.ini"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="256M")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--iperf-seconds", type=int, default=5)
    args = ap.parse_args()
    cluster = load_inventory(args.inventory)
    a, b = cluster.nodes[0], cluster.nodes[1]
    env = slurm_env(cluster)
    print(f"{a.name} ({a.fabric_address}) <-> {b.name} ({b.fabric_address}), {args.size}, 2 ranks, gloo")
    fig: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        fig.setdefault(key, []).append(value)

    for r in range(args.rounds):
        wait_idle([a.name, b.name], env)
        uni1, bi1 = iperf3_gbs(b, a, args.iperf_seconds), iperf3_gbs(b, a, args.iperf_seconds, bidir=True)
        ar = collbench_gbs(a, b, env, "all_reduce", args.size, args.iters)
        bc = collbench_gbs(a, b, env, "broadcast", args.size, args.iters)
        plain = plain_gbs(a, b, env, size_bytes(args.size), args.iters)
        uni2, bi2 = iperf3_gbs(b, a, args.iperf_seconds), iperf3_gbs(b, a, args.iperf_seconds, bidir=True)
        uni, bi = (uni1 + uni2) / 2, (bi1 + bi2) / 2
        print(f"round {r + 1}: iperf3 one-way {uni1:.3f} / {uni2:.3f} GB/s, --bidir per direction "
              f"{bi1:.3f} / {bi2:.3f} GB/s; {load_note()}")  # fmt: skip
        print(f"  collbench all_reduce out-of-place {ar[0]:.3f} in-place {ar[1]:.3f} GB/s; broadcast "
              f"{bc[0]:.3f} / {bc[1]:.3f} GB/s; plain all_reduce loop {plain:.3f} GB/s")  # fmt: skip
        add("bound: iperf3 --bidir per direction / one-way", bi / uni)
        for place, i in (("out-of-place", 0), ("in-place", 1)):
            add(f"all_reduce {place} / iperf3 one-way (literal)", ar[i] / uni)
            add(f"all_reduce {place} / iperf3 --bidir per direction", ar[i] / bi)
            add(f"broadcast {place} / iperf3 one-way", bc[i] / uni)
        add("collbench all_reduce in-place / plain loop", ar[1] / plain)
        add("plain loop / iperf3 one-way", plain / uni)
    print(f"fidelity, median of {args.rounds} rounds:")
    for key, xs in fig.items():
        m = statistics.median(xs)
        judged = "/ iperf3 --bidir" in key or key.startswith("broadcast")
        verdict = f"  target >= {TARGET}: " + ("met" if m >= TARGET else "NOT met") if judged else ""
        print(f"  {key:56s} {m:.3f}{verdict}")


if __name__ == "__main__":
    main()
