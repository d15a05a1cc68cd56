"""The fingerprint's package set and environment hashes, and certify against them."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from fakes import probe_module

from orchestrator import __version__
from orchestrator.migrate.certify import certify
from orchestrator.models.fingerprint import FingerprintSet
from orchestrator.provision import fingerprint as F
from orchestrator.stacks import load_stack

BASE = ["Torch==2.13.0+cpu", "orch==" + __version__, "typing_extensions==4.12.2"]


def _raw(
    packages: list[str], stack: str | None = "cpu-gloo", env: dict[str, str] | None = None
) -> dict[str, object]:
    raw: dict[str, object] = {
        "os": "debian-12",
        "venv": {"python": "3.11.2", "torch": "2.13.0+cpu", "orch": __version__, "packages": packages},
    }
    if stack is not None:
        raw["stack_record"] = {"stack": stack, "env": env if env is not None else dict(load_stack(stack).env)}
    return raw


def test_the_probe_lists_every_package_of_the_venv_and_reads_the_stack_record(tmp_path: Path) -> None:
    probe = probe_module()
    facts = probe.venv_python(sys.prefix)
    want = f"pydantic=={importlib.metadata.version('pydantic')}"
    assert want in facts["packages"] and facts["packages"] == sorted(facts["packages"])
    (tmp_path / "orch-stack.json").write_text(
        json.dumps({"stack": "cpu-gloo", "env": {"OMP_NUM_THREADS": "1"}})
    )
    assert probe.stack_record(str(tmp_path)) == {"stack": "cpu-gloo", "env": {"OMP_NUM_THREADS": "1"}}
    (tmp_path / "orch-stack.json").write_text("{half")
    assert probe.stack_record(str(tmp_path)) is None
    assert probe.stack_record(str(tmp_path / "none")) is None


def test_the_package_hash_ignores_order_and_name_spelling_and_sees_one_more_package() -> None:
    a = F.from_probe("n1", _raw(BASE))
    b = F.from_probe("n1", _raw(list(reversed([p.lower().replace("_", "-") for p in BASE]))))
    c = F.from_probe("n1", _raw([*BASE, "numpy==2.2.6"]))
    assert a.packages_hash is not None and a.packages_hash == b.packages_hash
    assert c.packages_hash != a.packages_hash
    assert "typing-extensions==4.12.2" in a.packages


def test_the_env_hash_sees_a_changed_value_and_a_bad_record_is_a_problem() -> None:
    a = F.from_probe("n1", _raw(BASE))
    b = F.from_probe("n1", _raw(BASE, env={**load_stack("cpu-gloo").env, "OMP_NUM_THREADS": "2"}))
    assert a.env_hash == F.env_hash(load_stack("cpu-gloo").env) and b.env_hash != a.env_hash
    bad = F.from_probe("n1", {**_raw(BASE), "stack_record": {"stack": "x", "env": {"A": 1}}})
    assert bad.env_hash is None and any("orch-stack.json" in p for p in bad.problems)


def test_compare_holds_the_node_to_the_stack_packages_record_and_env() -> None:
    on_a = F.from_probe("n1", _raw(BASE))
    checks = {c.field: c.verdict for c in F.compare(load_stack("cpu-gloo-slow"), on_a).checks}
    assert checks["env"] == "needs config change" and checks["stack record"] == "needs config change"
    nxt = {c.field: c for c in F.compare(load_stack("cpu-gloo-next"), on_a).checks}
    assert nxt["package numpy"].verdict == "unavailable"
    assert all(c.verdict == "unchanged" for c in F.compare(load_stack("cpu-gloo"), on_a).checks)
    # a node provisioned before orch recorded its stack is not held to what it cannot show
    old = F.from_probe("n1", _raw(BASE, stack=None))
    assert all(c.verdict == "unchanged" for c in F.compare(load_stack("cpu-gloo"), old).checks)


def test_diff_names_the_packages_added_and_removed() -> None:
    a = FingerprintSet(stack="s", nodes={"n1": F.from_probe("n1", _raw(BASE))})
    b = FingerprintSet(stack="s", nodes={"n1": F.from_probe("n1", _raw([*BASE[:2], "numpy==2.2.6"]))})
    fields = {c.field: c for c in F.diff(a, b)}
    assert fields["packages"].after == "-typing-extensions==4.12.2 +numpy==2.2.6"
    assert "packages_hash" in fields and "env_hash" not in fields


def test_certify_against_the_reference_fails_on_a_package_left_behind() -> None:
    stack = load_stack("cpu-gloo")
    ref = FingerprintSet(stack="cpu-gloo", nodes={n: F.from_probe(n, _raw(BASE)) for n in ("n1", "n2")})
    rebuilt = F.from_probe("n1", _raw(BASE)).model_copy(update={"stack_image": "sha256:" + "b" * 64})
    left = F.from_probe("n2", _raw([*BASE, "numpy==2.2.6"]))
    cert = certify(stack, ["n1", "n2"], {"n1": rebuilt, "n2": left}, ref, reference_from="run-1")
    assert cert.against == "reference" and not cert.ok and cert.failed == ["n2"]
    n1, n2 = cert.nodes
    assert n1.ok and any(note.startswith("stack_image") for note in n1.notes)
    assert any("+numpy==2.2.6" in d for d in n2.differences)
    assert n2.expected_packages_hash == ref.nodes["n2"].packages_hash != n2.packages_hash


def test_certify_against_the_manifest_wants_the_stack_record_and_env() -> None:
    stack = load_stack("cpu-gloo")
    fps = {
        "n1": F.from_probe("n1", _raw(BASE)),
        "n2": F.from_probe("n2", _raw(BASE, stack=None)),
        "n3": F.from_probe("n3", _raw(BASE, stack="cpu-gloo-slow")),
    }
    cert = certify(stack, ["n1", "n2", "n3", "n4"], fps)
    assert cert.against == "manifest" and cert.failed == ["n2", "n3", "n4"]
    assert any("no stack record" in d for d in cert.nodes[1].differences)
    assert any(d.startswith("env:") for d in cert.nodes[2].differences)
    assert cert.nodes[3].differences == ["no fingerprint"]


def test_a_stack_that_differs_in_env_only_shares_the_wheelhouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.provision.service import default_wheelhouse, shared_wheelhouse

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    gloo = load_stack("cpu-gloo")
    debug = gloo.model_copy(
        update={"name": "cpu-gloo-debug", "env": {**gloo.env, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}}
    )
    assert shared_wheelhouse(debug) is None  # nothing built yet
    built = default_wheelhouse(gloo)
    built.mkdir(parents=True)
    (built / "SHA256SUMS").write_text("")
    assert shared_wheelhouse(debug) == built
    assert shared_wheelhouse(load_stack("cpu-gloo-next")) is None  # numpy: other requirements
    # cpu-gloo-slow pins numpy as cpu-gloo-next does, and differs from it in env only
    nxt = default_wheelhouse(load_stack("cpu-gloo-next"))
    nxt.mkdir(parents=True)
    (nxt / "SHA256SUMS").write_text("")
    assert shared_wheelhouse(load_stack("cpu-gloo-slow")) == nxt
