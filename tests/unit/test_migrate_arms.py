"""Migration arms `STACK[:VARIANT]` (migrate/arms.py): parsing, the plan as an arm runs it, the
variant read back from the rendered engine, and `migrate run` between two variants of one stack
(no provisioning; the arms recorded in the state, the rollback and the certificate), over the fake
cluster of test_migrate_run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_migrate_run import LAB_INI, FakeCluster, _factory, _nodes, _run_dir

from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.migrate.arms import Arm, arm_plan, arm_record, parse_arm, read_variant
from orchestrator.models.fingerprint import Fingerprint
from orchestrator.models.migrate import MigrateRun, PlanRun
from orchestrator.models.plan import Plan
from orchestrator.models.requests import MigrateRequest
from orchestrator.models.stack import EngineVariant
from orchestrator.plan import resolve_plan
from orchestrator.runs.migrate import run_migration
from orchestrator.stacks import load_stack

OLD_RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "old_runs"


def serving_plan(tmp_path: Path, **over: Any) -> Path:
    """smoke's collective ladder and serving-smoke's lab-tiny workload, dtype left at auto (the
    variants set it)."""
    smoke = resolve_plan("smoke", None).model_dump(mode="json", exclude_none=True)
    serving = resolve_plan("serving-smoke", None).model_dump(mode="json", exclude_none=True)["serving"]
    serving[0].pop("dtype", None)
    serving[0].update(over)
    doc = {**smoke, "name": "arms", "serving": serving}
    path = tmp_path / "arms.json"
    path.write_text(json.dumps(doc))
    return path


# --- parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "arm"),
    [
        ("rocm-6.4", Arm("rocm-6.4")),
        ("rocm-6.4:aiter", Arm("rocm-6.4", "aiter")),
        ("cpu-serve:fp32-small-kv", Arm("cpu-serve", "fp32-small-kv")),
        ("stacks/my.yaml:plain", Arm("stacks/my.yaml", "plain")),
    ],
)
def test_an_arm_is_a_stack_and_maybe_a_variant(text: str, arm: Arm) -> None:
    assert parse_arm(text) == arm and arm.ref == text


@pytest.mark.parametrize(("text", "said"), [(":aiter", "no stack"), ("rocm-6.4:a b", "not a valid name"),
                                            ("rocm-6.4:", "not a valid name")])  # fmt: skip
def test_a_bad_arm_is_refused_as_usage(text: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said) as e:
        parse_arm(text)
    assert e.value.exit_code == 2


# --- the plan on an arm ----------------------------------------------------------------------------


def test_the_arm_s_stack_and_variant_go_into_the_plan(tmp_path: Path) -> None:
    plan = resolve_plan(str(serving_plan(tmp_path)), None)
    p = arm_plan(plan, Arm("cpu-serve", "bf16"))
    assert p.stack == "cpu-serve" and [w.variant for w in p.serving] == ["bf16"]
    assert arm_plan(plan, Arm("cpu-serve")).serving[0].variant is None


def test_a_plan_variant_against_the_arm_s_is_refused_naming_both(tmp_path: Path) -> None:
    plan = resolve_plan(str(serving_plan(tmp_path, variant="fp32")), None)
    assert arm_plan(plan, Arm("cpu-serve", "fp32")).serving[0].variant == "fp32"  # agree: fine
    with pytest.raises(ConfigError) as e:
        arm_plan(plan, Arm("cpu-serve", "bf16"), side="B")
    text = str(e.value)
    assert "variant 'fp32'" in text and "arm variant 'bf16'" in text and "B cpu-serve:bf16" in text


def test_a_variant_arm_on_a_collective_only_plan_is_refused() -> None:
    with pytest.raises(ConfigError, match="no serving workload"):
        arm_plan(resolve_plan("smoke", None), Arm("cpu-gloo", "fp32"))


# --- the variant read back from the rendered engine ------------------------------------------------


def test_the_variant_is_read_from_argv_and_env_the_most_specific_winning() -> None:
    cpu = load_stack("cpu-serve").serving.engines[0].variants  # type: ignore[union-attr]
    base = ["/v/bin/transformers", "serve", "/m", "--device", "cpu"]
    cb = ["--continuous-batching", "--cb-num-blocks", "256"]
    assert read_variant([*base, "--dtype", "bfloat16", *cb], {}, cpu) == "bf16"
    assert read_variant([*base, "--dtype", "float32", *cb], {}, cpu) == "fp32"
    small = [*base, "--dtype", "float32", *cb, "--cb-block-size", "32", "--cb-num-blocks", "4"]
    assert read_variant(small, {}, cpu) == "fp32-small-kv"  # fp32 shows too, with fewer settings
    assert read_variant([*base, *cb], {}, cpu) is None  # auto: no --dtype, no variant
    rocm = load_stack("rocm-6.4").serving.engines[0].variants  # type: ignore[union-attr]
    assert read_variant(base, {"VLLM_ROCM_USE_AITER": "1"}, rocm) == "aiter"
    assert read_variant(base, {"VLLM_ROCM_USE_AITER": "0"}, rocm) == "plain"
    assert read_variant(base, {}, rocm) is None
    tie = {"x": EngineVariant(dtype="float32"), "y": EngineVariant(dtype="float32")}
    assert read_variant([*base, "--dtype", "float32"], {}, tie) is None


def test_an_arm_record_is_the_engine_as_a_serving_step_renders_it(tmp_path: Path) -> None:
    plan = resolve_plan(str(serving_plan(tmp_path)), None)
    cluster = load_inventory(LAB_INI)
    rec = arm_record(plan, cluster, Arm("cpu-serve", "bf16"), "B")
    (eng,) = rec.engines
    assert rec.ref == "cpu-serve:bf16" and eng.variant == "bf16" and eng.engine == "transformers"
    assert eng.argv[0] == "/opt/orch/venv/bin/transformers" and eng.argv.count("--dtype") == 1
    assert eng.argv[eng.argv.index("--dtype") + 1] == "bfloat16"
    assert eng.env == dict(load_stack("cpu-serve").env)
    plain = arm_record(plan, cluster, Arm("cpu-serve"), "A")
    assert plain.variant is None and plain.engines[0].variant is None
    assert "--dtype" not in plain.engines[0].argv


def test_a_variant_the_stack_lacks_or_a_dtype_clash_is_refused(tmp_path: Path) -> None:
    cluster = load_inventory(LAB_INI)
    plan = resolve_plan(str(serving_plan(tmp_path)), None)
    with pytest.raises(ConfigError, match="no such transformers variant"):
        arm_record(plan, cluster, Arm("cpu-serve", "aiter"), "B")
    f32 = resolve_plan(str(serving_plan(tmp_path, dtype="float32")), None)
    with pytest.raises(ConfigError, match="the variant sets dtype bfloat16, the workload dtype float32"):
        arm_record(f32, cluster, Arm("cpu-serve", "bf16"), "B")


# --- migrate run between two variants of one stack -------------------------------------------------


class ArmsFake(FakeCluster):
    """The fake cluster, its plan runs named by arm (STACK:VARIANT), as ClusterOps reads them."""

    def __init__(self, nodes: list[str]) -> None:
        super().__init__(nodes, start="cpu-serve")
        self.arms: list[str] = []

    def fingerprint(self, stack: str, nodes: list[str]) -> tuple[dict[str, Fingerprint], dict[str, str]]:
        """FakeCluster's, with cpu-serve's lab model on every node (provisioning builds it)."""
        fps, unread = super().fingerprint(stack, nodes)
        lm = load_stack("cpu-serve").lab_model
        assert lm is not None and lm.sha256 is not None
        model = {"lab_model": lm.name, "lab_model_path": lm.path, "lab_model_hash": lm.sha256,
                 "lab_model_found_hash": lm.sha256}  # fmt: skip
        return {n: fp.model_copy(update=model) for n, fp in fps.items()}, unread

    def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
        self.arms.append(stack)
        run = super().run_plan(parse_arm(stack).stack, nodes, label, faults=faults)
        return run.model_copy(update={"stack": stack})


def _arms_req(tmp_path: Path, plan: Path, a: str, b: str, **kw: object) -> MigrateRequest:
    pa, pb = parse_arm(a), parse_arm(b)
    return MigrateRequest(
        inventory=LAB_INI, from_stack=pa.stack, from_variant=pa.variant, to_stack=pb.stack,
        to_variant=pb.variant, plan=str(plan), out_dir=tmp_path / "runs", **kw,
    )  # fmt: skip


def test_two_variants_of_one_stack_provision_nothing_and_record_each_arm(tmp_path: Path) -> None:
    fake = ArmsFake(_nodes())
    req = _arms_req(tmp_path, serving_plan(tmp_path), "cpu-serve:fp32", "cpu-serve:bf16")
    state = run_migration(req, ops_factory=_factory(fake))
    assert state.exit_code == 0, state.failure
    assert fake.provisioned == []  # one stack: nothing installed between the arms, nor to roll back
    assert {"cpu-serve:fp32", "cpu-serve:bf16"} <= set(fake.arms) and "cpu-serve" not in fake.arms
    assert [(r.side, r.variant, r.engines[0].variant) for r in state.arms] == [
        ("A", "fp32", "fp32"),
        ("B", "bf16", "bf16"),
    ]
    assert state.comparison is not None and state.comparison.mode == "interleaved"
    phases = {p.phase: p for p in state.phases}
    assert phases["rollback"].state == "passed" and "nothing to reinstall" in phases["rollback"].gate
    assert state.rolled_back_to is not None and state.rolled_back_to.engines[0].variant == "fp32"
    assert state.certification is not None and state.certification.ok
    assert state.certification.arm is not None and state.certification.arm.variant == "fp32"
    saved = MigrateRun.model_validate_json((_run_dir(tmp_path / "runs") / "migrate.json").read_text())
    assert (saved.from_variant, saved.to_variant) == ("fp32", "bf16")
    argv = saved.arms[1].engines[0].argv
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    report = (_run_dir(tmp_path / "runs") / "report.md").read_text()
    assert "migrate cpu-serve:fp32 → cpu-serve:bf16 on node1" in report
    assert "rolled back to cpu-serve:fp32" in report
    assert "| serving engine | transformers variant | fp32: dtype float32 | bf16: dtype bfloat16 |" in report
    arms = report[report.index("## Arms") :]
    assert "--dtype bfloat16" in arms and "rollback: cpu-serve:fp32 (variant read" in arms
    assert "certify: cpu-serve:fp32 (variant read from the rendered engine: lab-tiny fp32)" in arms
    html = (_run_dir(tmp_path / "runs") / "report.html").read_text()
    assert ">Arms<" in html and "--dtype bfloat16" in html


def test_a_plan_variant_that_disagrees_with_an_arm_refuses_the_run_before_it_exists(tmp_path: Path) -> None:
    fake = ArmsFake(_nodes())
    req = _arms_req(tmp_path, serving_plan(tmp_path, variant="fp32"), "cpu-serve:fp32", "cpu-serve:bf16")
    with pytest.raises(ConfigError, match="names variant 'fp32', the arm variant 'bf16'") as e:
        run_migration(req, ops_factory=_factory(fake))
    assert e.value.exit_code == 2 and not (tmp_path / "runs").exists() and fake.arms == []


def test_stack_to_stack_still_provisions_and_records_stacks_alone(tmp_path: Path) -> None:
    fake = FakeCluster(_nodes())
    req = MigrateRequest(inventory=LAB_INI, from_stack="cpu-gloo", to_stack="cpu-gloo-next", plan="smoke",
                         out_dir=tmp_path)  # fmt: skip
    state = run_migration(req, ops_factory=_factory(fake))
    assert [s for s, _, _ in fake.provisioned] == ["cpu-gloo-next", "cpu-gloo-next", "cpu-gloo"]
    assert [(r.stack, r.variant, r.engines) for r in state.arms] == [
        ("cpu-gloo", None, []),
        ("cpu-gloo-next", None, []),
    ]


def test_the_cli_splits_the_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_cli_usage import run_cli

    import orchestrator.runs.migrate as rm

    seen: list[MigrateRequest] = []

    def fake_run(req: MigrateRequest, listeners: object = None) -> MigrateRun:
        seen.append(req)
        raise ConfigError("stop here")

    monkeypatch.setattr(rm, "run_migration", fake_run)
    code, _, err = run_cli(capsys, "migrate", "run", "-i", str(LAB_INI), "--from", "rocm-6.4:plain",
                           "--to", "rocm-6.4:aiter", "--plan", "smoke")  # fmt: skip
    assert code == 2 and "stop here" in err
    code, _, err = run_cli(capsys, "migrate", "run", "-i", str(LAB_INI), "--from", "rocm-6.4:a;b",
                           "--to", "rocm-6.4", "--plan", "smoke")  # fmt: skip
    assert code == 2 and "not a valid name" in err
    (req,) = seen
    assert (req.from_stack, req.from_variant, req.to_stack, req.to_variant) == (
        "rocm-6.4", "plain", "rocm-6.4", "aiter",
    )  # fmt: skip


# --- old migrate state still loads ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["migrate", "migrate-interrupted", "rollback"])
def test_an_old_migrate_state_and_request_load_without_arms(kind: str) -> None:
    (run,) = [p for p in (OLD_RUNS / kind).iterdir() if (p / "migrate.json").exists()]
    state = MigrateRun.model_validate_json((run / "migrate.json").read_text())
    assert state.arms == [] and state.from_variant is None and state.rolled_back_to is None
    assert state.certification is None or state.certification.arm is None
    req = MigrateRequest.model_validate_json((run / "request.json").read_text())
    assert req.from_variant is None and req.to_variant is None


def test_plan_model_unchanged_by_arms(tmp_path: Path) -> None:
    plan = resolve_plan(str(serving_plan(tmp_path)), None)
    arm_plan(plan, Arm("cpu-serve", "bf16"))
    assert isinstance(plan, Plan) and plan.serving[0].variant is None and plan.stack is None


def test_a_run_between_variants_killed_in_scale_resumes_with_its_arms(tmp_path: Path) -> None:
    from test_migrate_run import Stop

    from orchestrator.errors import Interrupted
    from orchestrator.runs.migrate import resume_migration

    class Killed(ArmsFake):
        def run_plan(self, stack: str, nodes: list[str], label: str, *, faults: bool) -> PlanRun:
            if label == "scale" and not getattr(self, "killed", False):
                self.killed = True
                raise Stop
            return super().run_plan(stack, nodes, label, faults=faults)

    fake = Killed(_nodes())
    req = _arms_req(tmp_path, serving_plan(tmp_path), "cpu-serve:fp32", "cpu-serve:fp32-small-kv")
    with pytest.raises(Interrupted):
        run_migration(req, ops_factory=_factory(fake))
    run_dir = _run_dir(tmp_path / "runs")
    r = resume_migration(run_dir, ops_factory=_factory(fake))
    assert {s.holds for s in r.resumes[0]} == {"A"}  # one stack: every node holds it, whole
    assert [p.phase for p in r.phases] == ["freeze", "canary", "scale", "faults", "compare", "rollback",
                                            "certify"]  # fmt: skip
    assert r.exit_code == 0 and fake.provisioned == []
    assert [a.variant for a in r.arms] == ["fp32", "fp32-small-kv"]
    assert r.certification is not None and r.certification.arm is not None
    assert r.certification.arm.engines[0].variant == "fp32"
    assert "cpu-serve:fp32-small-kv" in {p.stack for p in r.plan_runs if p.label == "scale"}


def test_a_against_a_of_one_stack_provisions_nothing_and_interleaves(tmp_path: Path) -> None:
    fake = FakeCluster(_nodes())
    req = MigrateRequest(inventory=LAB_INI, from_stack="cpu-gloo", to_stack="cpu-gloo", plan="smoke",
                         out_dir=tmp_path)  # fmt: skip
    state = run_migration(req, ops_factory=_factory(fake))
    assert state.exit_code == 0 and fake.provisioned == []
    assert state.comparison is not None and state.comparison.mode == "interleaved"
    assert state.certification is not None and state.certification.ok


# --- orch migrate plan with arms ------------------------------------------------------------------


def test_migrate_plan_sets_the_arms_variants_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    from test_cli_usage import run_cli

    code, out, _ = run_cli(capsys, "migrate", "plan", "--from", "rocm-6.4:plain", "--to", "rocm-6.4:aiter",
                           "--format", "json")  # fmt: skip
    m = json.loads(out)
    assert code == 1 and (m["from_stack"], m["to_stack"]) == ("rocm-6.4:plain", "rocm-6.4:aiter")
    (row,) = [r for r in m["rows"] if r["item"] == "vllm variant"]
    assert (row["from_value"], row["to_value"], row["verdict"]) == (
        "plain: VLLM_ROCM_USE_AITER=0", "aiter: VLLM_ROCM_USE_AITER=1", "needs config change",
    )  # fmt: skip
    assert [r["verdict"] for r in m["rows"] if r is not row] == ["unchanged"] * (len(m["rows"]) - 1)
    code, out, _ = run_cli(capsys, "migrate", "plan", "--from", "cpu-serve:fp32",
                           "--to", "cpu-serve:fp32-small-kv", "--format", "json")  # fmt: skip
    (row,) = [r for r in json.loads(out)["rows"] if r["item"] == "transformers variant"]
    assert row["to_value"] == "fp32-small-kv: --cb-block-size 32 --cb-num-blocks 4 dtype float32"
    code, out, _ = run_cli(capsys, "migrate", "plan", "--from", "cpu-serve:fp32", "--to", "cpu-serve:fp32",
                           "--format", "json")  # fmt: skip
    assert code == 0  # one variant on both sides: every row unchanged


def test_migrate_plan_refuses_a_variant_the_stack_lacks(capsys: pytest.CaptureFixture[str]) -> None:
    from test_cli_usage import one_error_line, run_cli

    code, _, err = run_cli(capsys, "migrate", "plan", "--from", "rocm-6.4:plain", "--to", "rocm-6.4:atom")
    assert code == 2
    assert "rocm-6.4:atom: stack rocm-6.4 has no variant 'atom' (vllm: aiter, plain; sglang: none)" in (
        one_error_line(err)
    )


def test_cluster_ops_runs_the_plan_on_the_arm_s_stack_with_its_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ClusterOps.run_plan given an arm: the step executor gets the plan with the arm's stack and
    variant and the arm's stack's Python and environment; the plan run is named by the arm."""
    import orchestrator.runs.executor as executor
    from orchestrator.runs.lifecycle import Ending, RunLifecycle
    from orchestrator.runs.migrate import ClusterOps

    seen: dict[str, Any] = {}

    class Recording:
        results: list[Any] = []

        def __init__(self, plan: Plan, cluster: Any, steps: Any, sched: Any, backend: Any, life: Any,
                     python: str, env: dict[str, str], faults: Any = None) -> None:  # fmt: skip
            seen.update(plan=plan, python=python, env=env)

        def run(self) -> None:
            pass

    monkeypatch.setattr(executor, "StepExecutor", Recording)
    import orchestrator.runs.scale_test as scale_test

    def serving_runner(plan: Plan, *args: Any) -> Recording:  # serving steps, where run_plan runs them
        seen.update(serving_plan=plan)
        return Recording(plan, *args)

    monkeypatch.setattr(scale_test, "_serving_runner", serving_runner, raising=False)
    plan = resolve_plan(str(serving_plan(tmp_path)), None)
    with RunLifecycle.create(tmp_path, "t-migrate-1") as life:
        run = ClusterOps(life, load_inventory(LAB_INI), plan).run_plan(
            "cpu-serve:bf16", ["node1"], "canary", faults=False
        )
        life.finish(Ending("accepted", 0))
    assert run.stack == "cpu-serve:bf16" and run.label == "canary"
    assert seen["plan"].stack == "cpu-serve" and [w.variant for w in seen["plan"].serving] == ["bf16"]
    assert seen["python"] == "/opt/orch/venv/bin/python" and seen["env"] == dict(load_stack("cpu-serve").env)


def test_rollback_to_a_run_between_variants_goes_back_to_its_a_arm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_cli_usage import run_cli

    import orchestrator.runs.migrate as rm

    run = tmp_path / "20261205T000000Z-migrate-ab12"
    run.mkdir()
    state = MigrateRun(run_id=run.name, run_dir=run, from_stack="rocm-6.4", to_stack="rocm-6.4",
                       from_variant="plain", to_variant="aiter", nodes=["node1"])  # fmt: skip
    (run / "migrate.json").write_text(state.model_dump_json())
    seen: list[MigrateRequest] = []

    def fake_run(req: MigrateRequest, listeners: object = None) -> MigrateRun:
        seen.append(req)
        raise ConfigError("stop here")

    monkeypatch.setattr(rm, "run_migration", fake_run)
    code, _, _ = run_cli(capsys, "rollback", "-i", str(LAB_INI), "--to-run", str(run))
    assert code == 2
    assert (seen[0].from_stack, seen[0].from_variant, seen[0].reference_run) == ("rocm-6.4", "plain", run)
