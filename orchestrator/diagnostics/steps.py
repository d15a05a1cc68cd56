"""A diagnostic step: one tool, run once on every node through srun, its output judged per node.

The tools are a registry (TOOLS): each names its binary, the argv a step runs and the parser of its
output (provision/diagtools.py). Every task runs the one constant wrapper WRAPPER: it names its
node first, and where the tool's binary is missing it says so ("orch-diag: no dcgmi on node1")
and exits 127, so that a node without the tool is a finding of that node, not a failed job. Values
reach the wrapper as its arguments ("$@"), never inside its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.errors import ConfigError, ParseError
from orchestrator.metrics.decision import above, below
from orchestrator.models.base import StrictModel
from orchestrator.models.diagnostics import (
    DiagReport,
    DiagThreshold,
    NodeDiag,
    PerftestTest,
)
from orchestrator.models.names import Name
from orchestrator.provision import diagtools
from orchestrator.scheduler.base import JobSpec

# Each task: name the node, refuse a missing binary in words, else run the tool as its own process.
WRAPPER = (
    'node="${ORCH_NODE:-$(hostname)}"; echo "orch-diag: node $node"; '
    'command -v "$1" >/dev/null 2>&1 || { echo "orch-diag: no $1 on $node"; exit 127; }; exec "$@"'
)
# A perftest pair: task 0 serves, task 1 connects to the server's node (the wrapper's $1) once the
# server has had PAIR_WAIT_S to listen; both print the report, the client's is the one read.
PAIR_WAIT_S = 2
PAIR_WRAPPER = (
    'node="${ORCH_NODE:-$(hostname)}"; echo "orch-diag: node $node"; server="$1"; shift; '
    'command -v "$1" >/dev/null 2>&1 || { echo "orch-diag: no $1 on $node"; exit 127; }; '
    f'if [ "${{SLURM_PROCID:-0}}" = 0 ]; then exec "$@"; fi; sleep {PAIR_WAIT_S}; exec "$@" "$server"'
)
_NODE_LINE = re.compile(r"^orch-diag: node (\S+)$", re.M)
_MISSING_LINE = re.compile(r"^orch-diag: no (\S+) on (\S+)$", re.M)


RVS_CONF_DIR = "/opt/rocm/share/rocm-validation-suite/conf"  # where the ROCm package puts RVS's suites


class DiagOptions(StrictModel):
    """What a plan says about a diagnostic step's run."""

    level: int = Field(default=1, ge=1, le=4, description="dcgmi diag -r LEVEL")
    duration_s: int = Field(default=60, ge=1, le=86_400, description="gpu-burn's burn time")
    preset: Name = Field(
        default="p2p", description="TransferBench's preset (p2p, a2a ...); rvs: a suite's conf (gst_single)"
    )


@dataclass(frozen=True)
class DiagTool:
    """One diagnostic tool: its binary, the vendor it runs on, its argv and the parser of its output."""

    name: str
    binary: str
    vendor: Literal["nvidia", "amd", "any"]
    argv: Callable[[DiagOptions], list[str]]
    parse: Callable[[str], DiagReport]


TOOLS: dict[str, DiagTool] = {
    t.name: t
    for t in (
        DiagTool("dcgmi-diag", "dcgmi", "nvidia", lambda o: ["dcgmi", "diag", "-r", str(o.level), "-j"],
                 diagtools.parse_dcgmi_diag),
        DiagTool("gpu-burn", "gpu_burn", "nvidia", lambda o: ["gpu_burn", str(o.duration_s)],
                 diagtools.parse_gpu_burn),
        DiagTool("nvbandwidth", "nvbandwidth", "nvidia", lambda o: ["nvbandwidth"],
                 diagtools.parse_nvbandwidth),
        DiagTool("transferbench", "TransferBench", "amd", lambda o: ["TransferBench", o.preset],
                 diagtools.parse_transferbench),
        DiagTool("rvs", "rvs", "amd", lambda o: ["rvs", "-c", f"{RVS_CONF_DIR}/{o.preset}.conf"],
                 diagtools.parse_rvs),
    )
}  # fmt: skip


def tool(name: str) -> DiagTool:
    """The registered tool; raises ConfigError listing the known ones."""
    if name not in TOOLS:
        raise ConfigError(f"unknown diagnostic {name!r}", hint=f"one of {', '.join(TOOLS)}")
    return TOOLS[name]


def task_argv(diag: DiagTool, opts: DiagOptions) -> list[str]:
    """What each task runs: the wrapper, then the tool's argv as the wrapper's arguments."""
    return ["sh", "-c", WRAPPER, "orch-diag", *diag.argv(opts)]


def diag_job_spec(
    diag: DiagTool, opts: DiagOptions, *, name: str, step_id: str, nodes: Sequence[str], workdir: Path,
    gpus_per_node: int = 0, time_limit_s: int | None = None,
) -> JobSpec:  # fmt: skip
    """The step's job: one task per node, each writing rank-<t>.log; a task that fails (a missing
    tool, a failing diagnostic) does not stop the others."""
    return JobSpec(
        name=name,
        step_id=step_id,
        nodes=list(nodes),
        nnodes=len(nodes),
        ranks_per_node=1,
        gpus_per_node=gpus_per_node,
        argv=task_argv(diag, opts),
        workdir=workdir,
        task_env={"ORCH_NODE": "SLURMD_NODENAME"},
        kill_on_bad_exit=False,
        time_limit_s=time_limit_s,
    )


class PerftestOptions(StrictModel):
    """A perftest bandwidth test between two nodes."""

    test: PerftestTest = "ib_write_bw"
    device: Name | None = Field(default=None, description="-d: the RDMA device (mlx5_0); None: the first")
    size: int = Field(default=1 << 20, ge=1, le=1 << 30, description="-s: message size in bytes")
    duration_s: int = Field(default=5, ge=1, le=3600, description="-D: seconds to run")


def perftest_argv(opts: PerftestOptions) -> list[str]:
    """The tool's argv on both sides (the client's gets the server's node appended by the wrapper)."""
    argv = [opts.test, "--report_gbits", "-s", str(opts.size), "-D", str(opts.duration_s)]
    return [*argv, "-d", opts.device] if opts.device else argv


def perftest_pair_spec(
    pair: tuple[str, str], opts: PerftestOptions, *, name: str, step_id: str, workdir: Path,
    time_limit_s: int | None = None,
) -> JobSpec:  # fmt: skip
    """One pair of a round (the pair-rounds of stragglers, runs/stragglers.py): two tasks, the first
    node serving, the second connecting to it."""
    server, client = pair
    if server == client:
        raise ConfigError(f"perftest pair {server}-{client}: a node cannot pair with itself")
    return JobSpec(
        name=name,
        step_id=step_id,
        nodes=[server, client],
        nnodes=2,
        ranks_per_node=1,
        argv=["sh", "-c", PAIR_WRAPPER, "orch-diag", server, *perftest_argv(opts)],
        workdir=workdir,
        task_env={"ORCH_NODE": "SLURMD_NODENAME"},
        kill_on_bad_exit=False,
        time_limit_s=time_limit_s,
    )


def _judge(report: DiagReport, thresholds: Sequence[DiagThreshold]) -> list[str]:
    reasons = [
        f"{c.name}{'' if c.gpu is None else f' (GPU {c.gpu})'}: {c.status}"
        for c in report.checks
        if c.status == "fail"
    ]
    for t in thresholds:
        figures = [
            f for f in report.figures if f.name == t.figure and (t.where is None or f.where == t.where)
        ]
        if not figures:
            reasons.append(f"{t.figure}: not in the output")
        for f in figures:
            gpu = "" if f.gpu is None else f" GPU {f.gpu}"
            if t.min is not None and below(f.value, t.min):
                reasons.append(f"{f.name}{gpu}: {f.value:g} {f.unit} below {t.min:g}")
            if t.max is not None and above(f.value, t.max):
                reasons.append(f"{f.name}{gpu}: {f.value:g} {f.unit} above {t.max:g}")
    return reasons


def read_node_output(diag: DiagTool, text: str, thresholds: Sequence[DiagThreshold] = ()) -> NodeDiag:
    """One task's log: the node it names, then the tool missing, unreadable, failing or passing."""
    named = _NODE_LINE.search(text)
    node = named.group(1) if named else "?"
    missing = _MISSING_LINE.search(text)
    if missing:
        return NodeDiag(
            node=missing.group(2), status="missing", reasons=[f"no {missing.group(1)} on {missing.group(2)}"]
        )
    body = _NODE_LINE.sub("", text)
    try:
        report = diag.parse(body).model_copy(update={"node": node})
    except ParseError as e:
        return NodeDiag(node=node, status="unreadable", reasons=[e.message])
    reasons = _judge(report, thresholds)
    return NodeDiag(node=node, status="fail" if reasons else "pass", reasons=reasons, report=report)


PERFTEST = DiagTool("perftest", "ib_write_bw", "any", lambda o: [], diagtools.parse_perftest_bw)


def read_pair(
    pair: tuple[str, str], logs: Mapping[str, str], thresholds: Sequence[DiagThreshold] = ()
) -> NodeDiag:
    """A perftest pair's two task logs as one result named 'server-client': missing where either
    node lacks the tool, else the client's report judged (the server may print none)."""
    results = [read_node_output(PERFTEST, text, thresholds) for text in logs.values()]
    name = f"{pair[0]}-{pair[1]}"
    missing = [r for r in results if r.status == "missing"]
    if missing:
        return NodeDiag(node=name, status="missing", reasons=[x for r in missing for x in r.reasons])
    client = next((r for r in results if r.node == pair[1]), None)
    if client is None:
        return NodeDiag(node=name, status="unreadable", reasons=[f"no log names the client {pair[1]}"])
    return client.model_copy(update={"node": name})


def read_step(
    diag: DiagTool, logs: Mapping[str, str], thresholds: Sequence[DiagThreshold] = ()
) -> list[NodeDiag]:
    """Every task log of a step (rank log name -> text), one result per node, in node order."""
    return sorted((read_node_output(diag, text, thresholds) for text in logs.values()), key=lambda r: r.node)
