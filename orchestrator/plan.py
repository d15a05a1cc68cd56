"""Load a test plan (built-in name or YAML file), apply CLI overrides, and expand it into steps."""

from __future__ import annotations

import logging
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.plan import (
    SLURM_WORD,
    Plan,
    PlanOverrides,
    SizeRange,
    Step,
    check_counts_spec,
    parse_size,
    resolve_counts,
)
from orchestrator.models.results import COLLECTIVES, PlanCollective, run_size
from orchestrator.models.serving import GPU_ENGINES, ServingStep, ServingWorkload
from orchestrator.stacks import check_variants

log = logging.getLogger(__name__)

DEFAULT_PLAN = "smoke"
_SIZES_RE = re.compile(r"^([^:]+):([^:]+)(?::x(\d+))?$", re.IGNORECASE)


def builtin_plans() -> list[str]:
    """Names of the plans shipped in orchestrator/plans/."""
    root = resources.files("orchestrator") / "plans"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def parse_sizes(text: str, *, flag: str = "--sizes") -> SizeRange:
    """Parse `MIN:MAX[:xF]` (e.g. `8:128M:x2`) or one size (`1M`) into a SizeRange.

    Raises ConfigError naming `flag` and the value when the text is not one of those forms.
    """
    try:
        m = _SIZES_RE.match(text.strip())
        if m:
            factor = int(m.group(3)) if m.group(3) else 2
            return SizeRange(min=parse_size(m.group(1)), max=parse_size(m.group(2)), factor=factor)
        one = parse_size(text)
        return SizeRange(min=one, max=one)
    except (ValueError, ValidationError) as e:
        raise ConfigError(
            f"{flag} {text!r}: {_first_error(e)}",
            hint="give MIN:MAX:xFACTOR such as 8:128M:x2, or one size such as 1M (K, M, G are binary)",
        ) from e


def parse_counts(text: str, *, flag: str, n: int | None = None, g: int | None = None) -> list[int]:
    """Parse `1,2,4`, `1..N`, `2..8` or `1..G:x2` into sorted counts (N = n nodes, G = g GPUs).

    Raises ConfigError naming `flag` and the value.
    """
    try:
        return resolve_counts(text, n, g)
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: {e}", hint="give e.g. 1,2,4 or 1..N or 1..G:x2") from e


def _check_spec(text: str, flag: str) -> str:
    try:
        check_counts_spec(text)
    except ValueError as e:
        raise ConfigError(f"{flag} {text!r}: {e}", hint="give e.g. 1,2,4 or 1..N or 1..G:x2") from e
    return text


def parse_collectives(text: str, *, flag: str = "--collectives") -> list[PlanCollective]:
    """Parse a comma list of collective names; raises ConfigError naming the unknown ones."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLLECTIVES]
    if not names or unknown:
        raise ConfigError(
            f"{flag} {text!r}: unknown collective(s) {', '.join(unknown) or '(none given)'}",
            hint=f"choose from {', '.join(COLLECTIVES)}",
        )
    return [c for c in COLLECTIVES if c in names]


def load_plan(ref: str | Path | None = None) -> Plan:
    """Load a built-in plan by name (smoke, acceptance, nightly) or a YAML file by path.

    None loads the default plan (smoke). Raises ConfigError when the name is unknown, the file
    cannot be read, or its content is not a valid plan (the file and field are named).
    """
    ref = DEFAULT_PLAN if ref is None else ref
    text, source = _read_plan_text(ref)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"plan {source}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"plan {source}: expected a mapping of plan fields at the top level")
    data.setdefault("name", Path(str(ref)).stem if not _is_builtin(ref) else str(ref))
    _warn_old_names(data, source)
    try:
        return Plan.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"plan {source}: {_first_error(e)}", hint="see docs/plan.md for the fields") from e


def _warn_old_names(data: dict[str, Any], source: str) -> None:
    """Log each old field name the models still read under its new one (models/serving.py)."""
    for w in data.get("serving") or []:
        th = w.get("thresholds") if isinstance(w, dict) else None
        if isinstance(th, dict) and "min_goodput" in th:
            log.warning(
                "plan %s: serving %s: thresholds.min_goodput is read as thresholds.min_slo_attainment "
                "(the share of requests meeting every SLO); rename it in the plan",
                source, w.get("name", "?"),
            )  # fmt: skip


def apply_overrides(plan: Plan, ov: PlanOverrides) -> Plan:
    """Return a copy of plan with the CLI overrides applied; raises ConfigError naming the flag."""
    try:
        return _apply_overrides(plan, ov)
    except ValidationError as e:  # a rule across fields, e.g. --collectives on a serving-only plan
        raise ConfigError(
            f"plan {plan.name}: {_first_error(e)}", hint="see docs/plan.md for the fields"
        ) from e


def _apply_overrides(plan: Plan, ov: PlanOverrides) -> Plan:
    new = plan.model_copy(deep=True)
    if ov.nodes is not None:
        new.ladder.nodes = _check_spec(ov.nodes, "--nodes")
    if ov.gpus_per_node is not None:
        new.ladder.ranks_per_node = _check_spec(ov.gpus_per_node, "--gpus-per-node")
    if ov.sizes is not None:  # before collectives: a plan with collectives needs sizes
        new.sizes = parse_sizes(ov.sizes)
    if ov.collectives is not None:
        new.collectives = parse_collectives(ov.collectives)
    if ov.partition is not None:
        if not re.match(SLURM_WORD, ov.partition):
            raise ConfigError(
                f"--partition {ov.partition!r}: not a valid Slurm partition name",
                hint="a partition name has letters, digits, _ . - only",
            )
        new.partition = ov.partition
    for flag, field in _PLAIN_OVERRIDES:
        value = getattr(ov, flag)
        if value is not None:
            setattr(new, field, value)
    return new


# Overrides copied as they are (PlanOverrides field -> Plan field); pydantic checked them already.
_PLAIN_OVERRIDES = (
    ("iters", "iters"),
    ("warmup_iters", "warmup_iters"),
    ("check", "check"),
    ("backend", "backend"),
    ("slurm_mode", "slurm_mode"),
    ("timeout_s", "step_timeout_s"),
    ("concurrent_steps", "concurrent_steps"),
    ("stack", "stack"),
    ("telemetry_interval_s", "telemetry_interval_s"),
)


def resolve_plan(ref: str | Path | None = None, overrides: PlanOverrides | None = None) -> Plan:
    """load_plan(ref) with overrides applied; raises ConfigError."""
    plan = load_plan(ref)
    return apply_overrides(plan, overrides) if overrides is not None else plan


def step_id(nnodes: int, ranks_per_node: int) -> str:
    """The id of a ladder point, e.g. `n2xg1`."""
    return f"n{nnodes}xg{ranks_per_node}"


def expand_steps(plan: Plan, cluster: Cluster, *, group: str | None = None) -> list[Step]:
    """The collective steps of a plan (expand_ladder), after checking that its serving steps can
    run (check_serving_steps), so that a plan that cannot run is refused (ConfigError, exit 2)
    before a run exists. The serving steps themselves come from expand_serving_steps."""
    if plan.serving:
        check_serving_steps(plan, cluster, expand_serving_steps(plan, cluster, group=group))
    return expand_ladder(plan, cluster, group=group)


def check_serving_steps(plan: Plan, cluster: Cluster, steps: list[ServingStep]) -> None:
    """Refuse (ConfigError) the serving steps orch cannot run, naming the step and why: an engine
    that needs GPUs (vllm, sglang) on nodes without (gpu_vendor none: a CPU stack), a replica
    over several nodes (pipeline_parallel > 1: orch starts one engine per replica on one node),
    and a variant that the run's stack (the plan's, else the inventory's orch_stack) does not have
    (stacks.check_variants). A baseline threshold is checked against the results store by scale-test
    (the plan alone cannot say whether the baseline exists)."""
    check_variants(plan, cluster)
    by_name = {w.name: w for w in plan.serving}
    for s in steps:
        w = by_name[s.workload]
        if w.engine == "external":  # orch starts nothing (EngineSpec.starts)
            continue
        if w.engine in GPU_ENGINES:  # EngineSpec.needs_gpu reads the same trait
            cpu = [n for n in s.nodes if cluster.node(n).gpu_vendor == "none"]
            if cpu:
                raise ConfigError(
                    f"plan {plan.name}: serving step {s.id}: engine {w.engine} needs GPUs, and "
                    f"{', '.join(cpu)} {'has' if len(cpu) == 1 else 'have'} gpu_vendor none (a CPU stack)",
                    hint="use engine: transformers on CPU nodes, or run on GPU nodes (--group)",
                )
        if w.pipeline_parallel > 1:
            raise ConfigError(
                f"plan {plan.name}: serving step {s.id}: pipeline_parallel {w.pipeline_parallel}: orch "
                "starts one engine per replica on one node; a replica over several nodes is not run yet",
                hint="use pipeline_parallel: 1 (tensor_parallel uses a node's GPUs)",
            )


def expand_ladder(plan: Plan, cluster: Cluster, *, group: str | None = None) -> list[Step]:
    """Expand the plan's ladder on the cluster: one Step per (node count, ranks per node).

    Steps are ordered by node count, then ranks per node; a step runs on the first nnodes nodes
    of `group` (default: every inventory node) in inventory order. In count specs N is the number
    of those nodes and G the smallest gpus_per_node among them. Raises ConfigError naming the
    step when the cluster cannot hold it (too few nodes, more ranks per node than a node's
    gpus_per_node), when it mixes gpu_vendors without plan.mixed_vendors, or when a busbw
    threshold's size is not one the step runs; InventoryError when the group is unknown.
    """
    nodes, where = _nodes_of(plan, cluster, group)
    if not plan.collectives:
        return []
    gpus = min(n.gpus_per_node for n in nodes)
    try:
        counts = resolve_counts(plan.ladder.nodes, len(nodes), gpus)
        per_node = resolve_counts(plan.ladder.ranks_per_node, len(nodes), gpus)
    except ValueError as e:
        ladder = f"{plan.ladder.nodes!r} x {plan.ladder.ranks_per_node!r}"
        raise ConfigError(f"plan {plan.name}: ladder {ladder}: {e}") from e
    sizes = plan.sizes.values()
    steps: list[Step] = []
    for nnodes in counts:
        for rpn in per_node:
            sid = step_id(nnodes, rpn)
            if nnodes > len(nodes):
                raise ConfigError(
                    f"plan {plan.name}: step {sid} needs {nnodes} nodes but {where} has {len(nodes)}",
                    hint="lower --nodes (1..N uses every node) or use a larger inventory",
                )
            chosen = nodes[:nnodes]
            _check_gpus(
                chosen, rpn, f"plan {plan.name}: step {sid} needs {rpn} ranks per node", "--gpus-per-node"
            )
            _check_vendors(plan, sid, chosen)
            _check_threshold_sizes(plan, sid, nnodes * rpn, sizes)
            steps.append(
                Step(
                    id=sid,
                    index=len(steps),
                    nnodes=nnodes,
                    ranks_per_node=rpn,
                    nodes=[n.name for n in chosen],
                    world_size=nnodes * rpn,
                    collectives=list(plan.collectives),
                    sizes=sizes,
                )
            )
    return steps


def _nodes_of(plan: Plan, cluster: Cluster, group: str | None) -> tuple[list[Node], str]:
    nodes: list[Node] = cluster.select(group) if group else list(cluster.nodes)
    where = f"group {group!r}" if group else "the inventory"
    if not nodes:
        raise ConfigError(f"plan {plan.name}: {where} has no nodes")
    return nodes, where


def serving_step_id(workload: str, replicas: int) -> str:
    """The id of a serving step, e.g. `chat-r2`."""
    return f"{workload}-r{replicas}"


def load_levels(w: ServingWorkload) -> list[str]:
    """A workload's load levels in the order they run: `c4` (4 in flight), then `r0.5` (0.5 requests/s),
    then `s8x4` (8 agentic sessions of 4 turns)."""
    sessions = [w.load.sessions.level] if w.load.sessions is not None else []
    return [f"c{c}" for c in w.load.concurrency] + [f"r{r:g}" for r in w.load.rates] + sessions


def expand_serving_steps(plan: Plan, cluster: Cluster, *, group: str | None = None) -> list[ServingStep]:
    """Expand the plan's serving workloads on the cluster: one ServingStep per (workload, replicas).

    A replica spans pipeline_parallel nodes with tensor_parallel GPUs on each; replicas take
    disjoint nodes of `group` (default: every node) in inventory order. In a replicas spec N is the
    number of replicas those nodes hold, G the smallest gpus_per_node. An external engine has one
    step on no node. Raises ConfigError naming the step when the cluster cannot hold it (too few
    nodes, tensor_parallel above a node's gpus_per_node) or when it mixes gpu_vendors without
    plan.mixed_vendors; InventoryError when the group is unknown.
    """
    if not plan.serving:
        return []
    nodes, where = _nodes_of(plan, cluster, group)
    gpus = min(n.gpus_per_node for n in nodes)
    steps: list[ServingStep] = []
    for w in plan.serving:
        levels = load_levels(w)
        if w.engine == "external":
            sid = serving_step_id(w.name, 1)
            one = {"replicas": 1, "nodes_per_replica": 1, "gpus_per_replica_node": 1}
            steps.append(ServingStep(id=sid, index=len(steps), workload=w.name, engine=w.engine, nodes=[],
                                     levels=levels, variant=w.variant, **one))  # fmt: skip
            continue
        pp, tp = w.pipeline_parallel, w.tensor_parallel
        try:
            counts = resolve_counts(w.replicas, max(1, len(nodes) // pp), gpus)
        except ValueError as e:
            raise ConfigError(f"plan {plan.name}: serving {w.name}: replicas {w.replicas!r}: {e}") from e
        for replicas in counts:
            sid = serving_step_id(w.name, replicas)
            need = replicas * pp
            if need > len(nodes):
                raise ConfigError(
                    f"plan {plan.name}: serving step {sid} needs {need} nodes ({replicas} replicas x "
                    f"pipeline_parallel {pp}) but {where} has {len(nodes)}",
                    hint="lower replicas (N = the replicas that fit) or use a larger inventory",
                )
            chosen = nodes[:need]
            what = f"plan {plan.name}: serving step {sid} needs tensor_parallel {tp} GPUs per node"
            _check_gpus(chosen, tp, what, "tensor_parallel")
            _check_vendors(plan, sid, chosen)
            steps.append(ServingStep(id=sid, index=len(steps), workload=w.name, engine=w.engine,
                                     replicas=replicas, nodes_per_replica=pp, gpus_per_replica_node=tp,
                                     nodes=[n.name for n in chosen], levels=levels,
                                     variant=w.variant))  # fmt: skip
    return steps


def _check_gpus(nodes: list[Node], per_node: int, what: str, knob: str) -> None:
    """Refuse (ConfigError) when a node has fewer than per_node GPUs; `what` says which step needs them."""
    short = [n for n in nodes if n.gpus_per_node < per_node]
    if short:
        detail = ", ".join(f"{n.name} has {n.gpus_per_node}" for n in short)
        raise ConfigError(
            f"{what} but gpus_per_node: {detail}", hint=f"lower {knob} or set gpus_per_node in the inventory"
        )


def _check_vendors(plan: Plan, sid: str, nodes: list[Node]) -> None:
    """Refuse a step whose nodes differ in gpu_vendor, unless the plan says mixed_vendors: true."""
    by_vendor: dict[str, list[str]] = {}
    for n in nodes:
        by_vendor.setdefault(n.gpu_vendor, []).append(n.name)
    if len(by_vendor) > 1 and not plan.mixed_vendors:
        detail = "; ".join(f"{v}: {', '.join(names)}" for v, names in by_vendor.items())
        raise ConfigError(
            f"plan {plan.name}: step {sid} mixes gpu_vendor ({detail})",
            hint="run on one kind of node (--group, or fix gpu_vendor in the inventory), "
            "or set mixed_vendors: true in the plan",
        )


def _check_threshold_sizes(plan: Plan, sid: str, nranks: int, sizes: list[int]) -> None:
    """Refuse a busbw threshold at a size the step does not run.

    A threshold's size is matched to the size collbench and nccl-tests really run at this rank
    count (run_size: all_gather, reduce_scatter and alltoall round down to 16-byte blocks per
    rank, so 1K at 3 ranks runs as 1008 B); it must be one of the plan's sizes.
    """
    for th in plan.thresholds.busbw:
        if th.size is None:
            continue
        runs = {run_size(th.collective, s, nranks) for s in sizes}
        if run_size(th.collective, th.size, nranks) not in runs:
            raise ConfigError(
                f"plan {plan.name}: the busbw threshold of {th.collective} at {th.size} B is not a size "
                f"step {sid} runs",
                hint=f"give one of the plan's sizes: {', '.join(str(s) for s in sizes)}",
            )


def plan_to_yaml(plan: Plan) -> str:
    """The resolved plan as YAML (what a run directory keeps); loads back with load_plan."""
    data: dict[str, Any] = plan.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False)


def _is_builtin(ref: str | Path) -> bool:
    return isinstance(ref, str) and ref in builtin_plans()


def _read_plan_text(ref: str | Path) -> tuple[str, str]:
    if _is_builtin(ref):
        name = str(ref)
        return (resources.files("orchestrator") / "plans" / f"{name}.yaml").read_text("utf-8"), name
    path = Path(ref)
    looks_like_name = isinstance(ref, str) and "/" not in ref and not ref.endswith((".yaml", ".yml"))
    if looks_like_name and not path.exists():
        raise ConfigError(
            f"no built-in plan named {ref!r}",
            hint=f"built-in plans: {', '.join(builtin_plans())}; or give a YAML file path",
        )
    try:
        return path.read_text("utf-8"), str(path)
    except OSError as e:
        raise ConfigError(f"plan {path}: cannot read: {e.strerror or e}") from e


def _first_error(e: Exception) -> str:
    if isinstance(e, ValidationError):
        errs = e.errors()
        parts = []
        for err in errs[:3]:
            loc = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            value = err.get("input")
            if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value) not in msg:
                msg += f" (got {value!r})"
            parts.append(f"{loc}: {msg}" if loc else msg)
        return "; ".join(parts)
    return str(e)
