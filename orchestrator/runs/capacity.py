"""Drive a capacity search with real probes: each probe is one open-loop level of the load
generator (workloads/loadgen.py) at the rate the search chooses (metrics/capacity.py), its
records appended to a file as they end, stopped early once it clearly fails.

docs/serving.md, "Capacity search". The serving runner (runs/serving.py) calls run_capacity for a
workload whose `load` has a `capacity`; tests call it against the stand-in server.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.metrics.capacity import LATE_FLOOR_S, Bisection, ProbeTally, combine, judge_probe
from orchestrator.models.serving import CapacitySearch, ServingSlos, ServingWorkload
from orchestrator.models.serving_results import CapacityProbe, CapacityResult, RequestRecord
from orchestrator.workloads.loadgen import LevelRunner, LoadSpec, RecordWriter, Target, level_specs
from orchestrator.workloads.sessions import generator_for

ProbeFile = Callable[[int, int, float], Path]
"""(repeat, probe index, rate) -> the probe's records file."""


def probe_name(repeat: int, index: int, rate: float) -> str:
    """The records file of a probe: records-capacity-<repeat>-<index>-r<rate>.jsonl."""
    return f"records-capacity-{repeat}-{index}-r{rate:g}.jsonl"


def capacity_template(
    w: ServingWorkload,
    targets: Sequence[Target],
    *,
    datasets: dict[tuple[str, str], Sequence[int]],
    prompts: Sequence[str] | None = None,
) -> LoadSpec:
    """The open-loop LoadSpec of a workload's probes (lengths, warm-up, count, client settings as
    its levels have them) at min_rate; each probe replaces rate and seed. Raises ValueError when
    the workload has no capacity search or a dataset was not read."""
    search = w.load.capacity
    if search is None:
        raise ValueError(f"serving {w.name}: no load.capacity")
    load = w.load.model_copy(update={"concurrency": [], "rates": [search.min_rate]})
    return level_specs(w.model_copy(update={"load": load}), targets, datasets=datasets, prompts=prompts)[0]


class CapacityRun:
    """One capacity search over `template` (an open-loop LoadSpec: targets, lengths, warm-up,
    requests); each probe replaces its rate and seed. late_floor_s: the generator's lateness always
    tolerated (metrics/capacity.py's rule; tests on a shared machine raise it). stop() ends the
    probe in flight and the search (the step's time limit, an interruption): the result is then
    incomplete."""

    def __init__(
        self,
        search: CapacitySearch,
        slos: ServingSlos,
        template: LoadSpec,
        probe_file: ProbeFile | None = None,
        *,
        rel: Callable[[Path], str] = str,
        on_probe: Callable[[CapacityProbe], None] | None = None,
        late_floor_s: float = LATE_FLOOR_S,
    ) -> None:
        if template.requests is None or template.rate is None:
            raise ValueError("a capacity probe is an open-loop level with a count of requests")
        self.search, self.slos, self.template = search, slos, template
        self.probe_file, self.rel, self.on_probe = probe_file, rel, on_probe
        self.late_floor_s = late_floor_s
        self._lock = threading.Lock()
        self._gen: LevelRunner | None = None
        self._stopped = False

    def stop(self) -> None:
        """End the search: the probe in flight is stopped, no further probe starts (any thread)."""
        with self._lock:
            self._stopped = True
            gen = self._gen
        if gen is not None:
            gen.stop()

    def run(self) -> CapacityResult:
        """Every repeat in turn (seeds template.seed, + 1, ...), then their combination."""
        repeats = []
        for k in range(self.search.repeats):
            state = Bisection(self.search, repeat=k)
            while not self._stopped and (rate := state.next_rate()) is not None:
                probe = self._probe(k, len(state.probes), rate)
                if self._stopped:
                    break
                state.feed(probe)
                if self.on_probe is not None:
                    self.on_probe(probe)
            repeats.append(state.result())
            if self._stopped:
                break
        return combine(self.search, repeats)

    def _probe(self, repeat: int, index: int, rate: float) -> CapacityProbe:
        seed = self.template.seed + repeat
        spec = dataclasses.replace(self.template, rate=rate, seed=seed)
        planned = spec.requests
        assert planned is not None  # checked in __init__
        tally = ProbeTally(planned, self.search.target_attainment, self.slos)
        records: list[RequestRecord] = []
        path = self.probe_file(repeat, index, rate) if self.probe_file is not None else None
        writer = RecordWriter(path) if path is not None else None
        early = threading.Event()
        gen: LevelRunner

        def emit(rec: RequestRecord) -> None:  # serialised: the generator's emit lock, or (several
            # processes) the one thread that collects their records
            if writer is not None:
                writer.write(rec)
            records.append(rec)
            tally.feed(rec)
            if tally.clearly_fails and not early.is_set():
                early.set()
                gen.stop()

        gen = generator_for(spec, emit)  # in spec.procs processes when the plan says so
        with self._lock:
            self._gen = None if self._stopped else gen
        try:
            if not self._stopped:
                gen.run()
        finally:
            gen.stop()
            with self._lock:
                self._gen = None
            if writer is not None:
                writer.close()
        return judge_probe(
            records, rate=rate, seed=seed, planned=planned, target=self.search.target_attainment,
            slos=self.slos, stopped_early=early.is_set(), path=None if path is None else self.rel(path),
            late_floor_s=self.late_floor_s,
        )  # fmt: skip
