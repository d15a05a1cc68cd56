"""Fingerprint verdicts, compatibility matrix, drift and diff."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator import __version__
from orchestrator.models.cluster import Cluster, Node
from orchestrator.provision import fingerprint as F
from orchestrator.stacks import load_stack

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "smi"


@pytest.mark.parametrize(
    ("expected", "found", "verdict"),
    [
        ("2.13.0", "2.13.0+cpu", "unchanged"),
        ("2.13.0", "2.13.1", "needs config change"),
        ("2.13.0", "2.12.0", "needs porting"),
        ("6.2.0", "7.0.0", "needs porting"),
        ("2.13.0", None, "unavailable"),
        ("2.21.5-1+cuda12.4", "2.21.5-1+cuda12.4", "unchanged"),
    ],
)
def test_version_verdicts(expected: str, found: str | None, verdict: str) -> None:
    assert F.version_verdict(expected, found) == verdict


def test_pin_verdicts() -> None:
    assert F.pin_verdict("a" * 40, "a" * 40) == "unchanged"
    assert F.pin_verdict("a" * 40, "b" * 40) == "needs config change"
    assert F.pin_verdict("a" * 40, None) == "unavailable"


def _probe(torch: str = "2.13.0+cpu") -> dict[str, object]:
    return {
        "os": "debian-12",
        "kernel": "6.1",
        "venv": {"python": "3.11.2", "torch": torch, "orch": __version__},
    }


def _cluster(*names: str) -> Cluster:
    return Cluster(source=Path("x.ini"), nodes=[Node(name=n, address=n) for n in names])


def test_cpu_stack_drift_names_node_and_field() -> None:
    fps = {"n1": F.from_probe("n1", _probe()), "n2": F.from_probe("n2", _probe("2.12.0"))}
    comp = F.compatibility(load_stack("cpu-gloo"), _cluster("n1", "n2", "n3"), fps)
    m = comp.matrix()
    assert m["torch"] == {"n1": "unchanged", "n2": "needs porting"}
    assert [n.verdict for n in comp.nodes] == ["unchanged", "needs porting", "unavailable"]
    drift = F.check_drift(_cluster("n1", "n2", "n3"), "cpu-gloo", fps)
    assert list(drift.nodes) == ["n2"] and drift.nodes["n2"][0].field == "torch"
    assert drift.missing == ["n3"] and not drift.ok
    assert drift.lines()[1].startswith("n2: torch 2.13.0 -> 2.12.0")


def test_gpu_stack_on_a_cpu_node_is_unavailable() -> None:
    nvsmi = (FIX / "nvidia-smi-query-gpu.csv").read_text()
    fp = F.from_probe(
        "g1",
        {
            "os": "ubuntu-22.04",
            "nvidia_smi_csv": nvsmi,
            "nvidia_driver_proc": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue",
        },
    )
    rep = F.compare(load_stack("cuda-12.4"), fp, gpus_expected=8)
    v = {c.field: c.verdict for c in rep.checks}
    assert v["os"] == "unchanged" and v["nvidia driver"] == "unchanged"
    assert v["cuda"] == "unavailable" and v["nccl-tests"] == "unavailable"
    assert v["gpus"] == "needs config change"  # 1 GPU found, 8 expected


def test_probe_with_unparsable_tool_output_is_a_problem_not_a_crash() -> None:
    fp = F.from_probe("n", {"ibv_devinfo": "garbage", "amd_smi_static": "garbage"})
    assert len(fp.problems) == 2


@pytest.mark.parametrize("text", ["", "Traceback (most recent call last):\n  boom", "[1, 2]", '{"os": '])
def test_a_probe_file_that_is_not_a_json_object_drifts_that_node_only(tmp_path: Path, text: str) -> None:
    import json

    (tmp_path / "n1.json").write_text(json.dumps(_probe()))
    (tmp_path / "n2.json").write_text(text)
    fps = F.read_probe_dir(tmp_path, ["n1", "n2", "n3"])
    assert set(fps) == {"n1", "n2"}  # n3 wrote nothing: missing, as before
    assert fps["n1"].torch == "2.13.0+cpu" and not fps["n1"].problems
    (why,) = fps["n2"].problems
    assert "n2.json" in why and "not a JSON object" in why and repr(text[:200]) in why
    drift = F.check_drift(_cluster("n1", "n2", "n3"), "cpu-gloo", fps)
    assert "n1" not in drift.nodes and "n2" in drift.nodes and drift.missing == ["n3"]


def test_login_shell_noise_around_the_probe_json_is_kept_as_a_problem(tmp_path: Path) -> None:
    import json

    # What CI's lab wrote for node3 (Ansible's script module under a pty: stderr merged): root's
    # .bashrc runs `pyenv init`, whose rehash raced with the other nodes' logins.
    noise = (
        "rm: cannot remove '/root/.pyenv/shims/tmp.YfO6buqRXz': No such file or directory\r\n"
        "pyenv: cannot rehash: /root/.pyenv/shims isn't writable\r\n"
    )
    (tmp_path / "n1.json").write_text(noise + json.dumps(_probe()) + "\r\n")
    (tmp_path / "n2.json").write_text(json.dumps(_probe(), indent=2))  # a whole-text object
    fps = F.read_probe_dir(tmp_path, ["n1", "n2"])
    assert fps["n1"].torch == fps["n2"].torch == "2.13.0+cpu" and not fps["n2"].problems
    (note,) = fps["n1"].problems
    assert "other lines around its JSON" in note and "cannot rehash" in note
    assert F.check_drift(_cluster("n1", "n2"), "cpu-gloo", fps).ok


def test_diff_and_save_load(tmp_path: Path) -> None:
    a = F.FingerprintSet(stack="cpu-gloo", nodes={"n1": F.from_probe("n1", _probe())})
    b = F.FingerprintSet(
        stack="cpu-gloo",
        nodes={"n1": F.from_probe("n1", _probe("2.13.1")), "n2": F.from_probe("n2", _probe())},
    )
    F.save(a, tmp_path / "a.json")
    changes = F.diff(F.load(tmp_path / "a.json"), b)
    assert [(c.node, c.field, c.before, c.after) for c in changes] == [
        ("n1", "torch", "2.13.0+cpu", "2.13.1"),
        ("n2", "node", None, "present"),
    ]


def test_the_stack_image_id_is_fingerprinted_and_a_rebuild_shows_in_the_diff() -> None:
    def fps(image: str) -> F.FingerprintSet:
        fp = F.from_probe("n1", {**_probe(), "stack_image_id": image})
        return F.FingerprintSet(stack="cpu-gloo", nodes={"n1": fp})

    a, b = fps("aa"), fps("bb")
    assert a.nodes["n1"].stack_image == "aa" and F.from_probe("n1", _probe()).stack_image is None
    assert [(c.field, c.before, c.after) for c in F.diff(a, b)] == [("stack_image", "aa", "bb")]
