"""The migration procedure as phases with gates, over an `Ops` that does the work on the nodes.

Phases, in order (docs/migration.md): freeze, canary, scale, faults, compare, rollback, certify.
Each phase returns its gate's outcome; a failed gate stops the procedure, and the run goes on with
rollback and certify (unless no_rollback) so that every node ends on A, proved. A failure in
freeze changes nothing on the nodes (A was only read) and rolls nothing back.

Pure of I/O but through `Ops` (provision, fingerprint, run the plan) and the two callbacks
`journal` and `save`: the tests drive it with a fake Ops; runs/migrate.py gives it the real one
inside a RunLifecycle. Resume: the phases already recorded as done are skipped, the first one not
done runs again from its start (provisioning is idempotent and removes a half-made venv first).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from statistics import median
from typing import Any, Protocol

from orchestrator.errors import Interrupted, OrchError
from orchestrator.metrics.decision import FLOOR, judge
from orchestrator.metrics.quality import quality_figures
from orchestrator.migrate.ab import (
    collective_decision,
    interleaved_schedule,
    serving_decision,
    serving_levels,
)
from orchestrator.migrate.certify import certify
from orchestrator.migrate.fault_compare import fault_decisions
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.fingerprint import Fingerprint, FingerprintSet
from orchestrator.models.migrate import (
    PHASES,
    Arm,
    ArmRecord,
    CompareMode,
    Comparison,
    MigrateRun,
    NodeState,
    PhaseName,
    PhaseRecord,
    PhaseState,
    PlanRun,
    SizeSamples,
    arm_ref,
)
from orchestrator.models.stack import Stack


class Ops(Protocol):
    """What the procedure does on the nodes (runs/migrate.py: Ansible, SSH, the pipeline)."""

    def provision(self, stack: str, nodes: list[str], *, clean: bool) -> dict[str, str]:
        """Install stack on nodes; the nodes that failed, with why ({} when all went well)."""
        ...

    def fingerprint(self, stack: str, nodes: list[str]) -> tuple[dict[str, Fingerprint], dict[str, str]]:
        """The nodes' fingerprints, and the nodes that could not be read, with why."""
        ...

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        """Run the migration's plan with stack's environment on nodes (its faults only if asked)."""
        ...

    def plan_has_faults(self) -> bool: ...

    def plan_has_serving_faults(self) -> bool:
        """Whether a plan fault hits a serving step (then A's faults are measured too, in freeze)."""
        ...

    def judge_quality(self, a: PlanRun, b: PlanRun) -> dict[str, QualityJudgement]:
        """B's quality outputs against A's, per serving step both kept them (only called when
        both runs have quality_outputs)."""
        ...


Outcome = tuple[PhaseState, str, str]  # state, gate, reason

MAX_ROUNDS = 8
"""The most interleaved rounds a compare runs to narrow a serving figure's band below the plan's
`detect` (docs/migration.md); a figure still wider after them is blind."""
# certify's re-runs of the plan on A: the second only when the first is worse than A (confirmation,
# as isolate's: a node is convicted when it fails alone twice); A is not back when both are worse
CERTIFY_RUNS = ("certify", "certify-confirm")
_AB_LABEL = re.compile(r"ab[1-9][0-9]*-(A|B|A-control)")


def ab_label(order: int, arm: Arm) -> str:
    """The plan-run label of the interleaved schedule's run `order` (from 1, in time order)."""
    return f"ab{order}-{arm}"


def ab_arm(label: str) -> str | None:
    """The arm of an interleaved run's label (ab_label's), None for every other label."""
    m = _AB_LABEL.fullmatch(label)
    return m.group(1) if m else None


def same_install(a: Stack, b: Stack) -> bool:
    """Whether one installation serves both stacks (they differ in environment variables only):
    then a node can run A and B in turn without provisioning, and the compare interleaves."""
    return (
        a.kind == b.kind
        and a.python is not None
        and a.python == b.python
        and a.rocm == b.rocm
        and a.cuda == b.cuda
        and a.image == b.image
    )


def series_samples(
    a: Sequence[PlanRun], b: Sequence[PlanRun], control: Sequence[PlanRun]
) -> dict[str, list[SizeSamples]]:
    """busbw of every series (collective@step) and size that A and B both measured, per arm."""
    out: dict[str, list[SizeSamples]] = {}
    keys = [k for k in a[0].busbw if all(k in r.busbw for r in [*a, *b])] if a and b else []
    for key in keys:
        sizes = sorted(set.intersection(*(set(r.busbw[key]) for r in [*a, *b])))
        rows = []
        for size in sizes:
            vals = {
                arm: [
                    r.busbw[key][size]
                    for r in runs
                    if size in r.busbw.get(key, {}) and r.busbw[key][size] > 0
                ]
                for arm, runs in (("a", a), ("b", b), ("c", control))
            }
            if vals["a"] and vals["b"]:
                rows.append(SizeSamples(size_bytes=size, a=vals["a"], b=vals["b"], control=vals["c"]))
        if rows:
            out[key] = rows
    return out


def compare_runs(
    a: Sequence[PlanRun],
    b: Sequence[PlanRun],
    control: Sequence[PlanRun],
    *,
    mode: CompareMode,
    why_mode: str,
    order: list[str],
    interactive: bool = True,
    detect: Mapping[str, float] | None = None,
    serving_a: Sequence[PlanRun] | None = None,
) -> Comparison:
    """Each series' decision (a change counts beyond the band at 2+ adjacent sizes) and, when the
    runs carry serving figures, the serving decision (worse p99 is worse for interactive).
    serving_a: the runs of A the serving levels are judged against, their spread the band, no
    control (certify: every run of A before the rollback); default a, with control."""
    decisions = [collective_decision(key, sizes) for key, sizes in series_samples(a, b, control).items()]
    serving = None
    ta = [r.throughput for r in a if r.throughput]
    tb = [r.throughput for r in b if r.throughput]
    pa = [r.p99_s for r in a if r.p99_s]
    pb = [r.p99_s for r in b if r.p99_s]
    if ta and tb and pa and pb:
        band = math.log(1 + FLOOR)
        serving = serving_decision(
            judge(median(ta), median(tb), band, figure="output tokens/s", n_a=len(ta), n_b=len(tb)),
            judge(
                median(pa),
                median(pb),
                band,
                higher_is_better=False,
                figure="p99 latency",
                n_a=len(pa),
                n_b=len(pb),
            ),
            interactive=interactive,
        )
    sa, sc = (a, control) if serving_a is None else (serving_a, [])
    levels = serving_levels(sa, b, sc, detect=detect or {}, interactive=interactive)
    return Comparison(mode=mode, why_mode=why_mode, order=order, collectives=decisions, serving=serving,
                      serving_levels=levels)  # fmt: skip


def node_states(
    a: Stack, b_name: str | None, fps: Mapping[str, Fingerprint], reference: FingerprintSet | None
) -> list[NodeState]:
    """What each node holds after an interruption: A (the reference's package set and env), B (B's
    stack record: written last by provisioning, so B is whole), or mixed (anything else)."""
    out = []
    for node, fp in fps.items():
        ref = reference.nodes.get(node) if reference else None
        if (
            fp.stack_record == a.name
            and ref is not None
            and (fp.packages_hash, fp.env_hash) == (ref.packages_hash, ref.env_hash)
        ):
            out.append(NodeState(node=node, holds="A"))
        elif b_name is not None and fp.stack_record == b_name:
            out.append(NodeState(node=node, holds="B"))
        else:
            detail = f"stack record {fp.stack_record or 'none'}, packages {fp.packages_hash or 'unread'}"
            out.append(NodeState(node=node, holds="mixed", detail=detail))
    return out


class Procedure:
    """One migrate (or rollback) run's phases; `state` is migrate.json, saved after each phase."""

    def __init__(
        self,
        state: MigrateRun,
        a: Stack,
        b: Stack | None,
        ops: Ops,
        *,
        rounds: int = 2,
        no_rollback: bool = False,
        reference: FingerprintSet | None = None,
        journal: Callable[..., None] = lambda kind, **f: None,
        save: Callable[[MigrateRun], None] = lambda s: None,
        save_reference: Callable[[FingerprintSet], None] = lambda r: None,
        render: Callable[[str], ArmRecord | None] = lambda side: None,
        clock: Callable[[], float] = time.monotonic,
        started: Sequence[PhaseName] = (),
        reference_from: str | None = None,
        detect: Mapping[str, float] | None = None,
    ) -> None:
        self.state, self.a, self.b, self.ops = state, a, b, ops
        self.render = render  # an arm ("A", "B") as its engines are rendered now (migrate/arms.py)
        # The arms as the plan runs them: STACK[:VARIANT] (ClusterOps.run_plan reads them back).
        self.ref_a = arm_ref(a.name, state.from_variant)
        self.ref_b = "" if b is None else arm_ref(b.name, state.to_variant)
        self.rounds, self.no_rollback, self.reference = rounds, no_rollback, reference
        self.journal, self.save, self.save_reference, self.clock = journal, save, save_reference, clock
        self._started: list[PhaseName] = list(started)  # phases begun before (a resumed run)
        self.reference_from = reference_from or state.run_id  # the run whose freeze is the reference
        self.detect = dict(detect or {})  # the plan's thresholds.detect: smallest change per figure

    # --- driving -------------------------------------------------------------------------------

    def done(self) -> set[PhaseName]:
        return {p.phase for p in self.state.phases}

    def run(self, phases: Sequence[PhaseName] = PHASES) -> MigrateRun:
        """Run the phases not done yet, in order; after a failed gate only rollback and certify
        run (none with no_rollback, none after a failed freeze). Returns the state."""
        for name in phases:
            if name in self.done():
                continue
            if self.state.failed_phase is not None and not self._rolls_back(name):
                self._record(name, "skipped", "-", f"the {self.state.failed_phase} gate failed", 0.0)
                continue
            self._run_phase(name)
        self._settle()
        return self.state

    def fail_before(self, phase: PhaseName, why: str) -> None:
        """Stop the procedure before `phase` (resume found what it cannot continue from)."""
        self.state.failed_phase, self.state.failure = phase, why
        self.journal("migrate_gate_failed", phase=phase, reason=why)

    def _rolls_back(self, name: PhaseName) -> bool:
        return (
            name in ("rollback", "certify") and not self.no_rollback and self.state.failed_phase != "freeze"
        )

    def _run_phase(self, name: PhaseName) -> None:
        attempts = 1 + sum(1 for e in self._started if e == name)
        self._started.append(name)
        self.journal("migrate_phase", phase=name, state="started", attempt=attempts)
        t0 = self.clock()
        try:
            state, gate, reason = getattr(self, f"_{name}")()
        except Interrupted:
            raise
        except OrchError as e:  # a provisioning or a node that failed is the gate's failure, not a crash
            state, gate, reason = "failed", "the phase ran to its end", f"{type(e).__name__}: {e}"
        self._record(name, state, gate, reason, self.clock() - t0, attempts)
        if state == "failed" and self.state.failed_phase is None:
            self.fail_before(name, reason)

    def _record(
        self, name: PhaseName, state: PhaseState, gate: str, reason: str, wall_s: float, attempts: int = 1
    ) -> None:
        rec = PhaseRecord(phase=name, state=state, gate=gate, reason=reason, wall_s=max(0.0, wall_s),
                          attempts=attempts)  # fmt: skip
        self.state.phases.append(rec)
        self.journal("migrate_phase", **rec.model_dump())
        self.save(self.state)

    def _settle(self) -> None:
        ok = self.state.failed_phase is None and all(p.state != "failed" for p in self.state.phases)
        self.state.status = "accepted" if ok else "failed"
        self.state.exit_code = 0 if ok else 1
        self.save(self.state)

    # --- helpers -------------------------------------------------------------------------------

    def _plan(self, stack: str, nodes: list[str], label: str, *, faults: bool = False) -> PlanRun:
        run = self.ops.run_plan(stack, nodes, label, faults=faults)
        self.state.plan_runs = [r for r in self.state.plan_runs if r.label != label] + [run]
        self.save(self.state)
        return run

    def _a_runs(self) -> list[PlanRun]:
        """Every plan run on A before the rollback, faults left out: baseline, control and the
        interleaved rounds' A and A' (ab<k>-A, ab<k>-A-control)."""
        return [
            r
            for r in self.state.plan_runs
            if r.label in ("baseline", "control") or ab_arm(r.label) in ("A", "A-control")
        ]

    def _runs(self, *labels: str) -> list[PlanRun]:
        by = {r.label: r for r in self.state.plan_runs}
        return [by[x] for x in labels if x in by]

    def _same_stack(self) -> bool:
        """Both arms name one stack (variants of it): nothing to install between them."""
        return self.b is not None and self.a.name == self.b.name

    def _provision(self, stack: Stack, nodes: list[str]) -> str | None:
        if not nodes or self._same_stack():  # arms of one stack: only the engine restarts
            return None
        failed = self.ops.provision(stack.name, nodes, clean=True)
        if failed:
            return "provisioning failed on " + "; ".join(f"{n}: {w}" for n, w in sorted(failed.items()))
        return None

    def _held_to(
        self, stack: Stack, nodes: list[str], reference: FingerprintSet | None = None, *, proof: bool = False
    ) -> str | None:
        """None when every node is on stack (against reference, else its manifest), else why not.
        proof: keep the certification in the state (the certify phase)."""
        fps, unread = self.ops.fingerprint(stack.name, nodes)
        cert = certify(
            stack, nodes, fps, reference, reference_from=self.reference_from if reference else None
        )
        if proof:
            self.state.certification = cert.model_copy(update={"arm": self.render("A")})
        bad = [f"{n}: {why}" for n, why in sorted(unread.items())]
        bad += [
            f"{p.node}: {'; '.join(p.differences)}" for p in cert.nodes if not p.ok and p.node not in unread
        ]
        if bad:
            return f"not on {stack.name}: " + " | ".join(bad)
        if reference is None and stack is self.a and self.reference is None:
            self.reference = FingerprintSet(stack=stack.name, nodes=fps)
            self.save_reference(self.reference)
        return None

    def _quality(self, a: PlanRun | None, b: PlanRun) -> dict[str, QualityJudgement]:
        """B's outputs judged against A's where both kept them (the plan's `quality:`), kept in
        B's plan run; {} when the plan has no gate."""
        if a is None or not (set(a.quality_outputs) & set(b.quality_outputs)):
            return {}
        b.quality = self.ops.judge_quality(a, b)
        self.save(self.state)
        return b.quality

    @staticmethod
    def _quality_gate(judged: Mapping[str, QualityJudgement]) -> str | None:
        bad = [f"output quality of {step} failed: {'; '.join(j.reasons)} ({quality_figures(j)})"
               for step, j in judged.items() if not j.passed]  # fmt: skip
        return "; ".join(bad) or None

    @staticmethod
    def _plan_gate(*runs: PlanRun) -> str | None:
        bad = [f"{r.label} on {r.stack}: {r.verdict} ({'; '.join(r.reasons) or 'no reason given'})"
               for r in runs if r.verdict != "pass"]  # fmt: skip
        return "; ".join(bad) or None

    # --- the phases ----------------------------------------------------------------------------

    def _freeze(self) -> Outcome:
        gate = f"every node on {self.a.name} (manifest, package and env hashes read); the plan passes on A"
        why = self._held_to(self.a, self.state.nodes)
        if why:
            return "failed", gate, why
        runs = [self._plan(self.ref_a, self.state.nodes, "baseline")]
        if not self._interleaves() or runs[0].serving:
            # A twice: the A-against-A band. Interleaving gives the compare its own A' runs, but a
            # canary that fails first leaves certify none: its serving band would be the bare floor,
            # far inside a p99's run-to-run spread (seen on the lab: TTFT p99 +40 % against +-5 %).
            runs.append(self._plan(self.ref_a, self.state.nodes, "control"))
        if self.b is not None and self.ops.plan_has_serving_faults():  # A's outages, for the faults phase
            runs.append(self._plan(self.ref_a, self.state.nodes, "faults-A", faults=True))
        if why := self._plan_gate(*runs):
            return "failed", gate, why
        return (
            "passed",
            gate,
            f"reference frozen for {len(self.state.nodes)} nodes; "
            + ", ".join(f"{r.label} passed" for r in runs),
        )

    def _canary(self) -> Outcome:
        assert self.b is not None
        gate = f"{self.b.name} provisioned and fingerprinted on the canary; the plan passes there"
        nodes = self.state.canary
        why = self._provision(self.b, nodes) or self._held_to(self.b, nodes)
        if why:
            return "failed", gate, why
        run = self._plan(self.ref_b, nodes, "canary")
        if why := self._plan_gate(run):
            return "failed", gate, why
        base = self._runs("baseline")
        judged = self._quality(base[0] if base else None, run)
        if why := self._quality_gate(judged):
            return "failed", gate + "; B's answers pass the output-quality gate against A's", why
        ok = f"; output quality passed ({', '.join(judged)})" if judged else ""
        return "passed", gate, f"{', '.join(nodes)} on {self.b.name}; the plan passed{ok}"

    def _scale(self) -> Outcome:
        assert self.b is not None
        gate = f"{self.b.name} on every node; the plan passes on all of them"
        rest = [n for n in self.state.nodes if n not in self.state.canary]
        why = self._provision(self.b, rest) or self._held_to(self.b, self.state.nodes)
        if why:
            return "failed", gate, why
        if why := self._plan_gate(self._plan(self.ref_b, self.state.nodes, "scale")):
            return "failed", gate, why
        return "passed", gate, f"{len(self.state.nodes)} nodes on {self.b.name}; the plan passed"

    def _faults(self) -> Outcome:
        assert self.b is not None
        gate = "the plan's fault steps pass on B"
        if not self.ops.plan_has_faults():
            return "skipped", gate, "the plan has no fault steps"
        run = self._plan(self.ref_b, self.state.nodes, "faults", faults=True)
        if why := self._plan_gate(run):
            return "failed", gate, why
        if not (a := self._runs("faults-A")) or not run.serving_faults:
            return "passed", gate, "every fault step passed"
        gate += "; each serving fault's outage and time to steady on B no worse than on A (faults-A)"
        self.state.fault_compare = fault_decisions(a[0], run)
        self.save(self.state)
        if worse := [d.reason for d in self.state.fault_compare if d.verdict == "worse"]:
            return "failed", gate, f"{self.b.name} recovers worse: " + "; ".join(worse)
        same = "; ".join(d.reason for d in self.state.fault_compare)
        return "passed", gate, f"every fault step passed; {same}"

    def _interleaves(self) -> bool:
        return self.b is not None and same_install(self.a, self.b)

    def _compare(self) -> Outcome:
        assert self.b is not None
        gate = (
            "no series worse than A beyond the A-against-A band at 2+ adjacent sizes; no serving level "
            "worse (interactive rule), no serving figure blind; the output-quality gate passes"
        )
        if self._interleaves():
            mode: CompareMode = "interleaved"
            why_mode = (
                f"{self.a.name} and {self.b.name} differ in environment variables only: each node runs "
                "both in turn (A B A' | A' B A …)"
            )
            rounds = self.rounds
            a, b, c, order = self._interleaved(rounds)
            # A figure whose band is wider than the plan's detect: two more rounds at a time (the
            # serpentine stays balanced), up to MAX_ROUNDS; still wider there, it stays blind.
            while rounds < MAX_ROUNDS and (
                blind := [x for lv in serving_levels(a, b, c, detect=self.detect) for x in lv.blind]
            ):
                rounds = min(MAX_ROUNDS, rounds + 2)
                self.journal("migrate_more_rounds", rounds=rounds, blind=blind)
                a, b, c, order = self._interleaved(rounds)
        else:
            mode, why_mode = (
                "sequential",
                (
                    f"{self.a.name} and {self.b.name} install different things: a node holds one at a "
                    "time, so A (baseline, control) ran before B (scale); a drift over time is not cancelled"
                ),
            )
            a, c, b = self._runs("baseline"), self._runs("control"), self._runs("scale")
            order = [r.label for r in (*a, *c, *b)]
        cmp = compare_runs(a, b, c, mode=mode, why_mode=why_mode, order=order, detect=self.detect)
        if mode == "interleaved":
            cmp.rounds = rounds
        if a and b:
            cmp.quality = self._quality(a[0], b[0])
        self.state.comparison = cmp
        if why := self._quality_gate(cmp.quality):
            return "failed", gate, f"{self.b.name} fails the output-quality gate: {why}"
        if not cmp.collectives and cmp.serving is None and not cmp.serving_levels:
            return "failed", gate, "nothing to compare: A and B measured no common series"
        if cmp.worse:
            why_blind = ""
            if any(lv.blind for lv in cmp.serving_levels):
                why_blind = (
                    f" (blind after {cmp.rounds} interleaved rounds, the bound is {MAX_ROUNDS})"
                    if cmp.rounds is not None
                    else " (blind: a sequential compare cannot add rounds, A and B install different things)"
                )
            return "failed", gate, f"{self.b.name} is worse: " + "; ".join(cmp.worse) + why_blind
        better = [d.collective for d in cmp.collectives if d.direction == "better"]
        levels = f"; {len(cmp.serving_levels)} serving levels within the band" if cmp.serving_levels else ""
        return (
            "passed",
            gate,
            f"{len(cmp.collectives)} series within the band{levels}"
            + (f"; better: {', '.join(better)}" if better else ""),
        )

    def _interleaved(self, rounds: int) -> tuple[list[PlanRun], list[PlanRun], list[PlanRun], list[str]]:
        """The interleaved schedule's runs of A, B and A' over `rounds` rounds (those already run,
        by label, kept), and their labels in time order."""
        assert self.b is not None
        nodes = self.state.nodes
        both = {n: {self.ref_a, self.ref_b} for n in nodes}
        slots = interleaved_schedule(self.ref_a, self.ref_b, both, rounds=rounds, nodes_per_run=len(nodes))
        arms: dict[str, list[PlanRun]] = {"A": [], "B": [], "A-control": []}
        order = []
        for s in slots:
            label = ab_label(s.order + 1, s.arm)
            run = self._runs(label)[0] if self._runs(label) else self._plan(s.stack, s.nodes, label)
            arms[s.arm].append(run)
            order.append(label)
        return arms["A"], arms["B"], arms["A-control"], order

    def _rollback(self) -> Outcome:
        gate = f"{self.a.name} provisioned again on every node (B removed with its venv)"
        if self._same_stack():
            gate = f"the engine back on {self.ref_a} (one stack: nothing to reinstall)"
        if why := self._provision(self.a, self.state.nodes):
            return "failed", gate, why
        self.state.rolled_back = True
        self.state.rolled_back_to = self.render("A")
        if self._same_stack():
            return "passed", gate, f"{len(self.state.nodes)} nodes run {self.ref_a}'s engine again"
        return "passed", gate, f"{len(self.state.nodes)} nodes provisioned with {self.a.name}"

    def _certify(self) -> Outcome:
        against = "the frozen reference" if self.reference is not None else f"the {self.a.name} manifest"
        gate = f"every node's fingerprint (package and env hashes included) equals {against}"
        if why := self._held_to(self.a, self.state.nodes, self.reference, proof=True):
            return "failed", gate, why
        base = self._runs("baseline")
        if not base or self.state.plan is None:
            return "passed", gate, f"{len(self.state.nodes)} nodes equal {against}"
        gate += "; a re-run of the plan on A within the band of the baseline (a second when the first is not)"
        control = self._runs("control") or [r for r in self.state.plan_runs if ab_arm(r.label) == "A-control"]
        worse: list[str] = []
        for label in CERTIFY_RUNS:
            rerun = self._plan(self.ref_a, self.state.nodes, label)
            if why := self._plan_gate(rerun):
                return "failed", gate, why
            figures = self._rerun_worse(base, control, rerun)
            if figures:
                worse.append(f"{self._rerun_name(label)} is worse than the baseline: " + "; ".join(figures))
            # the answers do not depend on the machine's load: a failed quality gate is not confirmed
            if why := self._quality_gate(self._quality(base[0], rerun)):
                return "failed", gate, " | ".join([*worse, f"{self._rerun_name(label)} answers otherwise "
                                                    f"than the baseline: {why}"])  # fmt: skip
            if not figures:
                break
        else:  # every re-run worse: A is not back
            return "failed", gate, " | ".join(worse)
        held = f"{len(self.state.nodes)} nodes equal {against}; the re-run is within the band"
        if worse:  # the first was worse, its confirmation within the band: the first was the machine
            return "passed", gate, f"{held} at the second try ({worse[0]}; not confirmed)"
        return "passed", gate, held

    @staticmethod
    def _rerun_name(label: str) -> str:
        return "the re-run on A" if label == CERTIFY_RUNS[0] else "the second re-run on A"

    def _rerun_worse(self, base: list[PlanRun], control: list[PlanRun], rerun: PlanRun) -> list[str]:
        """What of rerun is worse than A: its series against the baseline, the band from baseline
        against control; its serving levels against every run of A before the rollback (baseline,
        control, the interleaved A and A'), their spread and each run's own se setting the band.
        One pair is too thin a sample of A: on the lab a baseline 15 % above A's five other runs
        failed three certifies in four, each re-run within A's other runs."""
        again = compare_runs(
            base,
            [rerun],
            control,
            mode="sequential",
            why_mode="the re-run on A",
            order=["baseline", rerun.label],
            serving_a=self._a_runs(),
        )
        return again.worse


def new_state(**fields: Any) -> MigrateRun:
    """A fresh migrate.json."""
    return MigrateRun(**fields)
