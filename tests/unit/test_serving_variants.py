"""Engine variants: a stack names them (serving.engines[].variants), a serving workload chooses one
(`variant:`), the engine gets its environment and arguments after the plan's, the step records it,
and a variant the run's stack does not have is refused before a run exists (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.models.serving import ServingWorkload
from orchestrator.models.stack import Stack
from orchestrator.plan import expand_serving_steps, expand_steps, load_plan
from orchestrator.remote.nodefiles import run_data_layout
from orchestrator.runs.serving import engine_job
from orchestrator.stacks import load_stack, stack_variant
from orchestrator.workloads.engines import engine_argv, engine_env

ROCM = load_stack("rocm-6.4")


def gpu_cluster(n: int = 2, *, stack: str | None = None) -> Cluster:
    nodes = [
        Node(name=f"node{i}", address="127.0.0.1", gpus_per_node=8, gpu_vendor="amd") for i in range(1, n + 1)
    ]
    return Cluster(
        source=Path("mi300.ini"), nodes=nodes, groups={"all": [x.name for x in nodes]},
        vars=ClusterVars(orch_stack=stack),
    )  # fmt: skip


def workload(name: str = "chat", **over: Any) -> dict[str, Any]:
    w: dict[str, Any] = {
        "name": name,
        "engine": "vllm",
        "model": {"path": "/models/llama-8b", "name": "llama"},
        "engine_args": ["--max-model-len", "4096"],
        "load": {
            "concurrency": [1, 8],
            "input_tokens": {"kind": "fixed", "tokens": 128},
            "output_tokens": {"kind": "fixed", "tokens": 64},
            "requests": 100,
        },
    }
    w.update(over)
    return w


def plan_file(tmp_path: Path, *workloads: dict[str, Any], stack: str | None = "rocm-6.4") -> Path:
    doc: dict[str, Any] = {"name": "aiter-ab", "collectives": [], "serving": list(workloads)}
    if stack is not None:
        doc["stack"] = stack
    path = tmp_path / "aiter-ab.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def vllm_pin(doc: dict[str, Any]) -> dict[str, Any]:
    return next(e for e in doc["serving"]["engines"] if e["engine"] == "vllm")


def stack_file(tmp_path: Path, edit: Any = None, name: str = "rocm-x") -> Path:
    """rocm-6.4 as a file of another name, with one variant that has engine arguments too."""
    doc = ROCM.model_dump(mode="json", exclude_none=True)
    doc["name"] = name
    eager = {"env": {"VLLM_ROCM_USE_AITER": "1"}, "engine_args": ["--enforce-eager"]}
    vllm_pin(doc)["variants"]["eager"] = eager
    if edit is not None:
        edit(doc)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# --- the stacks ------------------------------------------------------------------------------------


def test_the_rocm_stack_names_aiter_and_plain_for_vllm() -> None:
    assert ROCM.serving is not None
    pin = ROCM.serving.engine("vllm")
    assert pin is not None and pin.version == "0.10.1" and pin.image is not None
    assert pin.image.reference == "docker.io/rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"  # a tag, no digest
    assert pin.variants["aiter"].env == {"VLLM_ROCM_USE_AITER": "1"}
    assert pin.variants["plain"].env == {"VLLM_ROCM_USE_AITER": "0"}
    for name in ("rocm-6.2", "rocm-6.4", "cuda-12.4"):  # every GPU stack pins a vLLM and an SGLang
        sv = load_stack(name).serving
        assert sv is not None and {e.engine for e in sv.engines} == {"vllm", "sglang"}


def _set(path: str, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        target: Any = vllm_pin(doc)
        *parents, last = path.split(".")
        for key in parents:
            target = target[key]
        target[last] = value

    return edit


@pytest.mark.parametrize(
    ("path", "value", "where", "why"),
    [
        ("variants.aiter.env", {"PATH": "/tmp"}, "variants.aiter.env", "'PATH' is not an engine variable"),
        ("variants.aiter.env", {"HF_HUB_OFFLINE": "0"}, "variants.aiter.env", "not an engine variable"),
        ("variants.aiter.env", {"VLLM_X": "a\nb"}, "variants.aiter.env", "newline"),
        ("variants.aiter.engine_args", ["--x;reboot"], "variants.aiter.engine_args.0", "engine argument"),
        ("variants.aiter.engine_args", ["--port=1"], "variants.aiter.engine_args.0", "set by orch"),
        ("variants", {"bad name": {}}, "variants", "variant 'bad name' is not a valid name"),
        ("image.tag", "latest", "image.tag", "not a release tag"),
        ("image", {"repository": "docker.io/rocm/vllm"}, "image", "digest, its release tag"),
        ("image.digest", "sha256:abc", "image.digest", "sha256 digest"),
        ("version", "0.10.1; rm -rf /", "version", "pinned version"),
    ],
)
def test_a_bad_stack_is_refused_naming_the_file_and_the_key(
    tmp_path: Path, path: str, value: Any, where: str, why: str
) -> None:
    bad = stack_file(tmp_path, _set(path, value))
    with pytest.raises(ConfigError) as e:
        load_stack(bad)
    text = str(e.value)
    assert str(bad) in text and f"serving.engines.0.{where}" in text and why in text, text


def test_a_gpu_engine_in_a_cpu_stack_and_a_short_form_engine() -> None:
    doc = load_stack("cpu-serve").model_dump(mode="json")
    doc["serving"] = {"engine": "transformers", "version": "5.24.0"}  # the one-engine short form
    assert [e.engine for e in Stack.model_validate(doc).serving.engines] == ["transformers"]  # type: ignore[union-attr]
    doc["serving"] = {"engines": [{"engine": "vllm", "version": "0.10.1"}]}
    with pytest.raises(ValueError, match="vllm needs GPUs"):
        Stack.model_validate(doc)


# --- the engine's command and environment ---------------------------------------------------------


def test_the_variant_s_arguments_follow_the_plan_s_and_its_env_is_added(tmp_path: Path) -> None:
    stack = load_stack(stack_file(tmp_path))
    w = ServingWorkload.model_validate(workload(variant="eager"))
    variant = stack_variant(w, stack)
    assert variant is not None
    at = {"bindir": "/opt/vllm/bin", "host": "10.0.0.1", "port": 8000, "gpu_vendor": "amd"}
    argv = engine_argv(w, **at, variant=variant)  # type: ignore[arg-type]
    assert argv[:3] == ["/opt/vllm/bin/vllm", "serve", "/models/llama-8b"]
    assert argv[-3:] == ["--max-model-len", "4096", "--enforce-eager"]  # the plan's, then the variant's
    plain = engine_argv(w, **at)  # type: ignore[arg-type]
    assert "--enforce-eager" not in plain and plain[-2:] == ["--max-model-len", "4096"]
    env = engine_env({"NCCL_DEBUG": "WARN", "HF_HUB_OFFLINE": "1"}, variant)
    assert env == {"NCCL_DEBUG": "WARN", "HF_HUB_OFFLINE": "1", "VLLM_ROCM_USE_AITER": "1"}
    assert engine_env({"NCCL_DEBUG": "WARN"}, None) == {"NCCL_DEBUG": "WARN"}


def test_the_engine_job_gets_the_variant_of_the_plan_s_stack(tmp_path: Path) -> None:
    stack = stack_file(tmp_path)
    plan = load_plan(plan_file(tmp_path, workload("fast", variant="eager"), stack=str(stack)))
    cluster = gpu_cluster(1)
    step = expand_serving_steps(plan, cluster)[0]
    assert step.variant == "eager"
    _, spec = engine_job(
        plan, cluster, step, plan.serving[0], "node1", port=8000, here=True, bindir="/opt/vllm/bin",
        env={"NCCL_DEBUG": "WARN", "HF_HUB_OFFLINE": "1"}, folder=tmp_path / "steps" / step.id,
        root=tmp_path, layout=run_data_layout(cluster, tmp_path),
    )  # fmt: skip
    assert spec.env["VLLM_ROCM_USE_AITER"] == "1" and spec.env["HF_HUB_OFFLINE"] == "1"
    assert spec.argv[-1] == "--enforce-eager"


# --- plans: choosing a variant, and refusals --------------------------------------------------------


def test_aiter_against_plain_in_one_plan_are_two_steps_that_say_their_variant(tmp_path: Path) -> None:
    plan = load_plan(plan_file(tmp_path, workload("chat-aiter", variant="aiter"),
                               workload("chat-plain", variant="plain")))  # fmt: skip
    steps = expand_serving_steps(plan, gpu_cluster())
    assert [(s.id, s.variant) for s in steps] == [("chat-aiter-r1", "aiter"), ("chat-plain-r1", "plain")]
    assert expand_steps(plan, gpu_cluster()) == []  # checked against the stack, and accepted


def test_the_inventory_s_stack_serves_when_the_plan_names_none(tmp_path: Path) -> None:
    plan = load_plan(plan_file(tmp_path, workload(variant="aiter"), stack=None))
    expand_steps(plan, gpu_cluster(stack="rocm-6.4"))
    with pytest.raises(ConfigError, match="no stack is named") as e:
        expand_steps(plan, gpu_cluster())
    assert e.value.exit_code == 2
    with pytest.raises(ConfigError, match="no stack is named"):
        expand_steps(plan, gpu_cluster(stack="none"))


@pytest.mark.parametrize(
    ("over", "stack", "said"),
    [
        ({"variant": "atom"}, "rocm-6.4",
         "stack rocm-6.4 has no such vllm variant (its vllm variants: aiter, plain)"),
        ({"variant": "aiter", "engine": "sglang"}, "rocm-6.4",
         "no such sglang variant (its sglang variants: none)"),
        ({"variant": "aiter"}, "rocm-6.2",
         "stack rocm-6.2 has no such vllm variant (its vllm variants: none)"),
        ({"variant": "aiter", "engine": "transformers", "model": {"path": "/m"}}, "rocm-6.4",
         "stack rocm-6.4 pins no transformers engine (its engines: vllm, sglang)"),
    ],
)  # fmt: skip
def test_a_variant_the_stack_does_not_have_is_refused_naming_its_variants(
    tmp_path: Path, over: dict[str, Any], stack: str, said: str
) -> None:
    plan = load_plan(plan_file(tmp_path, workload(**over), stack=stack))
    with pytest.raises(ConfigError) as e:
        expand_steps(plan, gpu_cluster())
    assert said in str(e.value) and "serving chat: variant" in str(e.value) and e.value.exit_code == 2


def test_an_external_engine_takes_no_variant(tmp_path: Path) -> None:
    ext = workload(engine="external", url="http://10.0.0.5:8000", variant="aiter")
    del ext["engine_args"]
    with pytest.raises(ConfigError, match="variant do not apply to engine external"):
        load_plan(plan_file(tmp_path, ext))
    with pytest.raises(ConfigError, match=r"serving\.0\.variant: name 'no good' is not a valid name"):
        load_plan(plan_file(tmp_path, workload(variant="no good")))


def test_plan_show_and_scale_test_refuse_an_unknown_variant_before_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    inv = tmp_path / "mi300.ini"
    inv.write_text("[all]\n" + "".join(f"node{i} ansible_host=10.0.0.{i} gpu_vendor=amd gpus_per_node=8\n"
                                       for i in (1, 2)))  # fmt: skip
    plan = plan_file(tmp_path, workload(variant="aiter-mha"))
    out = str(tmp_path / "runs")
    for argv in (["plan", "show", "--plan", str(plan), "-i", str(inv)],
                 ["scale-test", "--plan", str(plan), "-i", str(inv), "--out", out]):  # fmt: skip
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert "(its vllm variants: aiter, plain)" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    ok = plan_file(tmp_path, workload("chat-aiter", variant="aiter"), workload("chat-plain", variant="plain"))
    with pytest.raises(SystemExit) as info:
        main(["plan", "show", "--plan", str(ok), "-i", str(inv)])
    assert info.value.code == 0
    shown = capsys.readouterr().out
    assert "variant aiter" in shown and "variant plain" in shown


# --- fingerprint: what orch checks of the engines it does not install ----------------------------


def test_the_fingerprint_holds_a_node_s_engine_to_the_pin_where_it_finds_one() -> None:
    from orchestrator.models.fingerprint import Fingerprint
    from orchestrator.provision import fingerprint as F

    def engine_checks(stack: Stack, **fp: Any) -> dict[str, tuple[str, str | None, str]]:
        report = F.compare(stack, Fingerprint(node="n1", **fp))
        checks = [c for c in report.checks if c.field.startswith("engine")]
        return {c.field: (c.expected, c.found, c.verdict) for c in checks}

    assert engine_checks(ROCM) == {}  # no engine on the node: not held against it (installed by the image)
    assert engine_checks(ROCM, packages=["vllm==0.10.1", "numpy==2.2.6"]) == {
        "engine vllm": ("0.10.1", "0.10.1", "unchanged")
    }
    assert engine_checks(ROCM, packages=["vllm==0.9.2", "sglang==0.4.5"]) == {
        "engine vllm": ("0.10.1", "0.9.2", "needs porting"),
        "engine sglang": ("0.4.5", "0.4.5", "unchanged"),
    }
    # an image pinned by digest is held to what the node pulled of that repository; by tag, not at all
    digest = "sha256:" + "ab" * 32
    doc = ROCM.model_dump(mode="json")
    vllm_pin(doc)["image"]["digest"] = digest
    pinned = Stack.model_validate(doc)
    pulled = ["docker.io/rocm/vllm@sha256:" + "cd" * 32]
    assert engine_checks(pinned, images=pulled)["engine vllm image"] == (
        f"docker.io/rocm/vllm@{digest}", pulled[0], "needs config change"
    )
    assert engine_checks(ROCM, images=pulled) == {}


def test_the_aiter_against_plain_example_in_the_docs_is_a_plan_orch_accepts(tmp_path: Path) -> None:
    import re

    doc = (Path(__file__).resolve().parents[2] / "docs" / "serving.md").read_text()
    found = re.search(r"```yaml\n(name: aiter-vs-plain\n.*?)```", doc, re.S)
    assert found is not None
    path = tmp_path / "aiter-vs-plain.yaml"
    path.write_text(found.group(1))
    plan = load_plan(path)
    steps = expand_serving_steps(plan, gpu_cluster())
    assert [(s.id, s.variant, s.nodes) for s in steps] == [
        ("llama-aiter-r1", "aiter", ["node1"]),
        ("llama-plain-r1", "plain", ["node1"]),
    ]
    expand_steps(plan, gpu_cluster())  # the variants are the stack's
    assert plan.serving[0].load == plan.serving[1].load  # the same load, by the YAML anchor


# --- a variant's dtype (rendered into the engine's own --dtype) ------------------------------------


def _with_dtype_variant(dtype: str) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        vllm_pin(doc)["variants"]["half"] = {"dtype": dtype, "env": {"VLLM_ROCM_USE_AITER": "0"}}

    return edit


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_variant_s_dtype_is_the_engine_s_one_dtype_argument(tmp_path: Path, engine: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        for pin in doc["serving"]["engines"]:
            pin.setdefault("variants", {})["half"] = {"dtype": "float16"}

    stack = load_stack(stack_file(tmp_path, edit))
    w = ServingWorkload.model_validate(workload(engine=engine, variant="half"))
    variant = stack_variant(w, stack)
    assert variant is not None and variant.dtype == "float16"
    at = {"bindir": "/opt/b", "host": "10.0.0.1", "port": 8000, "gpu_vendor": "amd"}
    argv = engine_argv(w, **at, variant=variant)  # type: ignore[arg-type]
    assert argv.count("--dtype") == 1 and argv[argv.index("--dtype") + 1] == "float16"
    plain = engine_argv(w, **at)  # type: ignore[arg-type]
    assert plain[plain.index("--dtype") + 1] == "auto"  # without the variant: the plan's


def test_transformers_gets_dtype_from_a_variant_and_none_at_auto() -> None:
    cpu = load_stack("cpu-serve")
    assert cpu.serving is not None
    w = ServingWorkload.model_validate(
        workload(engine="transformers", model={"path": "/opt/m"}, engine_args=["--continuous-batching"])
    )
    at = {"bindir": "/v/bin", "host": "127.0.0.1", "port": 1, "gpu_vendor": "none"}
    assert "--dtype" not in engine_argv(w, **at)  # type: ignore[arg-type]
    from orchestrator.models.stack import EngineVariant

    argv = engine_argv(w, **at, variant=EngineVariant(dtype="bfloat16"))  # type: ignore[arg-type]
    assert argv[argv.index("--dtype") + 1] == "bfloat16" and argv.count("--dtype") == 1


def test_a_variant_s_dtype_against_the_workload_s_is_refused_naming_both(tmp_path: Path) -> None:
    stack = load_stack(stack_file(tmp_path, _with_dtype_variant("float16")))
    same = ServingWorkload.model_validate(workload(variant="half", dtype="float16"))
    assert stack_variant(same, stack) is not None  # the same dtype twice is no conflict
    w = ServingWorkload.model_validate(workload(variant="half", dtype="bfloat16"))
    with pytest.raises(ConfigError, match="variant sets dtype float16, the workload dtype bfloat16"):
        stack_variant(w, stack)


@pytest.mark.parametrize("arg", ["--dtype", "--dtype=float16", "--dt"])
def test_a_variant_s_engine_args_still_may_not_set_dtype(tmp_path: Path, arg: str) -> None:
    bad = stack_file(tmp_path, _set("variants.aiter.engine_args", [arg, "float16"]))
    with pytest.raises(ConfigError, match="set by orch"):
        load_stack(bad)
    with pytest.raises(ConfigError, match="dtype"):
        load_stack(stack_file(tmp_path, _set("variants.aiter.dtype", "int4"), name="rocm-y"))


def test_cpu_serve_names_a_numerics_pair_and_a_slower_pair_for_the_lab() -> None:
    """fp32 -> bf16 changes the dtype the engine computes in; fp32 -> fp32-small-kv keeps float32
    and gives the engine 4 KV blocks of 32 tokens after serving-smoke's 256 (typer/click: the last value of an
    option wins, checked against transformers 5.24.0's `serve` signature, docs/migration.md)."""
    from orchestrator.plan import resolve_plan

    cpu = load_stack("cpu-serve")
    w = resolve_plan("serving-smoke", None).serving[0].model_copy(update={"dtype": "auto"})
    at = {"bindir": "/opt/orch/venv/bin", "host": "10.0.0.1", "port": 8000, "gpu_vendor": "none"}
    argv = {}
    for name in ("fp32", "bf16", "fp32-small-kv"):
        v = stack_variant(w.model_copy(update={"variant": name}), cpu)
        argv[name] = engine_argv(w, **at, variant=v)  # type: ignore[arg-type]

    def last(a: list[str], flag: str) -> str | None:
        return next((a[i + 1] for i in range(len(a) - 2, -1, -1) if a[i] == flag), None)

    assert [last(argv[n], "--dtype") for n in argv] == ["float32", "bfloat16", "float32"]
    assert [last(argv[n], "--cb-num-blocks") for n in argv] == ["256", "256", "4"]
    assert [last(argv[n], "--cb-block-size") for n in argv] == ["32", "32", "32"]
    assert all("--continuous-batching" in a for a in argv.values())  # the same paged-attention path
    assert argv["fp32-small-kv"][: len(argv["fp32"])] == argv["fp32"]  # only the KV cache differs
