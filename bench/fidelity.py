"""bench/fidelity.py — collbench's large-message busbw over the TCP bandwidth of the same link.

Method: on the running virtual lab, between its first two nodes (node1, node2 of the inventory),
in one run:
  1. iperf3 over the fabric addresses: server in node2's namespace
     (`ip netns exec orch-node2 iperf3 -s -1 -B <node2 fabric>`), client in node1's
     (`iperf3 -c <node2 fabric> -B <node1 fabric> -t 5 -J`, one TCP stream), received bits/s.
  2. collbench through Slurm, as orch's sbatch template runs it: `srun -N 2 --ntasks-per-node=1
     --nodelist=node1,node2 --exclusive python -m orchestrator.workloads.collbench
     --collectives all_reduce --sizes 256M --warmup 3 --iters 10 --backend gloo
     --socket-ifname <fabric NIC>` with MASTER_ADDR = node1's fabric address; 2 ranks, one per
     node, float32, 256 MiB. busbw = algbw x 2(n-1)/n = algbw for n = 2 (nccl-tests' rule).
     Run twice per round: collbench's default (one call per op) and --channels 4 (a large
     all_reduce split into 4 concurrent calls on gloo's worker threads).
  3. iperf3 again; the TCP figure is the mean of the two iperf3 runs (both printed).
fidelity = collbench busbw / TCP bandwidth (both in bytes/s), for out-of-place (orch's summary
figure) and in-place. Repeated --rounds times; medians printed. Target: >= 0.7. Traffic stays
in the lab (198.18.0.0/15). The lab's cores are shared with everything else on the machine, so
the load average is printed with every round. Never part of the pass/fail test run; needs root
(ip netns).

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
# collbench's default (one call per op) and --channels 4 (a large all_reduce split into 4
# concurrent calls on gloo's worker threads); both in each round, so both see the same load.
VARIANTS = {"channels=1 (default)": 1, "channels=4": 4}


def netns(node: Node) -> str:
    return f"orch-{node.name}"  # the lab's namespace naming (orch lab status)


def iperf3_gbs(server: Node, client: Node, seconds: int) -> float:
    """TCP bandwidth client -> server over their fabric addresses, GB/s (1e9 bytes/s)."""
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
             "-B", str(client.fabric_address), "-p", port, "-t", str(seconds), "-J"],
            capture_output=True, text=True, timeout=seconds + 30, check=True,
        ).stdout  # fmt: skip
    finally:
        try:
            srv.wait(timeout=10)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.wait()
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 8e9


def collbench_gbs(
    a: Node, b: Node, env: dict[str, str], size: str, iters: int, channels: int
) -> tuple[float, float]:
    """(out-of-place, in-place) busbw GB/s of a 2-rank all_reduce on nodes a, b through srun."""
    iface = a.rdma_ifaces[0]
    argv = [
        "srun", "-N", "2", "--ntasks-per-node=1", f"--nodelist={a.name},{b.name}", "--exclusive",
        "--kill-on-bad-exit=1", "--time=10",
        sys.executable, "-m", "orchestrator.workloads.collbench", "--collectives", "all_reduce",
        "--sizes", size, "--warmup", "3", "--iters", str(iters), "--backend", "gloo",
        "--socket-ifname", iface, "--timeout", "300", "--channels", str(channels),
    ]  # fmt: skip
    port = str(20000 + secrets.randbelow(20000))
    run_env = {**env, "MASTER_ADDR": str(a.fabric_address), "MASTER_PORT": port, "GLOO_SOCKET_IFNAME": iface}
    proc = subprocess.run(argv, capture_output=True, text=True, env=run_env, timeout=900)
    rows = [json.loads(line[len(ORCH_JSON_PREFIX):]) for line in proc.stdout.splitlines()
            if line.startswith(ORCH_JSON_PREFIX)]  # fmt: skip
    if proc.returncode != 0 or not rows:
        sys.exit(f"collbench failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    row = rows[-1]
    return float(row["out_of_place"]["busbw_gbs"]), float(row["in_place"]["busbw_gbs"])


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
    print(f"{a.name} ({a.fabric_address}) <-> {b.name} ({b.fabric_address}), all_reduce {args.size}, 2 ranks")
    fid: dict[str, list[float]] = {f"{v} {p}": [] for v in VARIANTS for p in ("out-of-place", "in-place")}
    for r in range(args.rounds):
        wait_idle([a.name, b.name], env)
        tcp1 = iperf3_gbs(b, a, args.iperf_seconds)
        got = {v: collbench_gbs(a, b, env, args.size, args.iters, ch) for v, ch in VARIANTS.items()}
        tcp2 = iperf3_gbs(b, a, args.iperf_seconds)
        tcp = (tcp1 + tcp2) / 2
        print(f"round {r + 1}: iperf3 {tcp1:.3f} / {tcp2:.3f} GB/s (mean {tcp:.3f}); {load_note()}")
        for v, (o, i) in got.items():
            fid[f"{v} out-of-place"].append(o / tcp)
            fid[f"{v} in-place"].append(i / tcp)
            print(f"  collbench {v}: busbw out-of-place {o:.3f} GB/s, in-place {i:.3f} GB/s; "
                  f"fidelity {o / tcp:.3f} / {i / tcp:.3f}")  # fmt: skip
    print(f"fidelity (collbench busbw / iperf3 TCP), median of {args.rounds} rounds:")
    for key, xs in fid.items():
        m = statistics.median(xs)
        print(f"  {key:28s} {m:.3f}  target >= {TARGET}: " + ("met" if m >= TARGET else "NOT met"))


if __name__ == "__main__":
    main()
