"""The published JSON Schemas (`orch schema plan|stack`) accept exactly what the loaders accept
(issue 12, new user item 7), checked with the jsonschema library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from orchestrator.errors import ConfigError
from orchestrator.plan import load_plan
from orchestrator.stacks import json_schema, load_stack

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "orchestrator" / "plans").glob("*.yaml"))
STACKS = sorted((ROOT / "orchestrator" / "playbooks" / "stacks").glob("*.yaml"))


def errors(kind: str, doc: Any) -> list[str]:
    schema = json_schema(kind)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def test_there_are_built_in_files() -> None:
    assert {p.stem for p in PLANS} >= {"smoke", "acceptance", "nightly"}
    assert {p.stem for p in STACKS} >= {"cpu-gloo"}


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_every_built_in_plan_validates(path: Path) -> None:
    assert errors("plan", yaml.safe_load(path.read_text())) == []
    load_plan(path)


@pytest.mark.parametrize("path", STACKS, ids=lambda p: p.stem)
def test_every_built_in_stack_validates(path: Path) -> None:
    assert errors("stack", yaml.safe_load(path.read_text())) == []
    load_stack(path)


def test_cli_prints_the_same_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as info:
        main(["schema", "plan"])
    assert info.value.code == 0
    assert json.loads(capsys.readouterr().out) == json_schema("plan")


# Plans that differ from smoke in one field: the schema and the loader must agree on each.
_BASE = "sizes: {min: 1K, max: 1M, factor: 4}\n"
_SERVE = (
    "{name: s, engine: vllm, model: {path: /m/x}, load: {concurrency: [1], requests: 10,"
    " input_tokens: {kind: fixed, tokens: 8}, output_tokens: {kind: fixed, tokens: 8}}}"
)
_SLO = _SERVE.replace("requests: 10", "requests: 100")[:-1] + ", slos: {ttft_p99_ms: 500}, thresholds: {%s}}"
PLAN_CASES = [
    ("sizes: {min: 8, max: 1G}\n", True),
    ("sizes: {min: '2MiB', max: 128m}\n", True),
    ("sizes: {min: 1X, max: 1M}\n", False),
    ("sizes: {min: 0, max: 1M}\n", False),
    ("sizes: {min: '0K', max: 1M}\n", False),
    (_BASE + "collectives: [all_reduce, sendrecv]\n", True),
    (_BASE + "collectives: [reduce]\n", False),
    (_BASE + "collectives: [all_reduce, bcast]\n", False),
    (_BASE + "thresholds: {busbw: [{collective: alltoall, min_gbs: 2, size: 1M}]}\n", True),
    (_BASE + "thresholds: {busbw: [{collective: reduce, min_gbs: 2}]}\n", False),
    (_BASE + "thresholds: {busbw: [{collective: alltoall, min_gbs: 2, size: 1Q}]}\n", False),
    (_BASE + "faults: [{kind: kill-worker, target: node1, duration: 250ms}]\n", True),
    (_BASE + "faults: [{kind: kill-worker, target: node1, duration: 5 minutes}]\n", False),
    (_BASE + "partition: gpu-a100\n", True),
    (_BASE + "partition: 'gpu;rm -rf /'\n", False),
    (_BASE + "mixed_vendors: true\n", True),
    (_BASE + "nosuchfield: 1\n", False),
    ("name: x\n", False),
    # serving (docs/serving.md): alone without sizes, beside collectives with them, never nothing
    ("collectives: []\nserving: [" + _SERVE + "]\n", True),
    (_BASE + "serving: [" + _SERVE + "]\n", True),
    ("serving: [" + _SERVE + "]\n", False),
    ("collectives: []\n", False),
    ("collectives: []\nserving: []\n", False),
    ("collectives: []\nserving: [" + _SERVE.replace("vllm", "llamacpp") + "]\n", False),
    (
        "collectives: []\nserving: [" + _SERVE.replace("fixed, tokens: 8", "uniform, min: 1, max: 9") + "]\n",
        True,
    ),
    # thresholds.min_goodput, the old name of min_slo_attainment: read (with a warning), not both
    ("collectives: []\nserving: [" + _SLO % "min_slo_attainment: 0.9" + "]\n", True),
    ("collectives: []\nserving: [" + _SLO % "min_goodput: 0.9" + "]\n", True),
    ("collectives: []\nserving: [" + _SLO % "min_goodput: 0.9, min_slo_attainment: 0.9" + "]\n", False),
    ("collectives: []\nserving: [" + _SLO % "min_goodput: 1.5" + "]\n", False),
    # the cost by part (docs/serving.md)
    ("collectives: []\nserving: [" + _SERVE[:-1] + ", cost: {node_hour: 3, staff_per_month: 900}}]\n", True),
    ("collectives: []\nserving: [" + _SERVE[:-1] + ", cost: {pue: 0.5}}]\n", False),
]


@pytest.mark.parametrize(("text", "ok"), PLAN_CASES)
def test_plan_schema_and_loader_agree(tmp_path: Path, text: str, ok: bool) -> None:
    doc = yaml.safe_load(text)
    assert (errors("plan", doc) == []) is ok, errors("plan", doc)
    path = tmp_path / "p.yaml"
    path.write_text(text)
    if ok:
        load_plan(path)
    else:
        with pytest.raises(ConfigError):
            load_plan(path)
