"""The engine registry: one EngineSpec per engine name, every engine reachable through it, and an
unknown engine refused with the known ones (never another engine's command line)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from orchestrator.errors import ConfigError
from orchestrator.models.serving import GPU_ENGINES, ORCH_SET_ARGS, Engine, ServingWorkload
from orchestrator.workloads.engine_specs import ENGINES, engine_spec
from orchestrator.workloads.engines import engine_argv, health_path

AT: dict[str, Any] = {"bindir": "/opt/e/bin", "host": "10.0.0.1", "port": 8000, "gpu_vendor": "amd"}


def _workload(engine: str, **over: Any) -> ServingWorkload:
    doc: dict[str, Any] = {
        "name": "chat",
        "engine": engine,
        "model": {"path": "/models/m"},
        "load": {"concurrency": [1], "requests": 10,
                 "input_tokens": {"kind": "fixed", "tokens": 8},
                 "output_tokens": {"kind": "fixed", "tokens": 8}},
    }  # fmt: skip
    if engine == "external":
        doc = {**doc, "model": {"name": "m"}, "url": "http://10.0.0.9:8000"}
    return ServingWorkload.model_validate({**doc, **over})


def test_the_registry_holds_every_engine_name_once() -> None:
    assert set(ENGINES) == set(get_args(Engine))
    assert all(ENGINES[n].name == n for n in ENGINES)


def test_an_unknown_engine_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        engine_spec("llamacpp")
    assert "unknown engine 'llamacpp'" in e.value.message
    for name in get_args(Engine):
        assert name in e.value.message


def test_an_unknown_engine_never_gets_another_engine_s_command_line() -> None:
    # A workload that got past validation with a name the registry lacks (e.g. a Literal grown
    # without its spec) is refused, where the old `else:  # sglang` started sglang.
    w = _workload("vllm").model_copy(update={"engine": "llamacpp"})
    with pytest.raises(ConfigError, match="unknown engine 'llamacpp'"):
        engine_argv(w, **AT)


@pytest.mark.parametrize(
    ("engine", "program"),
    [("vllm", ["/opt/e/bin/vllm", "serve", "/models/m"]),
     ("sglang", ["/opt/e/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m"]),
     ("transformers", ["/opt/e/bin/transformers", "serve", "/models/m"])],
)  # fmt: skip
def test_every_started_engine_builds_its_argv_through_the_registry(engine: str, program: list[str]) -> None:
    spec = engine_spec(engine)
    argv = engine_argv(_workload(engine), **AT)
    assert argv[: len(program)] == program and spec.starts
    assert argv[argv.index("--port") + 1] == "8000" and argv[argv.index("--host") + 1] == "10.0.0.1"
    assert health_path(_workload(engine)) == spec.health_path == "/health"
    assert spec.needs_gpu == (engine in GPU_ENGINES)
    assert spec.managed_args == ORCH_SET_ARGS  # one shared set today; per-engine spellings go here


def test_served_name_and_revision_only_where_the_engine_takes_them() -> None:
    named = {"model": {"path": "/models/m", "name": "llama", "revision": "abc"}}
    assert engine_argv(_workload("vllm", **named), **AT)[-4:] == [
        "--served-model-name",
        "llama",
        "--revision",
        "abc",
    ]
    transformers = engine_argv(
        _workload("transformers", model={"path": "/models/m", "revision": "abc"}), **AT
    )
    assert "--revision" not in transformers and not engine_spec("transformers").served_name


def test_external_starts_nothing_and_is_polled_on_v1_models() -> None:
    w = _workload("external")
    assert not engine_spec("external").starts and health_path(w) == "/v1/models"
    with pytest.raises(ValueError, match="not started by orch"):
        engine_argv(w, **AT)


def test_packages_the_fingerprint_reads() -> None:
    assert {n: s.package for n, s in ENGINES.items()} == {
        "vllm": "vllm", "sglang": "sglang", "transformers": None, "external": None}  # fmt: skip
