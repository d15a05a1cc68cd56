"""`orch migrate plan`: the A -> B matrix (orchestrator/migrate/matrix.py), its Markdown and CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile_text import MARKUP
from test_cli_usage import one_error_line, run_cli

from orchestrator.errors import ConfigError
from orchestrator.migrate.matrix import build_matrix, migration_plan
from orchestrator.models.fingerprint import Fingerprint, FingerprintSet
from orchestrator.models.migrate import MatrixRow, MigrationMatrix
from orchestrator.models.stack import Stack
from orchestrator.provision import fingerprint as fpmod
from orchestrator.report.migrate import matrix_markdown
from orchestrator.stacks import load_stack

LAB_INI = Path(__file__).resolve().parents[1] / "fixtures" / "inventories" / "lab.ini"
RCCL_TESTS = {
    "repo": "https://github.com/ROCm/rccl-tests",
    "commit": "52aee698fa255c1eb081d1f33368cca1a82b1b67",
}
DIGEST = "sha256:" + "a" * 64


def _rocm(name: str = "rocm-a", **over: Any) -> Stack:
    doc: dict[str, Any] = {
        "name": name,
        "kind": "rocm",
        "rocm": {"version": "6.2.0", "amdgpu_driver": "6.8.5", "rccl": "2.20.5", "rccl_tests": RCCL_TESTS},
        "container_runtime": "podman",
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return Stack.model_validate(doc)


def _row(m: MigrationMatrix, component: str, item: str | None = None) -> MatrixRow:
    rows = [r for r in m.rows if r.component == component and (item is None or r.item == item)]
    assert len(rows) == 1, [(r.component, r.item) for r in m.rows]
    return rows[0]


def test_cpu_gloo_to_cpu_gloo_next_differs_in_numpy_only() -> None:
    m = build_matrix(load_stack("cpu-gloo"), load_stack("cpu-gloo-next"))
    changed = [r for r in m.rows if r.verdict != "unchanged"]
    assert [(r.component, r.item, r.from_value, r.to_value) for r in changed] == [
        ("python packages", "numpy", None, "2.2.6")
    ]
    assert m.verdict == "needs config change"
    assert _row(m, "framework").from_value == _row(m, "framework").to_value == "2.13.0"


def test_rocm_to_cuda_is_porting_for_every_vendor_component() -> None:
    m = build_matrix(load_stack("rocm-6.2"), load_stack("cuda-12.4"))
    for component in ("driver", "runtime", "communication library", "tests"):
        row = _row(m, component)
        assert row.verdict == "needs porting" and "→" in row.item, row
    assert _row(m, "runtime").from_value == "6.2.0" and _row(m, "runtime").to_value == "12.4.1"
    assert _row(m, "environment", "RCCL_MSCCL_ENABLE").verdict == "needs config change"
    assert _row(m, "environment", "NCCL_IB_RETRY_CNT").note == "added by B"
    assert _row(m, "environment", "NCCL_DEBUG").verdict == "unchanged"
    assert _row(m, "os").verdict == "needs porting" and "sles-15.6" in _row(m, "os").note


@pytest.mark.parametrize(
    ("over", "component", "item", "verdict"),
    [
        ({"rocm": {"version": "6.2.4"}}, "runtime", "ROCm", "needs config change"),
        ({"rocm": {"version": "6.4.0"}}, "runtime", "ROCm", "needs porting"),
        ({"rocm": {"rccl": "2.22.3"}}, "communication library", "RCCL", "needs porting"),
        ({"rocm": {"amdgpu_driver": "6.8.7"}}, "driver", "amdgpu driver", "needs config change"),
        ({"rocm": {"rccl_tests": {**RCCL_TESTS, "commit": "f" * 40}}}, "tests", "rccl-tests",
         "needs config change"),
        ({"image": {"repository": "docker.io/rocm/pytorch", "digest": DIGEST}}, "container image", "image",
         "needs porting"),
        ({"container_runtime": "docker"}, "container image", "container runtime", "needs config change"),
        ({"env": {"NCCL_DEBUG": "INFO"}}, "environment", "NCCL_DEBUG", "needs config change"),
        ({"os": ["ubuntu-22.04"]}, "os", "os", "needs porting"),  # A runs on any OS, B on one
    ],
)  # fmt: skip
def test_one_change_gets_the_fingerprint_rule_verdict(
    over: dict[str, Any], component: str, item: str, verdict: str
) -> None:
    m = build_matrix(_rocm(), _rocm("rocm-b", **over))
    assert _row(m, component, item).verdict == verdict
    assert [r for r in m.rows if r.verdict != "unchanged" and r.item != item] == []


def test_an_image_digest_change_is_config_and_a_removed_image_is_unavailable() -> None:
    with_image = _rocm(image={"repository": "docker.io/rocm/pytorch", "digest": DIGEST})
    other = _rocm("rocm-b", image={"repository": "docker.io/rocm/pytorch", "digest": "sha256:" + "b" * 64})
    assert _row(build_matrix(with_image, other), "container image", "image").verdict == "needs config change"
    gone = _row(build_matrix(with_image, _rocm("rocm-b")), "container image", "image")
    assert gone.verdict == "unavailable" and gone.to_value is None


def test_os_lists_b_must_cover_what_a_supports() -> None:
    a = _rocm(os=["ubuntu-22.04", "rhel-9.4"])
    assert _row(build_matrix(a, _rocm("b", os=["ubuntu-22.04"])), "os").verdict == "needs porting"
    assert _row(build_matrix(a, _rocm("b", os=["rhel-9.4", "ubuntu-22.04", "debian-12"])), "os").verdict == (
        "unchanged"
    )
    assert _row(build_matrix(a, _rocm("b", os=[])), "os").verdict == "unchanged"


def test_what_only_a_has_is_unavailable_and_a_package_bump_follows_the_version_rule() -> None:
    m = build_matrix(load_stack("cpu-gloo"), load_stack("rocm-6.2"))
    assert _row(m, "framework").verdict == "unavailable"
    assert _row(m, "runtime").verdict == "needs porting" and _row(m, "runtime").note == "new in B"
    a = load_stack("cpu-gloo-next")
    assert a.python is not None
    b = a.model_copy(
        update={"name": "cpu-b", "python": a.python.model_copy(update={"packages": ["numpy==2.4.6"]})}
    )
    assert _row(build_matrix(a, b), "python packages", "numpy").verdict == "needs porting"


def test_what_orch_cannot_judge_is_asked_not_guessed() -> None:
    m = build_matrix(load_stack("rocm-6.2"), load_stack("cuda-12.4"))
    topics = {q.topic for q in m.questions}
    assert {"operators", "quantization", "attention", "tokenizers", "adapters", "monitoring"} <= topics
    assert "serving engine" not in topics  # both pin their engines now
    plain = build_matrix(load_stack("cpu-gloo"), load_stack("cpu-gloo-next"))
    assert "serving engine" in {q.topic for q in plain.questions}  # neither manifest names one
    assert not any(r.component in ("serving engine",) for r in plain.rows)


def test_gpu_engines_and_their_images_are_matrix_rows() -> None:
    m = build_matrix(load_stack("rocm-6.2"), load_stack("rocm-6.4"))
    vllm = _row(m, "serving engine", "vllm")
    assert (vllm.from_value, vllm.to_value, vllm.verdict) == ("0.6.4", "0.10.1", "needs porting")
    assert "aiter" in vllm.note and "plain" in vllm.note  # B's variants are named
    image = _row(m, "serving engine", "vllm image")
    assert image.to_value == "docker.io/rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"
    assert image.verdict == "needs config change" and "digest" in image.note
    # rocm-6.2 pins an SGLang image, cuda-12.4 none (no public source for one): B has nothing there
    to_cuda = build_matrix(load_stack("rocm-6.2"), load_stack("cuda-12.4"))
    assert _row(to_cuda, "serving engine", "sglang image").verdict == "unavailable"


def _fingerprints(tmp_path: Path, torch: dict[str, str]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    nodes = {n: Fingerprint(node=n, torch=t, venv_python="3.11.2", orch="0.1.0") for n, t in torch.items()}
    fpmod.save(FingerprintSet(stack="cpu-gloo", nodes=nodes), run / "fingerprint.json")
    return run


def test_node_columns_come_from_the_saved_fingerprints_in_inventory_order(tmp_path: Path) -> None:
    run = _fingerprints(tmp_path, {"node2": "2.12.0", "node1": "2.13.0+cpu"})
    m = migration_plan("cpu-gloo", "cpu-gloo-next", inventory=LAB_INI, fingerprints=run)
    assert m.nodes == ["node1", "node2"] and m.missing == ["node3"]
    torch = {v.node: v for v in _row(m, "framework").nodes}
    assert torch["node1"].found == "2.13.0+cpu" and torch["node1"].vs_from == "unchanged"
    assert torch["node2"].vs_from == "needs porting" and torch["node2"].vs_to == "needs porting"
    assert {v.node: v.vs_from for v in _row(m, "python").nodes} == {
        "node1": "unchanged",
        "node2": "unchanged",
    }
    assert _row(m, "environment", "OMP_NUM_THREADS").nodes == []  # the fingerprint does not read env yet
    md = matrix_markdown(m)
    assert "2.12.0 (vs A: needs porting)" in md and "no fingerprint: node3" in md


def test_an_inventory_without_fingerprints_is_refused() -> None:
    with pytest.raises(ConfigError, match="--fingerprints"):
        migration_plan("cpu-gloo", "cpu-gloo-next", inventory=LAB_INI)


def test_a_linked_fingerprint_file_is_refused(tmp_path: Path) -> None:
    run = _fingerprints(tmp_path, {"node1": "2.13.0"})
    real = tmp_path / "elsewhere.json"
    (run / "fingerprint.json").rename(real)
    (run / "fingerprint.json").symlink_to(real)
    with pytest.raises(ConfigError):
        migration_plan("cpu-gloo", "cpu-gloo-next", fingerprints=run)


@pytest.mark.parametrize("text", MARKUP)
def test_markdown_cells_from_fingerprints_stay_text(tmp_path: Path, text: str) -> None:
    m = build_matrix(
        load_stack("cpu-gloo"), load_stack("cpu-gloo-next"), {"n1": Fingerprint(node="n1", torch=text)}
    )
    md = matrix_markdown(m)
    row = next(line for line in md.splitlines() if line.startswith("| framework "))
    assert row.count(" | ") == len(["component", "item", "A", "B", "verdict", "note", "n1"]) - 1
    assert "<" not in row and "](" not in row.replace("\\]", "")


def test_cli_json_table_and_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run_cli(
        capsys, "migrate", "plan", "--from", "cpu-gloo", "--to", "cpu-gloo", "--format", "json"
    )
    assert code == 0 and MigrationMatrix.model_validate_json(out).verdict == "unchanged"
    run = _fingerprints(tmp_path, {"node1": "2.13.0+cpu"})
    code, out, _ = run_cli(
        capsys, "migrate", "plan", "--from", "cpu-gloo", "--to", "cpu-gloo-next", "--fingerprints", str(run)
    )
    assert code == 1 and "numpy" in out and "node1" in out and "questions for the team" in out
    code, out, _ = run_cli(
        capsys, "migrate", "plan", "--from", "rocm-6.2", "--to", "cuda-12.4", "--format", "md"
    )
    assert code == 1 and out.startswith("# Migration rocm-6.2 → cuda-12.4: **unavailable**")
    code, _, err = run_cli(capsys, "migrate", "plan", "--from", "cpu-gloo", "--to", "nope")
    assert code == 2 and "no stack named 'nope'" in one_error_line(err)
    code, _, err = run_cli(
        capsys, "migrate", "plan", "--from", "cpu-gloo", "--to", "cpu-gloo-next", "-i", str(LAB_INI)
    )
    assert code == 2 and "--fingerprints" in one_error_line(err)
    doc = json.loads(
        run_cli(capsys, "migrate", "plan", "--from", "rocm-6.2", "--to", "cuda-12.4", "--format", "json")[1]
    )
    assert doc["from_stack"] == "rocm-6.2" and len(doc["questions"]) >= 6


def test_each_node_is_held_to_a_and_b_with_the_fingerprint_rules() -> None:
    a = _rocm(os=["ubuntu-22.04", "sles-15.6"])
    b = _rocm("rocm-b", os=["ubuntu-22.04"], rocm={"version": "6.2.4"})
    fps = {
        "n1": Fingerprint(node="n1", os="sles-15.6", rocm="6.2.0"),
        "n2": Fingerprint(node="n2", os="ubuntu-22.04", rocm="6.2.4"),
        "n3": Fingerprint(node="n3"),
    }
    m = build_matrix(a, b, fps)
    osv = {v.node: (v.vs_from, v.vs_to) for v in _row(m, "os").nodes}
    assert osv == {
        "n1": ("unchanged", "needs porting"),
        "n2": ("unchanged", "unchanged"),
        "n3": ("unavailable", "unavailable"),
    }
    rocm = {v.node: (v.found, v.vs_from, v.vs_to) for v in _row(m, "runtime").nodes}
    assert rocm["n1"] == ("6.2.0", "unchanged", "needs config change")
    assert rocm["n2"] == ("6.2.4", "needs config change", "unchanged")
    assert _row(m, "container image", "container runtime").nodes == []  # the fingerprint does not read it


@pytest.mark.parametrize(("a", "b"), [("cpu-gloo", "cpu-gloo-next"), ("rocm-6.2", "cuda-12.4")])
def test_the_examples_in_docs_are_what_orch_prints_today(a: str, b: str) -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
    text = matrix_markdown(build_matrix(load_stack(a), load_stack(b)))
    shown = "#### " + text.removeprefix("# ").replace("\n## ", "\n##### ")
    assert shown in doc, f"docs/migration.md: regenerate the {a} -> {b} example"


def test_the_terminal_table_shows_fingerprint_text_as_text(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = _fingerprints(tmp_path, {"node1": "\x1b[31mred[/] [bold]x"})
    code, out, _ = run_cli(
        capsys, "migrate", "plan", "--from", "cpu-gloo", "--to", "cpu-gloo-next", "--fingerprints", str(run)
    )
    assert code == 1 and "\x1b" not in out and "\\x1b[31mred[/]" in out and "[bold]x" in out


def test_the_serving_stack_names_its_engine_and_lab_model_in_the_matrix() -> None:
    serve = load_stack("cpu-serve")
    assert serve.lab_model is not None
    m = build_matrix(load_stack("cpu-gloo"), serve)
    engine, model = _row(m, "serving engine", "transformers"), _row(m, "serving engine", "lab model")
    assert (engine.from_value, engine.to_value) == (None, "5.24.0")
    assert (model.from_value, model.to_value) == (None, serve.lab_model.sha256)
    assert engine.verdict != "unchanged" and model.verdict != "unchanged"
    assert "serving engine" not in {q.topic for q in m.questions}  # B names one
    assert _row(m, "python packages", "transformers").to_value == "5.24.0"
    # the nodes' columns: the engine from the venv's packages, the model from its files' hash
    fps = {
        "n1": Fingerprint(
            node="n1", packages=["transformers==5.24.0"], lab_model_found_hash=serve.lab_model.sha256
        ),
        "n2": Fingerprint(
            node="n2", packages=["transformers==5.24.1"], lab_model_found_hash="sha256:" + "e" * 64
        ),
        "n3": Fingerprint(node="n3"),
    }
    m = build_matrix(serve, serve, fps)
    assert [(v.node, v.found, v.vs_to) for v in _row(m, "serving engine", "transformers").nodes] == [
        ("n1", "5.24.0", "unchanged"),
        ("n2", "5.24.1", "needs config change"),
        ("n3", None, "unavailable"),
    ]
    assert [v.vs_to for v in _row(m, "serving engine", "lab model").nodes] == [
        "unchanged",
        "needs config change",
        "unavailable",
    ]
