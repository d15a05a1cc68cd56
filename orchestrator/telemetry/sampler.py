"""GPU telemetry while ladder steps run: one sampling thread per node, over the run's kept-open
node shells (remote/shells.py, one connection per node for the whole run, never one per sample).

start() asks each node of the ladder which tool it has (nvidia-smi, else amd-smi, else rocm-smi)
and returns
the lines to print once per run (nodes with no tool, nodes that could not be asked). A node's
thread samples every `interval_s` while a step runs on it; step_ended() hands back that step's
samples, writes them to steps/<id>/telemetry.json and summarises them. close() stops the threads
and closes the shells; nothing here raises over the run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path

from orchestrator.errors import OrchError
from orchestrator.models.cluster import Cluster
from orchestrator.models.plan import Step
from orchestrator.models.results import Collective, CollSummary
from orchestrator.models.serving import ServingStep
from orchestrator.models.telemetry import (
    NodeSample,
    NodeTelemetry,
    StepTelemetry,
    StepTelemetryRecord,
    TelemetryTool,
)
from orchestrator.remote.base import NodeShell
from orchestrator.store.rundir import atomic_write
from orchestrator.telemetry.smi import parse_sample, sample_script
from orchestrator.telemetry.summary import no_tool_line, summarize_step

OpenShells = Callable[[Cluster], AbstractContextManager[Mapping[str, NodeShell]]]
PROBE_TIMEOUT_S = 15.0
MAX_ERRORS = 5
# where the tools live when the nodes' non-login shell has no /opt/rocm/bin on its PATH; the order
# is the order of preference (amd-smi before rocm-smi: rocm-smi's JSON has no ECC, RAS or xGMI
# counts, and AMD deprecates it for amd-smi from ROCm 6 on)
_KNOWN_PATHS: dict[TelemetryTool, str] = {
    "nvidia-smi": "/usr/bin/nvidia-smi",
    "amd-smi": "/opt/rocm/bin/amd-smi",
    "rocm-smi": "/opt/rocm/bin/rocm-smi",
}
_OTHER_TOOLS = ("dcgmi",)
PROBE_SCRIPT = "; ".join(
    [
        *(
            f'p=$(command -v {t} || {{ test -x {p} && echo {p}; }}) && echo {t} "$p"'
            for t, p in _KNOWN_PATHS.items()
        ),
        *(f"command -v {t} >/dev/null && echo {t} found" for t in _OTHER_TOOLS),
        "true",
    ]
)


def parse_probe(text: str) -> tuple[TelemetryTool | None, str | None, list[str]]:
    """The probe's lines: the tool orch samples with and its path (nvidia-smi, then amd-smi, then
    rocm-smi), and the other GPU tools found (dcgmi), which orch does not read."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, _, path = line.strip().partition(" ")
        if name and path:
            found.setdefault(name, path)
    tool = next((t for t in _KNOWN_PATHS if found.get(t, "").startswith("/")), None)
    return tool, found[tool] if tool else None, [t for t in _OTHER_TOOLS if t in found]


def _default_shells(cluster: Cluster) -> AbstractContextManager[Mapping[str, NodeShell]]:
    from orchestrator.remote.shells import node_shells

    return node_shells(cluster)


class _NodeSampler:
    """One node's thread: samples while `active` is set, keeps them with their time."""

    def __init__(
        self, node: str, shell: NodeShell, tool: TelemetryTool, path: str, interval_s: float,
        t0: float, stop: threading.Event,
    ) -> None:  # fmt: skip
        self.node, self.shell, self.tool = node, shell, tool
        self.interval_s, self.t0, self.stop = interval_s, t0, stop
        self.script = sample_script(tool, path)
        self.active = threading.Event()
        self.users = 0
        self.samples: list[NodeSample] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, name=f"telemetry-{node}", daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            if not self.active.wait(0.2):
                continue
            start = time.monotonic()
            self.sample_once(start - self.t0)
            self.stop.wait(max(0.0, self.interval_s - (time.monotonic() - start)))

    def sample_once(self, t_s: float) -> None:
        """Run the tool once; a failure is kept (the first few), never raised."""
        try:
            res = self.shell.run_script(self.script, timeout=max(10.0, 3 * self.interval_s))
            if not res.ok:
                raise OrchError(res.brief())
            sample = NodeSample(t_s=round(t_s, 3), tool=self.tool, gpus=parse_sample(self.tool, res.stdout))
        except OrchError as e:
            with self.lock:
                if len(self.errors) < MAX_ERRORS:
                    self.errors.append(e.message)
            return
        with self.lock:
            self.samples.append(sample)

    def take(self, since_s: float, until_s: float) -> NodeTelemetry:
        """The samples taken in [since_s, until_s]; older ones are dropped."""
        with self.lock:
            got = [s for s in self.samples if since_s <= s.t_s <= until_s]
            self.samples = [s for s in self.samples if s.t_s > until_s]
            errors, self.errors = self.errors, []
        return NodeTelemetry(node=self.node, tool=self.tool, samples=got, errors=errors)


class TelemetrySampler:
    """The run's telemetry: started once, told when steps start and end, closed at the run's end."""

    def __init__(
        self,
        cluster: Cluster,
        steps: Sequence[Step | ServingStep],
        interval_s: float,
        open_shells: OpenShells | None = None,
    ) -> None:
        self.cluster, self.interval_s = cluster, interval_s
        self.nodes = sorted({n for s in steps for n in s.nodes})
        self._open = open_shells or _default_shells
        self._exit = contextlib.ExitStack()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.samplers: dict[str, _NodeSampler] = {}
        self._started: dict[str, float] = {}
        self.why_not: dict[str, str] = {}  # node -> why it is not sampled (no tool, not asked)

    def start(self) -> list[str]:
        """Ask every node of the ladder for its tool and start the samplers; returns the lines to
        print once for the run (nodes without a tool, nodes that could not be asked)."""
        sub = self.cluster.model_copy(update={"nodes": [self.cluster.node(n) for n in self.nodes]})
        try:
            shells = self._exit.enter_context(self._open(sub))
        except OrchError as e:
            self.why_not = {n: f"not sampled: {e.message}" for n in self.nodes}
            return [f"telemetry: not sampled: {e.message}"]
        probes: dict[str, tuple[TelemetryTool | None, str | None, list[str]] | str] = {}

        def probe(node: str) -> None:
            try:
                res = shells[node].run_script(PROBE_SCRIPT, timeout=PROBE_TIMEOUT_S)
                probes[node] = parse_probe(res.stdout) if res.ok else res.brief()
            except OrchError as e:
                probes[node] = e.message

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(self.nodes)))) as pool:
            list(pool.map(probe, self.nodes))
        none: list[str] = []
        other: list[str] = []
        unasked: list[str] = []
        for node in self.nodes:
            got = probes.get(node, "no answer")
            if isinstance(got, str):
                unasked.append(f"{node} ({got})")
                self.why_not[node] = f"could not ask {node}: {got}"
                continue
            tool, path, others = got
            if tool is None or path is None:
                none.append(node)
                self.why_not[node] = f"no power telemetry on {node}: no {'/'.join(_KNOWN_PATHS)}"
                other += [f"{node} has {t}" for t in others]
                continue
            sampler = _NodeSampler(node, shells[node], tool, path, self.interval_s, self._t0, self._stop)
            self.samplers[node] = sampler
            sampler.thread.start()
        lines = []
        if none:
            lines.append(no_tool_line(none) + (f" ({'; '.join(other)}: not read by orch)" if other else ""))
        if unasked:
            lines.append(f"telemetry: could not ask {'; '.join(unasked)}; no samples there")
        return lines

    def step_started(self, step: Step) -> None:
        """Sample the step's nodes from now on."""
        self.window_started(step.id, step.nodes)

    def window_started(self, key: str, nodes: Sequence[str]) -> None:
        """Sample `nodes` from now on, for the window `key` (a ladder step, a serving level)."""
        with self._lock:
            self._started[key] = time.monotonic() - self._t0
            for n in nodes:
                if (s := self.samplers.get(n)) is not None:
                    s.users += 1
                    s.active.set()

    def window_ended(self, key: str, nodes: Sequence[str]) -> list[NodeTelemetry] | None:
        """Stop sampling `nodes` for the window `key` (unless another window samples them) and
        return its samples per node that has a tool; None when none has or it never started."""
        now = time.monotonic() - self._t0
        with self._lock:
            since = self._started.pop(key, None)
            mine = [self.samplers[n] for n in nodes if n in self.samplers]
            if since is not None:
                for s in mine:
                    s.users -= 1
                    if s.users <= 0:
                        s.users = 0
                        s.active.clear()
        if since is None or not mine:
            return None
        return [s.take(since, now) for s in mine]

    def step_ended(
        self, step: Step, summary: Mapping[Collective, CollSummary], folder: Path | None
    ) -> StepTelemetry | None:
        """Stop sampling the step's nodes (unless another step runs there), write its samples to
        folder/telemetry.json and return its summary; None when none of its nodes has a tool or
        the step never started."""
        records = self.window_ended(step.id, step.nodes)
        if records is None:
            return None
        if folder is not None:
            rec = StepTelemetryRecord(step=step.id, interval_s=self.interval_s, nodes=records)
            with contextlib.suppress(OSError):  # the summary still goes into the step's result
                atomic_write(folder / "telemetry.json", rec.model_dump_json(indent=1) + "\n")
        return summarize_step(step, records, summary, self.interval_s)

    def close(self) -> None:
        """Stop every sampler and close the shells; never raises."""
        self._stop.set()
        for s in self.samplers.values():
            s.active.set()  # wake it so that it sees stop
        for s in self.samplers.values():
            s.thread.join(max(15.0, 3 * self.interval_s))
        with contextlib.suppress(Exception):
            self._exit.close()
