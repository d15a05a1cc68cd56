"""The lab model builder (orchestrator/workloads/labmodel.py): hash, atomic idempotent install, and
two real builds that agree (when transformers and tokenizers are installed: the cpu-serve venv)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import stat
import typing
from pathlib import Path

import pytest
from fakes import probe_module

from orchestrator.models.stack import LabModelName
from orchestrator.stacks import load_stack
from orchestrator.workloads import labmodel as L


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_the_hash_covers_names_sizes_and_contents_and_the_probe_computes_the_same(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"config.json": b"{}", "sub/w.bin": b"\x00\x01", "b.txt": b"xy"})
    sha, files = L.tree_hash(a)
    assert files == ["b.txt", "config.json", "sub/w.bin"]
    assert sha.startswith("sha256:") and len(sha) == 7 + 64
    assert probe_module().tree_hash(str(a)) == sha
    # bytes moved from one file to the next, a renamed file, a changed byte: each changes the hash
    moved = _tree(tmp_path / "m", {"config.json": b"{}", "sub/w.bin": b"\x00", "b.txt": b"xy\x01"})
    renamed = _tree(tmp_path / "r", {"config.json": b"{}", "sub/v.bin": b"\x00\x01", "b.txt": b"xy"})
    changed = _tree(tmp_path / "c", {"config.json": b"{}", "sub/w.bin": b"\x00\x02", "b.txt": b"xy"})
    others = {L.tree_hash(p)[0] for p in (moved, renamed, changed)}
    assert len(others) == 3 and sha not in others
    same = _tree(tmp_path / "s", {"sub/w.bin": b"\x00\x01", "b.txt": b"xy", "config.json": b"{}"})
    assert L.tree_hash(same)[0] == sha


def test_a_link_in_the_model_is_refused_by_both_hashes(tmp_path: Path) -> None:
    a = _tree(tmp_path / "a", {"config.json": b"{}"})
    (a / "weights").symlink_to("/etc/passwd")
    with pytest.raises(L.LabModelError, match="not a regular file"):
        L.tree_hash(a)
    with pytest.raises(ValueError, match="not a regular file"):
        probe_module().tree_hash(str(a))


def test_the_recipes_are_the_names_a_stack_may_give() -> None:
    assert set(L.RECIPES) == set(typing.get_args(LabModelName))
    # the load generator's prompt word is one token of the lab model
    from orchestrator.workloads.loadgen import PROMPT_WORD

    assert PROMPT_WORD.strip() in L.RECIPES["lab-tiny"].words
    counts = [
        line.split().count(w)
        for w, line in zip(L.RECIPES["lab-tiny"].words, L.corpus(L.RECIPES["lab-tiny"].words), strict=True)
    ]
    assert len(set(counts)) == len(counts)  # one count per word: one vocabulary order


class FakeBuild:
    """Stands in for build_into: writes small files, counts calls, can fail half-way."""

    def __init__(self, content: bytes = b"weights") -> None:
        self.calls = 0
        self.content = content
        self.fail = False

    def __call__(self, recipe: L.Recipe, folder: Path) -> None:
        self.calls += 1
        assert folder.is_dir() and not any(folder.iterdir())  # a fresh, empty, private folder
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        (folder / "config.json").write_text(json.dumps({"hidden": recipe.hidden}))
        if self.fail:
            raise RuntimeError("disk full")
        (folder / "model.safetensors").write_bytes(self.content)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeBuild:
    build = FakeBuild()
    monkeypatch.setattr(L, "build_into", build)
    return build


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_ensure_builds_once_then_skips_while_the_files_match_the_record(
    tmp_path: Path, fake: FakeBuild
) -> None:
    dest, record = tmp_path / "models" / "lab-tiny", tmp_path / "venv" / "orch-model.json"
    record.parent.mkdir()
    first = L.ensure("lab-tiny", str(dest), str(record))
    assert first["changed"] is True and fake.calls == 1
    assert first["sha256"] == L.tree_hash(dest)[0] and first["files"] == ["config.json", "model.safetensors"]
    rec = json.loads(record.read_text())
    assert (
        rec["sha256"] == first["sha256"] and rec["path"] == str(dest) and rec["builder"] == L.BUILDER_VERSION
    )
    assert stat.S_IMODE(record.stat().st_mode) == 0o644 and stat.S_IMODE(dest.stat().st_mode) == 0o755
    assert stat.S_IMODE((dest / "model.safetensors").stat().st_mode) == 0o644
    second = L.ensure("lab-tiny", str(dest), str(record))
    assert second["changed"] is False and fake.calls == 1 and second["sha256"] == first["sha256"]
    assert _leftovers(dest.parent) == [] and _leftovers(record.parent) == []


def test_a_changed_file_or_a_stale_record_rebuilds_and_replaces_the_folder(
    tmp_path: Path, fake: FakeBuild
) -> None:
    dest, record = tmp_path / "lab-tiny", tmp_path / "orch-model.json"
    sha = L.ensure("lab-tiny", str(dest), str(record))["sha256"]
    (dest / "model.safetensors").write_bytes(b"tampered")
    (dest / "extra.bin").write_bytes(b"left over")
    again = L.ensure("lab-tiny", str(dest), str(record))
    assert again["changed"] is True and fake.calls == 2 and again["sha256"] == sha
    assert sorted(os.listdir(dest)) == ["config.json", "model.safetensors"] and _leftovers(tmp_path) == []
    # a record of another builder version (or path) is stale, even with the files in place
    record.write_text(json.dumps({**json.loads(record.read_text()), "builder": L.BUILDER_VERSION + 1}))
    assert L.ensure("lab-tiny", str(dest), str(record))["changed"] is True and fake.calls == 3
    record.write_text("{half")
    assert L.ensure("lab-tiny", str(dest), str(record))["changed"] is True and fake.calls == 4


def test_a_failed_build_leaves_the_model_and_the_record_as_they_were(tmp_path: Path, fake: FakeBuild) -> None:
    dest, record = tmp_path / "lab-tiny", tmp_path / "orch-model.json"
    L.ensure("lab-tiny", str(dest), str(record))
    before = (L.tree_hash(dest), record.read_text())
    fake.fail = True
    with pytest.raises(RuntimeError, match="disk full"):
        L.ensure("lab-tiny", str(dest), str(record), force=True)
    assert (L.tree_hash(dest), record.read_text()) == before and _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "dest", "why"),
    [
        ("lab-huge", "/x/m", "no lab model named 'lab-huge'"),
        ("lab-tiny", "models/lab-tiny", "not a normalised absolute path"),
        ("lab-tiny", "/opt/../etc/m", "not a normalised absolute path"),
        ("lab-tiny", "/opt/orch/m/", "not a normalised absolute path"),
    ],
)
def test_bad_arguments_are_refused(name: str, dest: str, why: str, tmp_path: Path, fake: FakeBuild) -> None:
    with pytest.raises(L.LabModelError, match=why):
        L.ensure(name, dest, str(tmp_path / "r.json"))
    assert fake.calls == 0


def test_a_link_where_the_model_or_record_goes_is_refused(tmp_path: Path, fake: FakeBuild) -> None:
    target = _tree(tmp_path / "elsewhere", {"keep": b"x"})
    (tmp_path / "lab-tiny").symlink_to(target)
    with pytest.raises(L.LabModelError, match="symbolic link"):
        L.ensure("lab-tiny", str(tmp_path / "lab-tiny"), str(tmp_path / "r.json"))
    (tmp_path / "r.json").symlink_to(tmp_path / "elsewhere" / "keep")
    with pytest.raises(L.LabModelError, match="symbolic link"):
        L.ensure("lab-tiny", str(tmp_path / "m"), str(tmp_path / "r.json"))
    assert fake.calls == 0 and (target / "keep").read_bytes() == b"x"


def test_main_prints_one_json_line_and_exit_2_on_a_refusal(
    tmp_path: Path, fake: FakeBuild, capsys: pytest.CaptureFixture[str]
) -> None:
    dest, record = tmp_path / "lab-tiny", tmp_path / "orch-model.json"
    assert L.main(["--dest", str(dest), "--record", str(record)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and json.loads(out[0])["changed"] is True
    assert L.main(["--hash", str(dest)]) == 0
    assert json.loads(capsys.readouterr().out)["sha256"] == L.tree_hash(dest)[0]
    assert L.main(["--dest", "rel", "--record", str(record)]) == 2
    assert "not a normalised absolute path" in capsys.readouterr().err
    fake.fail = True
    assert L.main(["--dest", str(dest), "--record", str(record), "--force"]) == 1
    assert "disk full" in capsys.readouterr().err


PINNED = ("transformers", "tokenizers", "safetensors")


def check_two_real_builds(a: dict[str, typing.Any], b: dict[str, typing.Any], vocab: set[str],
                          versions: dict[str, str]) -> bool:  # fmt: skip
    """Two builds' records (labmodel.ensure's JSON), the first one's tokenizer vocabulary and the
    versions of PINNED where they ran: the same files, the recipe's words, and the cpu-serve stack's
    pinned sha256 when the versions are its pins. True when the pinned hash was compared (also
    used by tests/integration/test_serving_lab.py, with the node's cpu-serve venv)."""
    assert a["changed"] and b["changed"] and a["sha256"] == b["sha256"] and a["files"] == b["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(a["files"])
    assert vocab == {"<unk>", "<s>", "</s>", *L.RECIPES["lab-tiny"].words}
    stack = load_stack("cpu-serve")
    assert stack.python is not None and stack.lab_model is not None
    pins = dict(r.split("==") for r in stack.python.packages)
    if all(versions[d] == pins[d] for d in PINNED):
        assert a["sha256"] == stack.lab_model.sha256
        return True
    return False


@pytest.mark.slow
def test_two_real_builds_give_the_same_files_and_the_pinned_hash(tmp_path: Path) -> None:
    """Needs the cpu-serve packages (transformers, tokenizers, torch): run in that venv. CI runs the
    same check with the lab node's cpu-serve venv (tests/integration/test_serving_lab.py::
    test_the_lab_model_built_twice_in_the_nodes_venv_has_the_pinned_hash); here it skips without them."""
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    pytest.importorskip("transformers")
    a = L.ensure("lab-tiny", str(tmp_path / "a" / "lab-tiny"), str(tmp_path / "a.json"))
    b = L.ensure("lab-tiny", str(tmp_path / "b" / "lab-tiny"), str(tmp_path / "b.json"))
    vocab = json.loads((tmp_path / "a" / "lab-tiny" / "tokenizer.json").read_text())["model"]["vocab"]
    check_two_real_builds(a, b, set(vocab), {d: importlib.metadata.version(d) for d in PINNED})


def test_the_pinned_hash_check_compares_against_the_stacks_pin_when_the_versions_are_its_pins() -> None:
    """check_two_real_builds itself (no build: records as ensure() writes them)."""
    stack = load_stack("cpu-serve")
    assert stack.python is not None and stack.lab_model is not None
    pins = {d: v for d, _, v in (r.partition("==") for r in stack.python.packages) if d in PINNED}
    files = {
        "config.json": "1",
        "model.safetensors": "2",
        "tokenizer.json": "3",
        "tokenizer_config.json": "4",
    }
    good = {"changed": True, "sha256": stack.lab_model.sha256, "files": files}
    vocab = {"<unk>", "<s>", "</s>", *L.RECIPES["lab-tiny"].words}
    assert check_two_real_builds(good, dict(good), vocab, pins) is True
    other = {"changed": True, "sha256": "0" * 64, "files": files}
    with pytest.raises(AssertionError):  # the pins, but not the pinned hash
        check_two_real_builds(other, dict(other), vocab, pins)
    assert check_two_real_builds(other, dict(other), vocab, {**pins, "transformers": "0.0.1"}) is False
    with pytest.raises(AssertionError):  # two builds that differ
        check_two_real_builds(good, {**good, "sha256": "1" * 64}, vocab, pins)
