"""Stack manifests and the Stack model."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.stack import Stack
from orchestrator.stacks import json_schema, list_stacks, load_stack


def test_every_shipped_stack_loads() -> None:
    names = list_stacks()
    assert {"cpu-gloo", "rocm-6.2", "cuda-12.4"} <= set(names)
    for n in names:
        s = load_stack(n)
        assert s.name == n
    assert load_stack("rocm-6.2").benchmark is not None
    assert load_stack("cpu-gloo").python is not None


def _cpu(**over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "name": "cpu-x",
        "kind": "cpu",
        "python": {"python_version": "3.11", "torch": "2.13.0"},
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    "over",
    [
        {"kind": "rocm"},  # no rocm section
        {"unknown": 1},  # extra=forbid
        {"env": {"PATH": "/x"}},  # not a workload variable
        {"python": {"python_version": "3.11", "torch": "2.13.0; rm -rf /"}},
        {"python": {"python_version": "3.11", "torch": "2.13.0", "prefix": "/opt/../etc"}},
        {"image": {"repository": "docker.io/rocm/pytorch", "digest": "sha256:abc"}},
        {"name": "Bad Name"},
    ],
)
def test_bad_manifests_are_refused(over: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Stack.model_validate(_cpu(**over))


def test_commit_must_be_full_hash() -> None:
    doc = load_stack("cuda-12.4").model_dump(mode="json")
    doc["cuda"]["nccl_tests"]["commit"] = "v2.13.10"
    with pytest.raises(ValidationError, match="40-hex"):
        Stack.model_validate(doc)


def test_unknown_stack_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        load_stack("nope")
    assert "cpu-gloo" in (e.value.hint or "")


def test_schemas_export() -> None:
    for kind in ("stack", "plan"):
        schema = json_schema(kind)
        assert schema["type"] == "object"
        json.dumps(schema)
    with pytest.raises(ConfigError):
        json_schema("other")


def _serve(**over: object) -> dict[str, object]:
    doc = load_stack("cpu-serve").model_dump(mode="json")
    doc.update(over)
    return doc


def test_the_serving_stack_pins_its_engine_and_names_its_lab_model() -> None:
    s = load_stack("cpu-serve")
    assert s.python is not None and s.serving is not None and s.lab_model is not None
    assert [e.engine for e in s.serving.engines] == ["transformers"]
    assert f"transformers=={s.serving.engines[0].version}" in s.python.packages
    assert s.python.torch == load_stack("cpu-gloo").python.torch  # type: ignore[union-attr]
    assert s.lab_model.path == "/opt/orch/models/lab-tiny" and s.lab_model.sha256 is not None
    # the built-in serving plan serves the model this stack builds
    from orchestrator.plan import load_plan

    plan = load_plan("serving-smoke")
    assert [w.model.path for w in plan.serving if w.model is not None] == [s.lab_model.path]
    assert load_stack("cpu-gloo").lab_model is None


_TF = {"engine": "transformers", "version": "5.24.0"}
_BAD_SERVING: list[tuple[dict[str, object], str]] = [
    ({"engine": "transformers", "version": "5.23.0"}, "pin transformers==5.23.0"),
    ({"engine": "vllm", "version": "0.11.0"}, "needs GPUs"),
    ({"engine": "tgi", "version": "3.0.0"}, "engine"),
    ({"engines": [_TF, _TF]}, "listed twice"),
    ({"engines": []}, "at least 1"),
    ({**_TF, "lab_model": {"name": "gpt-9", "path": "/m"}}, "name"),
    ({**_TF, "lab_model": {"name": "lab-tiny", "path": "/m", "sha256": "sha256:abc"}}, "sha256"),
] + [
    ({**_TF, "lab_model": {"name": "lab-tiny", "path": p}}, "plain absolute path")
    for p in ("models/x", "/opt/../etc", "/opt//m", "/opt/m/", "/opt/m; rm -rf /", "/opt/./m")
]


@pytest.mark.parametrize(("serving", "why"), _BAD_SERVING)
def test_bad_serving_sections_are_refused(serving: dict[str, object], why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        Stack.model_validate(_serve(serving=serving))


def test_a_serving_section_needs_the_venv() -> None:
    doc = _serve(kind="rocm", python=None, container=None)
    doc["rocm"] = load_stack("rocm-6.2").model_dump(mode="json")["rocm"]
    with pytest.raises(ValidationError, match="needs a 'python' section"):
        Stack.model_validate(doc)
