"""Find a rank's process (and its container) on a node, in the node's own network namespace.

Workers are found by their environment (RANK=r, as torchrun and srun set it, plus an optional
NAME=VALUE such as a run id), not by a command-line pattern. A serving engine (target
NODE:engine) is found by ORCH_ENGINE=<run id>.<step id> in its environment, no rank needed: every
process that holds it (the engine, its workers, srun on Slurm), and, where a process also holds
ORCH_ENGINE_NODE, only those of the target node. Processes of other network
namespaces are skipped: on the virtual lab every node shares one PID space, and a rank of node1
must not be found from node2. The finder is a short Python program run with the node's python3.
"""

from __future__ import annotations

import json

from orchestrator.errors import FaultError
from orchestrator.faults.base import BuildContext, NodeShell, sh

FINDER = r"""
import json, os, re, sys
rank, extra, name, engine, node = sys.argv[1:6]
me = os.readlink('/proc/self/ns/net')
out = []
for d in os.listdir('/proc'):
    if not d.isdigit() or int(d) == os.getpid():
        continue
    try:
        if os.readlink(f'/proc/{d}/ns/net') != me:
            continue
        if name:
            with open(f'/proc/{d}/comm') as f:
                if f.read().strip() != name:
                    continue
        elif engine:
            with open(f'/proc/{d}/environ', 'rb') as f:
                env = set(f.read().split(b'\0'))
            keys = {e.split(b'=')[0]: e for e in env}
            if b'ORCH_ENGINE' not in keys:
                continue
            if extra and extra.encode() not in env:
                continue
            mine = b'ORCH_ENGINE_NODE=' + node.encode()
            if keys.get(b'ORCH_ENGINE_NODE', mine) != mine:
                continue
        else:
            with open(f'/proc/{d}/environ', 'rb') as f:
                env = set(f.read().split(b'\0'))
            if b'LOCAL_RANK' not in {e.split(b'=')[0] for e in env}:
                continue
            if rank != '*' and f'RANK={rank}'.encode() not in env:
                continue
            if extra and extra.encode() not in env:
                continue
        with open(f'/proc/{d}/cgroup') as f:
            m = re.search(r'(?:libpod-|docker-|docker/)([0-9a-f]{64})', f.read())
        out.append({'pid': int(d), 'container': m.group(1) if m else None})
    except OSError:
        continue
print(json.dumps(out))
"""


def finder_script(
    rank: int | None, match_env: str = "", comm: str = "", *, engine: bool = False, node: str = ""
) -> str:
    """The shell line that lists matching processes as JSON."""
    r = "*" if rank is None else str(rank)
    return sh("python3", "-c", FINDER, r, match_env, comm, "1" if engine else "", node)


def find_processes(
    shell: NodeShell,
    node: str,
    *,
    rank: int | None,
    match_env: str = "",
    comm: str = "",
    engine: bool = False,
) -> list[tuple[int, str | None]]:
    """(pid, container id) of the workers (or of processes named ``comm``, or with ``engine`` of
    the serving engine's processes, ORCH_ENGINE in their environment) on the node.

    Raises:
        FaultError: the finder cannot run, or nothing matches.
    """
    res = shell.run_script(finder_script(rank, match_env, comm, engine=engine, node=node), timeout=20)
    if not res.ok:
        raise FaultError(f"{node}: cannot list processes: {res.brief()}")
    try:
        found = [(int(e["pid"]), e["container"]) for e in json.loads(res.stdout or "[]")]
    except (ValueError, KeyError, TypeError) as e:
        raise FaultError(f"{node}: unreadable process list: {res.stdout[:200]!r}") from e
    if not found and engine:
        raise FaultError(
            f"{node}: no serving engine found in the node's network namespace"
            + (f" ({match_env})" if match_env else ""),
            hint="is the engine running there (ORCH_ENGINE in its environment)?",
        )
    if not found:
        what = f"process {comm!r}" if comm else ("rank " + str(rank) if rank is not None else "worker")
        raise FaultError(
            f"{node}: no {what} found in the node's network namespace",
            hint="is the workload running there (RANK/LOCAL_RANK in its environment)?",
        )
    return found


def target_processes(ctx: BuildContext) -> list[tuple[int, str | None]]:
    """(pid, container id) of the fault's target: its rank(s), or its serving engine; the PIDs go
    to ctx.resolved. Raises FaultError as find_processes."""
    t = ctx.spec.target
    found = find_processes(ctx.shell, ctx.node.name, rank=t.rank, match_env=ctx.spec.params.match_env,
                           engine=t.process == "engine")  # fmt: skip
    ctx.resolved.extend(str(pid) for pid, _ in found)
    return found
