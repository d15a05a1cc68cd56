"""Where the nodes' orch wheel comes from: a source tree, a named wheel, or the wheel orch was
installed from (pip's direct_url.json); refused with a hint otherwise."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path

import pytest
from fakes import Answer, ScriptedRunner

import orchestrator
from orchestrator import __version__
from orchestrator.errors import ConfigError
from orchestrator.provision import orchwheel, service
from orchestrator.provision.service import prepare_wheelhouse, wheelhouse_argv
from orchestrator.stacks import load_stack

REPO = Path(__file__).resolve().parents[2]
WHEEL = f"orch-{__version__}-py3-none-any.whl"


def wheel(tmp_path: Path, name: str = WHEEL, body: bytes = b"a wheel") -> Path:
    path = tmp_path / "dist" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(body)
    return path


def installed(tmp_path: Path, direct_url: dict[str, object] | None) -> metadata.Distribution:
    """An installed distribution's metadata, as pip leaves it in site-packages."""
    info = tmp_path / "site-packages" / f"orch-{__version__}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: orch\nVersion: {__version__}\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return metadata.PathDistribution(info)


def pip_record(path: Path, digest: str | None = None) -> dict[str, object]:
    """direct_url.json as pip 26 writes it for `pip install ./orch-….whl` (seen on this machine)."""
    d = digest or hashlib.sha256(path.read_bytes()).hexdigest()
    return {"archive_info": {"hash": f"sha256={d}", "hashes": {"sha256": d}}, "url": path.as_uri()}


def test_from_this_source_tree_pip_builds_the_tree() -> None:
    src = orchwheel.resolve()
    assert src.kind == "tree" and src.path == REPO
    assert src.stamp.startswith("# orch source ") and src.stamp == orchwheel.tree_digest(REPO)


def test_a_package_outside_a_source_tree_has_none(tmp_path: Path) -> None:
    pkg = tmp_path / "site-packages" / "orchestrator"
    pkg.mkdir(parents=True)
    assert orchwheel.source_tree(pkg) is None
    (tmp_path / "site-packages" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert orchwheel.source_tree(pkg) is None
    assert orchwheel.source_tree(Path(orchestrator.__file__).resolve().parent) == REPO


def test_a_named_wheel_wins_and_its_hash_stamps_the_wheelhouse(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    src = orchwheel.resolve(path)
    assert (src.kind, src.path) == ("wheel", path)
    assert src.stamp == f"# orch wheel {hashlib.sha256(b'a wheel').hexdigest()}\n"
    assert orchwheel.resolve(wheel(tmp_path, body=b"rebuilt")).stamp != src.stamp


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("orch-0.0.1-py3-none-any.whl", "orch 0.0.1, but this is orch"),
        (f"other-{__version__}-py3-none-any.whl", "not an orch wheel"),
        (f"orch-{__version__}.tar.gz", "not an orch wheel"),
    ],
)
def test_a_named_file_that_is_not_this_orchs_wheel_is_refused(tmp_path: Path, name: str, why: str) -> None:
    path = wheel(tmp_path, name)
    with pytest.raises(ConfigError) as e:
        orchwheel.resolve(path)
    assert why in e.value.message and str(path) in e.value.message and "ORCH_WHEEL" in (e.value.hint or "")


def test_a_named_wheel_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the orch wheel"):
        orchwheel.resolve(tmp_path / WHEEL)


def test_the_wheel_orch_was_installed_from_is_found(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    assert orchwheel.installed_from(installed(tmp_path, pip_record(path))) == path


@pytest.mark.parametrize(
    "record",
    [
        None,  # installed from an index: pip writes no direct_url.json
        {"url": "file:///src/orch", "dir_info": {"editable": True}},
        {"url": "https://example.org/orch-0.1.0-py3-none-any.whl", "archive_info": {}},
        {"url": "file:///nowhere/orch-0.1.0-py3-none-any.whl", "archive_info": {}},
    ],
)
def test_no_usable_wheel_file_is_none(tmp_path: Path, record: dict[str, object] | None) -> None:
    assert orchwheel.installed_from(installed(tmp_path, record)) is None


def test_an_installed_wheel_changed_since_is_refused(tmp_path: Path) -> None:
    path = wheel(tmp_path)
    dist = installed(tmp_path, pip_record(path, digest="0" * 64))
    with pytest.raises(ConfigError, match="has changed since"):
        orchwheel.installed_from(dist)


def test_without_a_tree_the_installed_wheel_is_used_else_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = wheel(tmp_path)
    monkeypatch.setattr(orchwheel, "source_tree", lambda: None)
    dist = installed(tmp_path, pip_record(path))
    monkeypatch.setattr(orchwheel.metadata, "distribution", lambda name: dist)
    assert orchwheel.resolve().path == path
    path.unlink()
    with pytest.raises(ConfigError, match="no orch wheel for the nodes") as e:
        orchwheel.resolve()
    assert "--orch-wheel" in (e.value.hint or "")


class PipWheel(ScriptedRunner):
    """Stands in for `pip wheel`: records argv and leaves one wheel in --wheel-dir."""

    def answer(self, argv: list[str]) -> Answer:
        dest = Path(argv[argv.index("--wheel-dir") + 1])
        (dest / f"torch-2.13.0-{len(self.calls)}-cp311-cp311-linux_x86_64.whl").write_bytes(b"t")
        return 0, "", ""


def test_the_wheelhouse_holds_the_named_wheel_and_is_rebuilt_when_it_changes(tmp_path: Path) -> None:
    stack = load_stack("cpu-gloo")
    src = orchwheel.resolve(wheel(tmp_path))
    argv = wheelhouse_argv(stack, tmp_path / "wh", src, python="py")
    assert argv[-1] == str(src.path) and f"orch=={__version__}" not in argv
    pip = PipWheel()
    prepare_wheelhouse(stack, tmp_path / "wh", pip, src)
    prepare_wheelhouse(stack, tmp_path / "wh", pip, src)
    assert len(pip.calls) == 1  # stamped: the same wheel is not built twice
    prepare_wheelhouse(stack, tmp_path / "wh", pip, orchwheel.resolve(wheel(tmp_path, body=b"new")))
    assert len(pip.calls) == 2
    assert (
        (tmp_path / "wh" / "REQUIREMENTS")
        .read_text()
        .endswith(f"# orch wheel {hashlib.sha256(b'new').hexdigest()}\n")
    )


def test_a_rebuilt_wheelhouse_holds_one_build_and_one_version_of_each_project(tmp_path: Path) -> None:
    """A rebuild goes to a fresh folder that replaces the old: no wheel of the earlier build stays
    beside the new one (pip would install the newest of two). A wheelhouse that holds two versions
    of a project (filled by several builds) is rebuilt although its stamp matches."""
    stack = load_stack("cpu-gloo")
    pip = PipWheel()
    dest = tmp_path / "wh"
    prepare_wheelhouse(stack, dest, pip, orchwheel.resolve(wheel(tmp_path)))
    first = sorted(p.name for p in dest.glob("*.whl"))
    prepare_wheelhouse(stack, dest, pip, orchwheel.resolve(wheel(tmp_path, body=b"new")))
    second = sorted(p.name for p in dest.glob("*.whl"))
    assert len(first) == len(second) == 1 and first != second
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".wh.")) == []  # no build left
    (dest / "cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl").write_bytes(b"c")
    (dest / "cryptography-51.0.1-cp311-abi3-manylinux_2_34_x86_64.whl").write_bytes(b"c")
    prepare_wheelhouse(stack, dest, pip, orchwheel.resolve(wheel(tmp_path, body=b"new")))
    assert len(pip.calls) == 3 and not list(dest.glob("cryptography-*"))


def test_the_nodes_install_every_wheel_of_the_wheelhouse_pinned(tmp_path: Path) -> None:
    """The stack's own requirements first, then each other project of the wheelhouse at its
    wheel's version (names compared as pip does: huggingface_hub is huggingface-hub)."""
    stack = load_stack("cpu-serve")
    for name in ("torch-2.13.0-cp311-cp311-linux_x86_64.whl", f"orch-{__version__}-py3-none-any.whl",
                 "huggingface_hub-2.4.0-py3-none-any.whl",
                 "cryptography-51.0.1-cp311-abi3-manylinux_2_34_x86_64.whl",
                 "Jinja2-3.1.6-py3-none-any.whl"):  # fmt: skip
        (tmp_path / name).write_bytes(b"w")
    pins = service.pinned_requirements(stack, tmp_path)
    named = service.requirements(stack)
    assert pins[: len(named)] == named
    assert sorted(pins[len(named) :]) == ["cryptography==51.0.1", "jinja2==3.1.6"]
    assert "huggingface-hub==2.4.0" in pins and not any(p.startswith("huggingface_hub") for p in pins)
