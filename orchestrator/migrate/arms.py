"""Migration arms: `STACK` or `STACK:VARIANT` on each side of `orch migrate run --from/--to`.

An arm is a stack and, optionally, one of its engine variants (serving.engines[].variants: an
optimized backend switched on, another dtype, a smaller KV cache). `--from rocm-6.4:plain --to
rocm-6.4:aiter` is one stack and a backend switch: nothing is installed between the arms, only the
engine restarts with the other variant (migrate/procedure.py skips the provisionings when both
arms name the same stack).

- parse_arm: the text of --from/--to; a ConfigError (exit 2) for a bad variant name.
- arm_plan: the plan as it runs on an arm: the arm's stack is the plan's (so that variants are
  looked up there) and each serving workload gets the arm's variant. A workload that names another
  variant is refused naming both: the plan and the arm must not disagree on what runs.
- arm_record: each serving engine of the plan rendered for the arm (workloads/engines.py, the one
  place argv is built), with the variant read back from that argv and environment (read_variant).
  A fingerprint reads installations; a variant is a runtime switch it cannot see, so the migrate
  state, the rollback and the certificate record this instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster
from orchestrator.models.migrate import COMPONENTS, ArmEngine, ArmRecord, MatrixRow, MigrationMatrix, arm_ref
from orchestrator.models.names import check_name
from orchestrator.models.plan import Plan
from orchestrator.models.stack import EngineVariant, Stack
from orchestrator.stacks import load_stack, stack_python, stack_variant

ARM_SEP = ":"
RECORD_PORT = 8000
"""The port an arm's engines are rendered with for the record (a run picks its own ports)."""


@dataclass(frozen=True)
class Arm:
    """One side of a migration: a stack (name or manifest file) and an engine variant of it."""

    stack: str
    variant: str | None = None

    @property
    def ref(self) -> str:
        """STACK or STACK:VARIANT (what --from/--to take, and what the procedure's runs are named)."""
        return arm_ref(self.stack, self.variant)


def parse_arm(text: str) -> Arm:
    """`STACK` or `STACK:VARIANT` (split at the last ':'); raises ConfigError for an empty stack or
    a variant name outside the identifier pattern."""
    stack, sep, variant = text.rpartition(ARM_SEP)
    if not sep:
        return Arm(text)
    if not stack:
        raise ConfigError(f"{text!r}: no stack before {ARM_SEP!r}", hint="give STACK or STACK:VARIANT")
    try:
        check_name(variant, what="variant")
    except ValueError as e:
        raise ConfigError(f"{text!r}: {e}", hint="give STACK or STACK:VARIANT, e.g. rocm-6.4:aiter") from e
    return Arm(stack, variant)


def arm_plan(plan: Plan, arm: Arm, *, side: str = "") -> Plan:
    """plan as it runs on arm: the arm's stack is the plan's stack, and every serving workload runs
    the arm's variant. Raises ConfigError naming both when a workload names another variant, or
    when the arm names a variant and the plan has no serving workload to run it."""
    at = f"{side} {arm.ref}".strip()
    if arm.variant is None:
        return plan.model_copy(update={"stack": arm.stack})
    if not plan.serving:
        raise ConfigError(
            f"{at}: plan {plan.name} has no serving workload: variant {arm.variant!r} would change nothing",
            hint="give the stack alone, or a plan with serving steps",
        )
    serving = []
    for w in plan.serving:
        if w.variant is not None and w.variant != arm.variant:
            raise ConfigError(
                f"{at}: plan {plan.name}'s serving {w.name} names variant {w.variant!r}, "
                f"the arm variant {arm.variant!r}",
                hint="drop variant from the plan (the arms choose it), or give the arm as the stack alone",
            )
        serving.append(w.model_copy(update={"variant": arm.variant}))
    return plan.model_copy(update={"stack": arm.stack, "serving": serving})


def check_arm(plan: Plan, arm: Arm, stack: Stack, *, side: str = "") -> Plan:
    """arm_plan, with each workload's variant looked up in stack (stacks.stack_variant: a variant
    the stack does not have, or a dtype that disagrees, is refused naming both). Returns the plan."""
    p = arm_plan(plan, arm, side=side)
    for w in p.serving:
        stack_variant(w, stack, where=f"{side} {arm.ref}: ".lstrip())
    return p


Renderer = Callable[[str], ArmRecord | None]
"""An arm ("A", "B") with its engines rendered now; None for a side the run does not have."""


def renderer(arms: Mapping[str, Arm], plan: Plan | None, cluster: Cluster) -> Renderer:
    """The arms' Renderer for a run of plan on cluster: arm_record of each (a rollback, without a
    plan, records A's stack and variant alone)."""

    def render(side: str) -> ArmRecord | None:
        arm = arms.get(side)
        if arm is None:
            return None
        which: Literal["A", "B"] = "A" if side == "A" else "B"
        if plan is None:
            return ArmRecord(side=which, stack=arm.stack, variant=arm.variant)
        return arm_record(plan, cluster, arm, which)

    return render


def read_variant(
    argv: Sequence[str], env: Mapping[str, str], variants: Mapping[str, EngineVariant]
) -> str | None:
    """The variant whose settings the rendered argv and env show: its every variable in env, its
    engine arguments at the end of argv, its dtype as argv's --dtype. When several show (one's
    settings inside another's), the one with the most settings; None when none shows or two tie.
    A variant that sets nothing cannot be read."""
    dtype = argv[argv.index("--dtype") + 1] if "--dtype" in argv[:-1] else None

    def shown(v: EngineVariant) -> int:
        args = list(v.engine_args)
        ok = all(env.get(k) == val for k, val in v.env.items())
        ok = ok and (not args or list(argv[-len(args) :]) == args)
        ok = ok and (v.dtype is None or v.dtype == dtype)
        return len(v.env) + len(args) + (v.dtype is not None) if ok else 0

    scores = sorted(((shown(v), name) for name, v in variants.items()), reverse=True)
    scores = [s for s in scores if s[0] > 0]
    if not scores or (len(scores) > 1 and scores[0][0] == scores[1][0]):
        return None
    return scores[0][1]


def arm_record(
    plan: Plan, cluster: Cluster, arm: Arm, side: Literal["A", "B"], *, node: str | None = None
) -> ArmRecord:
    """Each serving engine of plan on arm, rendered for node (default the cluster's first) as a
    serving step renders it: the argv (engines.engine_argv) and the environment (the stack's, then
    the variant's: engines.engine_env), with the variant read back from them. Raises ConfigError as
    check_arm."""
    from orchestrator.workloads.engines import engine_argv, engine_env

    stack = load_stack(arm.stack)
    p = check_arm(plan, arm, stack, side=side)
    where = cluster.node(node) if node else cluster.nodes[0]
    python, stack_env = stack_python(arm.stack)  # as ClusterOps.run_plan takes them
    bindir = str(Path(python).parent)  # the serving runner's: the engines' programs beside python
    host = str(where.fabric_address or where.address)
    engines = []
    for w in p.serving:
        if w.engine == "external":
            continue
        variant = stack_variant(w, stack)
        argv = engine_argv(w, bindir=bindir, host=host, port=RECORD_PORT, gpu_vendor=where.gpu_vendor,
                           variant=variant)  # fmt: skip
        env = engine_env(stack_env, variant)
        pin = stack.serving.engine(w.engine) if stack.serving is not None else None
        seen = read_variant(argv, env, pin.variants) if pin is not None else None
        engines.append(
            ArmEngine(workload=w.name, engine=w.engine, node=where.name, argv=argv, env=env, variant=seen)
        )
    named = {w.variant for w in p.serving}  # the arm's, else the plan's when every workload names one
    asked = arm.variant or (named.pop() if len(named) == 1 else None)
    return ArmRecord(side=side, stack=stack.name, variant=asked, engines=engines)


def _settings(v: EngineVariant) -> str:
    parts = [f"{k}={val}" for k, val in sorted(v.env.items())] + list(v.engine_args)
    return " ".join(parts + ([f"dtype {v.dtype}"] if v.dtype else [])) or "no settings"


def _arm_variants(stack: Stack, arm: Arm) -> dict[str, EngineVariant]:
    """engine -> arm's variant, for each engine of stack that has one of arm's name; raises
    ConfigError when the arm names a variant no engine of the stack has."""
    if arm.variant is None:
        return {}
    pins = stack.serving.engines if stack.serving is not None else []
    out: dict[str, EngineVariant] = {
        p.engine: p.variants[arm.variant] for p in pins if arm.variant in p.variants
    }
    if not out:
        offered = "; ".join(f"{p.engine}: {', '.join(p.variants) or 'none'}" for p in pins) or "no engine"
        raise ConfigError(
            f"{arm.ref}: stack {stack.name} has no variant {arm.variant!r} ({offered})",
            hint=f"see orch stack show {stack.name}",
        )
    return out


def variant_rows(a: Stack, arm_a: Arm, b: Stack, arm_b: Arm) -> list[MatrixRow]:
    """The compatibility matrix's rows for the arms' variants: one per engine that has an arm's
    variant, A's against B's, `unchanged` when their settings (env, engine arguments, dtype) are
    the same, else `needs config change` (a variant is configuration). Raises ConfigError when an
    arm names a variant that no engine of its stack has."""
    va, vb = _arm_variants(a, arm_a), _arm_variants(b, arm_b)
    rows = []
    for engine in sorted(set(va) | set(vb)):
        x, y = va.get(engine), vb.get(engine)
        same = x is not None and y is not None and _settings(x) == _settings(y)
        rows.append(MatrixRow(
            component="serving engine", item=f"{engine} variant",
            from_value=f"{arm_a.variant}: {_settings(x)}" if x is not None else None,
            to_value=f"{arm_b.variant}: {_settings(y)}" if y is not None else None,
            verdict="unchanged" if same else "needs config change",
            note="a runtime switch, not seen by a fingerprint; migrate run reads it from the rendered engine",
        ))  # fmt: skip
    return rows


def with_variants(m: MigrationMatrix, a: Stack, arm_a: Arm, b: Stack, arm_b: Arm) -> MigrationMatrix:
    """m (the stacks' matrix) with the arms' variant rows among the serving engine's, titled by arm."""
    rows = sorted([*m.rows, *variant_rows(a, arm_a, b, arm_b)], key=lambda r: COMPONENTS.index(r.component))
    return m.model_copy(update={"rows": rows, "from_stack": arm_a.ref, "to_stack": arm_b.ref})
