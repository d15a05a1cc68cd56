"""The fleet baseline (docs/fleet.md): each kind of node judged against its own certified nodes.

Read from the results store alone (and each stored run's certs/ folder):
- samples: the busbw (out of place) of every passed step of one node (single) or two nodes of
  one kind (pair), by collective, ranks per node and message size (ResultsStore.node_samples),
  from scale-test ladders, isolate, stragglers and any other run of steps;
- kinds: each node's gpu_vendor and GPU model in each run (ResultsStore.node_kinds);
- certified: a node is certified in a run when the run's folder holds an intact certificate of it
  issued from that run (certs.service.entries).

A node's figure is the median of its samples in its newest run that has them (a pair figure: the
pairs it took part in, so one slow partner moves it by one sample only). The baseline holds, per
kind, scope, collective, ranks per node and size, the median of the certified nodes' figures
(from certified runs only, both nodes of a pair certified) and the robust spread of their logs
(noise.mad_sigma). A node is an outlier when its figure lies below the kind's limit
(decision.fleet_limit: median x exp(-max(ln(1 + floor), k x sigma))), whatever the plan's fixed
thresholds said; figures of fewer than MIN_NODES nodes are kept but judge no one.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from orchestrator.certs import digest
from orchestrator.certs.service import entries
from orchestrator.errors import ConfigError
from orchestrator.metrics import decision, noise
from orchestrator.models.cluster import same_gpu_model
from orchestrator.models.fleet import FleetBaseline, FleetFigure, FleetOutlier, NodeKind, NodeSample, Scope
from orchestrator.store.db import ResultsStore

K = decision.K
"""Default k: an outlier lies more than k robust standard deviations (1.4826 x MAD) below its kind."""
FLOOR = decision.FLOOR
"""Default least band: a node within 5% of its kind's median is never an outlier."""
MIN_NODES = 3
"""A figure judges nodes only when this many certified nodes gave it (a spread needs a crowd)."""

FigureKey = tuple[str, Scope, str, int, int]
"""(kind key, scope, collective, ranks per node, size): the kind key is the kind's label compared
without case or runs of spaces (models.cluster.same_gpu_model)."""
RunNode = tuple[str, str]


def kind_key(label: str) -> str:
    return same_gpu_model(label)


def certified_nodes(store: ResultsStore) -> tuple[set[RunNode], list[str]]:
    """(run id, node) of every intact certificate in a stored run's folder issued from that run;
    and notes on the runs whose folder is gone."""
    found: set[RunNode] = set()
    notes: list[str] = []
    for run in store.runs():
        if not run.run_dir.is_dir():
            notes.append(f"run {run.run_id}: its folder {run.run_dir} is gone; its certificates are not read")
            continue
        try:
            certs = entries(run.run_dir)
        except ConfigError as e:
            notes.append(f"run {run.run_id}: {e.message}")
            continue
        found.update((run.run_id, e.node) for e in certs if e.intact and e.node and e.run_id == run.run_id)
    return found, notes


def node_figures(
    samples: Iterable[NodeSample],
    kinds: Mapping[RunNode, NodeKind],
    certified: set[RunNode] | None = None,
) -> dict[tuple[str, FigureKey], tuple[float, str, str]]:
    """(node, figure key) -> (the node's figure, its run id, its kind's label): the median of its
    samples in its newest run that has them. With certified, only samples whose every node is
    certified in that run count. A sample whose nodes' kinds are unknown or differ is left out."""
    by: dict[tuple[str, FigureKey], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: dict[str, tuple[str, str]] = {}
    labels: dict[str, str] = {}
    for s in samples:
        ks = [kinds.get((s.run_id, n)) for n in s.nodes]
        if any(k is None for k in ks) or len({kind_key(k.label) for k in ks if k}) != 1:
            continue
        if certified is not None and any((s.run_id, n) not in certified for n in s.nodes):
            continue
        label = ks[0].label if ks[0] else ""
        labels[kind_key(label)] = label
        scope: Scope = "single" if len(s.nodes) == 1 else "pair"
        key: FigureKey = (kind_key(label), scope, s.collective, s.ranks_per_node, s.size_bytes)
        order[s.run_id] = (s.started_at.isoformat() if s.started_at else "", s.run_id)
        for n in s.nodes:
            by[(n, key)][s.run_id].append(s.busbw_gbs)
    out: dict[tuple[str, FigureKey], tuple[float, str, str]] = {}
    for (node, key), runs in by.items():
        newest = max(runs, key=lambda r: order[r])
        out[(node, key)] = (statistics.median(runs[newest]), newest, labels[key[0]])
    return out


def _sealed(b: FleetBaseline) -> FleetBaseline:
    body = b.model_dump(mode="json", exclude={"sha256", "built_at"})
    return b.model_copy(update={"sha256": digest.sha256(body)})


def build(
    store: ResultsStore, *, k: float = K, floor: float = FLOOR, now: datetime | None = None
) -> FleetBaseline:
    """The fleet baseline of the store's certified figures (not stored: ResultsStore.save_fleet_baseline).

    Raises ConfigError when k is not positive or floor is negative.
    """
    if k <= 0 or floor < 0:
        raise ConfigError(f"k = {k}, floor = {floor}: k must be above 0 and floor at least 0")
    samples = store.node_samples()
    kinds = store.node_kinds()
    certified, notes = certified_nodes(store)
    unkinded = sorted({s.run_id for s in samples if not any((s.run_id, n) in kinds for n in s.nodes)})
    if unkinded:
        notes.append(
            f"runs without node kinds (stored before schema 7, or without an inventory): "
            f"{', '.join(unkinded)}; `orch runs ingest RUN` stores them"
        )
    figures = node_figures(samples, kinds, certified)
    grouped: dict[FigureKey, list[float]] = defaultdict(list)
    label: dict[str, str] = {}
    runs: set[str] = set()
    for (_node, key), (value, run_id, kind) in figures.items():
        grouped[key].append(value)
        label[key[0]] = kind
        runs.add(run_id)
    out: list[FleetFigure] = []
    for key in sorted(grouped):
        values = grouped[key]
        sigma = noise.mad_sigma(noise.log_values(values)) or 0.0
        out.append(
            FleetFigure(kind=label[key[0]], scope=key[1], collective=key[2], ranks_per_node=key[3],
                        size_bytes=key[4], nodes=len(values), median_gbs=statistics.median(values),
                        mad=sigma / noise.MAD_SCALE, sigma=sigma)
        )  # fmt: skip
    few = sum(1 for f in out if f.nodes < MIN_NODES)
    if few:
        notes.append(f"{few} figures of fewer than {MIN_NODES} certified nodes: kept, they judge no node")
    b = FleetBaseline(
        built_at=now or datetime.now(UTC), k=k, floor=floor, runs=sorted(runs), figures=out, notes=notes
    )
    return _sealed(b)


def intact(b: FleetBaseline) -> bool:
    """Whether a stored baseline's hash still matches its content."""
    return _sealed(b).sha256 == b.sha256


def outliers(store: ResultsStore, baseline: FleetBaseline) -> list[FleetOutlier]:
    """Every node whose figure (its newest, certified or not) lies below its kind's limit in the
    baseline, at each scope, collective, ranks per node and size the baseline judges."""
    table = {
        (kind_key(f.kind), f.scope, f.collective, f.ranks_per_node, f.size_bytes): f
        for f in baseline.figures
        if f.nodes >= MIN_NODES
    }
    found: list[FleetOutlier] = []
    for (node, key), (value, run_id, _kind) in node_figures(store.node_samples(), store.node_kinds()).items():
        f = table.get(key)
        if f is None:
            continue
        limit = decision.fleet_limit(f.median_gbs, f.sigma, k=baseline.k, floor=baseline.floor)
        if decision.below(value, limit):
            found.append(
                FleetOutlier(node=node, figure=f, value_gbs=value, run_id=run_id, k=baseline.k,
                             limit_gbs=limit)
            )  # fmt: skip
    found.sort(key=lambda o: (o.node, o.figure.scope, o.figure.collective, o.figure.ranks_per_node,
                              o.figure.size_bytes))  # fmt: skip
    return found


def judge_run(store: ResultsStore, run_id: str, ref: str | None = None) -> tuple[str, dict[str, list[str]]]:
    """The hash of the stored fleet baseline ref (its hash or a prefix; None: the newest) and, for
    each node of the stored run run_id outside it, why (what `cert issue --fleet-baseline` refuses).

    Raises ConfigError when no stored baseline matches ref, or its hash no longer matches it.
    """
    b = store.fleet_baseline(ref)
    if b is None:
        raise ConfigError(
            f"no fleet baseline {ref or ''} in the results store {store.path}".replace("  ", " "),
            hint="orch fleet baseline builds and stores one",
        )
    if not intact(b):
        raise ConfigError(f"fleet baseline {b.sha256}: its content no longer matches its hash")
    reasons: dict[str, list[str]] = defaultdict(list)
    for o in outliers(store, b):
        if o.run_id == run_id:
            reasons[o.node].append(describe(o))
    return b.sha256, dict(reasons)


def describe(o: FleetOutlier) -> str:
    """'pair all_reduce 1 ranks/node 1048576 B: 0.41 GB/s below 0.78 (median 0.93, MAD 3.1%, k 3)'."""
    f = o.figure
    return (
        f"fleet outlier: {f.scope} {f.collective} {f.ranks_per_node} ranks/node {f.size_bytes} B: "
        f"{o.value_gbs:.4g} GB/s below {o.limit_gbs:.4g} (median {f.median_gbs:.4g} of kind {f.kind}, "
        f"MAD {f.mad:.1%}, k {o.k:g})"
    )
