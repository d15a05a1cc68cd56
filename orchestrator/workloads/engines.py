"""The command line of each inference engine a serving step starts, and where it says it is ready.

Every value comes from the plan, checked when it was read (models/serving.py: the model path
absolute and plain, engine arguments one plain word each, names to the identifier pattern), and
goes into an argv list: the scheduler's job script quotes each item with its one `sh` filter
(scheduler/templates), the local backend passes the list to exec without a shell.

- transformers: `<prefix>/bin/transformers serve PATH --device cpu|auto --dtype DTYPE --host H
  --port P` (docs/serving.md, "Lab notes"; `--continuous-batching` is the plan's engine_args, so
  that a plan can switch it off). The model is answered to by its path.
- vllm: `<prefix>/bin/vllm serve PATH --host H --port P --dtype DTYPE --tensor-parallel-size TP
  [--served-model-name NAME] [--revision REV]` (vLLM's `vllm serve` CLI).
- sglang: `<prefix>/bin/python -m sglang.launch_server --model-path PATH --host H --port P
  --dtype DTYPE --tp-size TP [--served-model-name NAME] [--revision REV]` (SGLang's server
  arguments).
- external: orch starts nothing.

Each engine is one EngineSpec in workloads.engine_specs (the registry: argv, health path, GPU
need, package, managed arguments); everything here that depends on the engine looks it up there.

The plan's engine_args follow, as given, then the engine arguments of the stack variant the
workload names (`variant:`, the stack's serving.engines[].variants), whose environment is added to
the stack's for the engine (engine_env). A variant's `dtype` takes the place of the plan's in the
engine's own --dtype (the one place it is rendered; engine_args may not set --dtype).
The health endpoint is GET /health for the three (each answers 200 once the model is loaded);
for an external engine GET /v1/models.

A variant is looked up in the stack the run uses: the plan's `stack`, else the inventory's
orch_stack (stacks.stack_name, as the stack stage does). stacks.check_variants refuses, before a
run exists, a variant the stack does not have, and a variant when no stack is named (there is
nothing to take it from).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from orchestrator.models.cluster import Cluster
from orchestrator.models.plan import Plan
from orchestrator.models.serving import ServingWorkload
from orchestrator.models.stack import EngineVariant
from orchestrator.stacks import load_stack, stack_name, stack_variant
from orchestrator.workloads.engine_specs import ENGINES as ENGINES  # re-exported: the registry
from orchestrator.workloads.engine_specs import EngineSpec as EngineSpec
from orchestrator.workloads.engine_specs import engine_spec


def engine_argv(
    w: ServingWorkload,
    *,
    bindir: str,
    host: str,
    port: int,
    gpu_vendor: str,
    variant: EngineVariant | None = None,
) -> list[str]:
    """The argv of w's engine, its programs under bindir (the stack's <prefix>/bin), listening on
    host:port; the plan's engine_args, then the variant's. Raises ValueError for engine external
    (nothing to start), ConfigError for an unknown engine."""
    spec = engine_spec(w.engine)
    if spec.argv is None or w.model.path is None:
        raise ValueError(f"serving {w.name}: engine {w.engine} is not started by orch")
    if variant is not None and variant.dtype is not None:  # rendered here, as the plan's dtype is
        w = w.model_copy(update={"dtype": variant.dtype})
    argv = spec.argv(w, Path(bindir), host, port, gpu_vendor)
    if spec.served_name:
        if w.model.name is not None:
            argv += ["--served-model-name", w.model.name]
        if w.model.revision is not None:
            argv += ["--revision", w.model.revision]
    return argv + list(w.engine_args) + (list(variant.engine_args) if variant is not None else [])


def engine_env(env: Mapping[str, str], variant: EngineVariant | None) -> dict[str, str]:
    """The engine's environment: env (the stack's, and orch's own), then the variant's variables."""
    return {**env, **(variant.env if variant is not None else {})}


def variant_of(plan: Plan, cluster: Cluster, w: ServingWorkload) -> EngineVariant | None:
    """The variant the engine of w runs with in a run of plan on cluster (None without one); raises
    ConfigError as stacks.check_variants, which refused a bad one before the run began."""
    if w.variant is None:
        return None
    name = stack_name(None, plan, cluster)
    if name is None:
        return stack_variant(w, None)
    return stack_variant(w, load_stack(name))


def health_path(w: ServingWorkload) -> str:
    """The path that answers 200 once the engine serves: /health, or /v1/models for external."""
    return engine_spec(w.engine).health_path
