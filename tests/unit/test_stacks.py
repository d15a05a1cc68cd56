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
