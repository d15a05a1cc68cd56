"""The lab model in the fingerprint: the probe reads the record beside the venv and hashes the files
it names; compare, diff and certify see a missing, changed or rebuilt model."""

from __future__ import annotations

import json
from pathlib import Path

from fakes import probe_module

from orchestrator import __version__
from orchestrator.migrate.certify import certify
from orchestrator.models.fingerprint import FingerprintSet
from orchestrator.provision import fingerprint as F
from orchestrator.stacks import load_stack
from orchestrator.workloads.labmodel import tree_hash

STACK = load_stack("cpu-serve")
assert STACK.lab_model is not None and STACK.lab_model.sha256 is not None and STACK.python is not None
PINNED = STACK.lab_model.sha256
OTHER = "sha256:" + "e" * 64
PACKAGES = ["torch==2.13.0+cpu", f"orch=={__version__}", *STACK.python.packages]


def _raw(model: object = "default", found: str | None = PINNED) -> dict[str, object]:
    """A fake probe's output on a node provisioned with cpu-serve."""
    raw: dict[str, object] = {
        "os": "debian-12",
        "venv": {"python": "3.11.2", "torch": "2.13.0+cpu", "orch": __version__, "packages": PACKAGES},
        "stack_record": {"stack": "cpu-serve", "env": dict(STACK.env)},
    }
    if model == "default":
        record = {"name": "lab-tiny", "path": "/opt/orch/models/lab-tiny", "sha256": PINNED, "builder": 1}
        raw["lab_model"] = {"record": record, "sha256": found, "error": None}
    elif model is not None:
        raw["lab_model"] = model
    return raw


def _checks(raw: dict[str, object]) -> dict[str, F.FieldCheck]:
    return {c.field: c for c in F.compare(STACK, F.from_probe("n1", raw)).checks}


def test_the_probe_reads_the_record_and_hashes_the_files_it_names(tmp_path: Path) -> None:
    probe = probe_module()
    venv, model = tmp_path / "venv", tmp_path / "models" / "lab-tiny"
    venv.mkdir()
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    assert probe.lab_model(str(venv)) is None  # no record: a stack without a lab model
    sha, files = tree_hash(model)
    record = {"name": "lab-tiny", "path": str(model), "sha256": sha, "files": files, "builder": 1}
    (venv / "orch-model.json").write_text(json.dumps(record))
    facts = probe.lab_model(str(venv))
    assert facts == {"record": record, "sha256": sha, "error": None}
    (model / "config.json").write_text('{"changed": true}')
    assert probe.lab_model(str(venv))["sha256"] not in (None, sha)
    (venv / "orch-model.json").write_text(json.dumps({**record, "path": str(tmp_path / "gone")}))
    assert "not a folder" in probe.lab_model(str(venv))["error"]
    (venv / "orch-model.json").write_text(json.dumps({**record, "path": "relative/m"}))
    assert "no absolute path" in probe.lab_model(str(venv))["error"]
    (venv / "orch-model.json").write_text("{half")
    assert probe.lab_model(str(venv))["error"] == "orch-model.json is not JSON"


def test_a_node_with_the_pinned_model_is_unchanged() -> None:
    fp = F.from_probe("n1", _raw())
    assert (fp.lab_model, fp.lab_model_path, fp.lab_model_hash, fp.lab_model_found_hash) == (
        "lab-tiny",
        "/opt/orch/models/lab-tiny",
        PINNED,
        PINNED,
    )
    checks = F.compare(STACK, fp).checks
    assert {"lab model", "lab model files"} <= {c.field for c in checks}
    assert all(c.verdict == "unchanged" for c in checks), [c for c in checks if c.verdict != "unchanged"]


def test_a_missing_changed_or_other_model_drifts() -> None:
    none = _checks(_raw(model=None))
    assert none["lab model"].verdict == "unavailable" and "lab model files" not in none
    changed = _checks(_raw(found=OTHER))  # a file changed since the build
    assert changed["lab model files"].verdict == "needs config change"
    assert (changed["lab model files"].expected, changed["lab model files"].found) == (PINNED, OTHER)
    gone = _checks(_raw(found=None))  # the folder was removed
    assert gone["lab model files"].verdict == "unavailable"
    moved = _raw()
    moved["lab_model"]["record"]["path"] = "/tmp/lab-tiny"  # type: ignore[index]
    assert _checks(moved)["lab model"].verdict == "needs config change"
    # built consistently but not the pinned model (other package versions): the pin decides
    rebuilt = _raw(found=OTHER)
    rebuilt["lab_model"]["record"]["sha256"] = OTHER  # type: ignore[index]
    assert _checks(rebuilt)["lab model files"].verdict == "needs config change"
    # a stack without a pin holds the node to the hash recorded when it was built
    unpinned = STACK.model_copy(
        update={"serving": STACK.serving.model_copy(  # type: ignore[union-attr]
            update={"lab_model": STACK.lab_model.model_copy(update={"sha256": None})})}  # type: ignore[union-attr]
    )  # fmt: skip
    verdicts = {c.field: c.verdict for c in F.compare(unpinned, F.from_probe("n1", rebuilt)).checks}
    assert verdicts["lab model files"] == "unchanged"


def test_a_bad_record_is_a_problem_not_a_crash() -> None:
    fp = F.from_probe("n1", _raw(model={"record": {"name": "lab-tiny", "sha256": "md5:1"}, "error": "x"}))
    assert fp.lab_model is None and fp.lab_model_found_hash is None
    assert any("orch-model.json" in p for p in fp.problems) and "lab model: x" in fp.problems
    assert F.from_probe("n1", _raw(model=["not", "a", "mapping"])).lab_model is None


def test_drift_and_diff_name_the_changed_model() -> None:
    from orchestrator.models.cluster import Cluster, Node

    cluster = Cluster(source=Path("x.ini"), nodes=[Node(name=n, address=n) for n in ("n1", "n2")])
    fps = {"n1": F.from_probe("n1", _raw()), "n2": F.from_probe("n2", _raw(found=OTHER))}
    drift = F.check_drift(cluster, "cpu-serve", fps)
    assert list(drift.nodes) == ["n2"] and [d.field for d in drift.nodes["n2"]] == ["lab model files"]
    a = FingerprintSet(stack="cpu-serve", nodes={"n1": fps["n1"]})
    b = FingerprintSet(stack="cpu-serve", nodes={"n1": F.from_probe("n1", _raw(found=OTHER))})
    changes = {c.field: c for c in F.diff(a, b)}
    assert list(changes) == ["lab_model_found_hash"]
    assert (changes["lab_model_found_hash"].before, changes["lab_model_found_hash"].after) == (PINNED, OTHER)


def test_certify_sees_a_rebuilt_model_against_the_reference_and_the_manifest() -> None:
    ref = FingerprintSet(stack="cpu-serve", nodes={n: F.from_probe(n, _raw()) for n in ("n1", "n2")})
    rebuilt = _raw(found=OTHER)
    rebuilt["lab_model"]["record"]["sha256"] = OTHER  # type: ignore[index]
    fps = {"n1": F.from_probe("n1", _raw()), "n2": F.from_probe("n2", rebuilt)}
    cert = certify(STACK, ["n1", "n2"], fps, ref, reference_from="run-1")
    assert cert.failed == ["n2"]
    assert any(d.startswith("lab_model_hash:") for d in cert.nodes[1].differences)
    assert any(d.startswith("lab model files:") for d in cert.nodes[1].differences)
    manifest = certify(STACK, ["n1", "n2"], {"n1": fps["n1"], "n2": F.from_probe("n2", _raw(model=None))})
    assert manifest.failed == ["n2"] and any(
        d.startswith("lab model:") for d in manifest.nodes[1].differences
    )
