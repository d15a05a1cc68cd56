"""Find, load and validate stack manifests (orchestrator/playbooks/stacks/*.yaml)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.base import first_error
from orchestrator.models.names import is_name
from orchestrator.models.stack import Stack

if TYPE_CHECKING:  # annotations only: `orch check --quick` loads no plan, cluster or serving model
    from orchestrator.models.cluster import Cluster
    from orchestrator.models.plan import Plan
    from orchestrator.models.serving import ServingWorkload
    from orchestrator.models.stack import EngineVariant

# The playbooks, roles and stacks ship inside the package (package data): a wheel install has them.
PLAYBOOKS_DIR = Path(__file__).resolve().parent / "playbooks"
STACKS_DIR = PLAYBOOKS_DIR / "stacks"
NO_STACK = "none"
"""The stack name that means no stack (--stack none, stack: none, orch_stack=none)."""


def list_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    """Names of the stack manifests in `stacks_dir`, sorted."""
    if not stacks_dir.is_dir():
        return []
    return sorted(p.stem for p in stacks_dir.glob("*.yaml"))


def stack_path(ref: str | Path, stacks_dir: Path = STACKS_DIR) -> Path:
    """The manifest file of a stack name or a path; raises ConfigError when there is none."""
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = stacks_dir / f"{ref}.yaml"
    if candidate.exists():
        return candidate
    raise ConfigError(
        f"no stack named {str(ref)!r}",
        hint=f"stacks are: {', '.join(list_stacks(stacks_dir)) or '(none)'} (see `orch stack list`)",
    )


def _packaged_manifest(name: str, stacks_dir: Path) -> Path | None:
    """The manifest file of the packaged stack `name`; None when name is no plain name or ships no
    such stack."""
    path = stacks_dir / f"{name}.yaml"
    return path if is_name(name) and path.is_file() else None


def packaged_stack(name: str, stacks_dir: Path = STACKS_DIR) -> Stack:
    """The stack `name` from the package's own stacks (stacks_dir), never a path: what a
    certificate or another file from others names is loaded only this way.

    Raises ConfigError when name is not a plain name or no such stack ships.
    """
    if not is_name(name):
        raise ConfigError(
            f"stack {name[:80]!r} is not a stack name (a path is never loaded from a certificate)"
        )
    path = _packaged_manifest(name, stacks_dir)
    if path is None:
        raise ConfigError(
            f"no stack named {name!r}", hint=f"stacks are: {', '.join(list_stacks(stacks_dir))}"
        )
    return load_stack(path, stacks_dir)


def manifest_sha256(name: str, stacks_dir: Path = STACKS_DIR) -> str | None:
    """sha256 of the packaged stack `name`'s manifest file; None when name is no packaged stack."""
    path = _packaged_manifest(name, stacks_dir)
    return None if path is None else hashlib.sha256(path.read_bytes()).hexdigest()


def load_stack(ref: str | Path, stacks_dir: Path = STACKS_DIR) -> Stack:
    """Load and validate one stack; raises ConfigError naming the file and the first bad field."""
    path = stack_path(ref, stacks_dir)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read the stack: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a stack file must be a mapping")
    try:
        stack = Stack.model_validate(doc)
    except ValidationError as e:
        where, why = first_error(e)
        raise ConfigError(f"{path}: {where or '(top)'}: {why}", hint="see docs/stacks.md") from e
    if stack.name != path.stem:
        raise ConfigError(f"{path}: name {stack.name!r} differs from the file name {path.stem!r}")
    return stack


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a stack or plan file; raises ConfigError for another kind."""
    from orchestrator.models.plan import Plan  # not at the top: `orch check --quick` loads no plan model

    models: dict[str, type[Stack] | type[Plan]] = {"stack": Stack, "plan": Plan}
    if kind not in models:
        raise ConfigError(f"no schema for {kind!r}", hint="one of: stack, plan")
    schema = models[kind].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if kind == "plan":
        # load_plan names a plan after its file when it has no `name`: the file may leave it out.
        schema["required"] = [f for f in schema.get("required", []) if f != "name"]
        # load_plan reads thresholds.min_goodput, the old name, as min_slo_attainment (with a warning)
        th = schema["$defs"]["ServingThresholds"]
        old = {**th["properties"]["min_slo_attainment"], "deprecated": True, "title": "Min Goodput"}
        th["properties"]["min_goodput"] = {**old, "description": "the old name of min_slo_attainment"}
        th["not"] = {"required": ["min_goodput", "min_slo_attainment"]}
    return schema


def schema_text(kind: str) -> str:
    """json_schema(kind) as indented JSON text."""
    return json.dumps(json_schema(kind), indent=2) + "\n"


def stack_name(flag: str | None, plan: Plan, cluster: Cluster) -> str | None:
    """--stack, else the plan's stack, else the inventory's orch_stack; 'none' means no stack."""
    name = flag or plan.stack or cluster.vars.orch_stack
    return None if name in (None, NO_STACK) else name


def stack_python(name: str | None) -> tuple[str, dict[str, str]]:
    """The workload's Python on the nodes and its environment, from stack `name` (this Python when
    there is no stack, or the stack has no Python environment); raises ConfigError."""
    if name is None:
        return sys.executable, {}
    stack = load_stack(name)
    python = f"{stack.python.prefix}/bin/python" if stack.python else sys.executable
    return python, dict(stack.env)


def node_python(cluster: Cluster) -> str:
    """The Python that orch's own programs run with on the nodes (the recovery probe, the nightly
    job's orch beside it): the inventory stack's (orch_stack) under its prefix, as collbench's;
    this one when every node is this machine (the local inventory). Raises ConfigError when
    remote nodes have no stack to name one."""
    if all(n.is_local for n in cluster.nodes):
        return sys.executable
    name = cluster.vars.orch_stack
    stack = load_stack(name) if name not in (None, NO_STACK) else None
    if stack is None or stack.python is None:
        raise ConfigError(
            f"{cluster.source}: orch's programs need a Python on the nodes, and "
            + (f"stack {name} has no Python environment" if stack else "the inventory names no stack"),
            hint="set orch_stack to a stack with a python prefix (e.g. cpu-gloo) and `orch provision` it",
        )
    return f"{stack.python.prefix}/bin/python"


def stack_variant(w: ServingWorkload, stack: Stack | None, *, where: str = "") -> EngineVariant | None:
    """The variant w names, from stack; None when w names none. Raises ConfigError naming the
    variant and what the stack offers when there is no stack, the stack pins no such engine, or
    the engine has no such variant; or naming both dtypes when the variant sets one and w another."""
    if w.variant is None:
        return None
    at = f"{where}serving {w.name}: variant {w.variant!r}"
    if stack is None:
        raise ConfigError(
            f"{at}: no stack is named to take it from (the plan has no stack, the inventory no orch_stack)",
            hint="name a stack in the plan (stack: NAME) or the inventory (orch_stack), or drop variant",
        )
    pin = stack.serving.engine(w.engine) if stack.serving is not None else None
    if pin is None:
        engines = ", ".join(e.engine for e in stack.serving.engines) if stack.serving is not None else "none"
        raise ConfigError(
            f"{at}: stack {stack.name} pins no {w.engine} engine (its engines: {engines})",
            hint="see the stack's serving section: orch stack show " + stack.name,
        )
    if w.variant not in pin.variants:
        names = ", ".join(pin.variants) or "none"
        raise ConfigError(
            f"{at}: stack {stack.name} has no such {w.engine} variant (its {w.engine} variants: {names})",
            hint="choose one of the stack's variants, or leave variant out",
        )
    variant = pin.variants[w.variant]
    if variant.dtype is not None and w.dtype not in ("auto", variant.dtype):
        raise ConfigError(
            f"{at}: the variant sets dtype {variant.dtype}, the workload dtype {w.dtype}",
            hint="leave the workload's dtype at auto (the variant's applies), or choose another variant",
        )
    return variant


def check_variants(plan: Plan, cluster: Cluster) -> None:
    """Refuse (ConfigError, exit 2) a serving workload's variant that the run's stack does not have
    (or any variant when no stack is named), before a run exists. Loads the stack only when a
    workload names a variant."""
    if not any(w.variant is not None for w in plan.serving):
        return
    name = stack_name(None, plan, cluster)
    stack = load_stack(name) if name is not None else None
    for w in plan.serving:
        stack_variant(w, stack, where=f"plan {plan.name}: ")
