"""The node-side image builder (orchestrator/playbooks/roles/stack_image/files/stack_image.py): what the image
holds, and its idempotence (a tree that did not change is found by its hash, never rebuilt)."""

from __future__ import annotations

import importlib.util
import io
import os
import tarfile
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "orchestrator/playbooks/roles/stack_image/files/stack_image.py"
REPO = "localhost/orch-stack/t"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stack_image", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class FakeRuntime:
    """podman as the builder uses it: image inspect/tag/images/rmi, and import from stdin."""

    def __init__(self) -> None:
        self.images: dict[str, str] = {}  # ref -> id
        self.calls: list[list[str]] = []
        self.imported: dict[str, bytes] = {}

    def run(self, argv: list[str], **_kw: Any) -> Any:
        self.calls.append(argv)
        sub = argv[argv.index("--root=/s/root") + 1 :] if "--root=/s/root" in argv else argv[1:]
        if sub[:2] == ["image", "inspect"]:
            ref = sub[-1]
            found = ref in self.images
            return SimpleNamespace(returncode=0 if found else 125, stdout=self.images.get(ref, ""), stderr="")
        if sub[0] == "tag":
            self.images[sub[2]] = self.images[sub[1]]
        elif sub[0] == "images":
            return SimpleNamespace(returncode=0, stdout="\n".join(self.images), stderr="")
        elif sub[0] == "rmi":
            self.images.pop(sub[1], None)
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    def popen(self, argv: list[str], **_kw: Any) -> Any:
        self.calls.append(argv)
        fake = self
        ref = argv[-1]

        class Stdin(io.BytesIO):
            def close(self) -> None:
                fake.imported[ref] = self.getvalue()
                super().close()

        class Proc:
            stdin = Stdin()

            def wait(self) -> int:
                fake.images[ref] = f"id-{len(fake.imported)}"
                return 0

        return Proc()


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    mod = _load()
    prefix = tmp_path / "opt" / "venv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "torch" / "include").mkdir(parents=True)
    (prefix / "lib" / "torch" / "include" / "big.h").write_text("x" * 100)
    (prefix / "lib" / "torch" / "probe.py").write_text("print('hb')\n")
    (prefix / "bin" / "python").symlink_to("python3.11")
    stdlib = tmp_path / "stdlib"
    stdlib.mkdir()
    (stdlib / "os.py").write_text("# os\n")
    monkeypatch.setattr(mod, "interpreter_paths", lambda _py: ([], str(stdlib)))
    return mod, prefix


def _args(prefix: Path) -> Any:
    return SimpleNamespace(prefix=str(prefix), python=str(prefix / "bin/python"), repository=REPO,
                           runtime="podman", runtime_flag=["--root=/s/root"],
                           exclude=["lib/torch/include"])  # fmt: skip


def test_an_unchanged_tree_is_found_not_rebuilt(tree: tuple[ModuleType, Path]) -> None:
    mod, prefix = tree
    rt = FakeRuntime()
    first = mod.build(_args(prefix), rt.run, rt.popen)
    assert first["changed"] is True and first["image"].startswith(REPO + ":") and first["id"] == "id-1"
    assert set(rt.images) == {first["image"], f"{REPO}:provisioned"}
    # any Python run writes caches (and so touches folders): not a change of the tree
    (prefix / "lib" / "torch" / "__pycache__").mkdir()
    (prefix / "lib" / "torch" / "__pycache__" / "probe.cpython-311.pyc").write_bytes(b"pyc")
    again = mod.build(_args(prefix), rt.run, rt.popen)
    assert again == {**first, "changed": False, "bytes": None, "build_s": None, "files": first["files"] + 2}
    assert len(rt.imported) == 1


def test_a_changed_tree_gets_a_new_tag_and_the_old_one_goes(tree: tuple[ModuleType, Path]) -> None:
    mod, prefix = tree
    rt = FakeRuntime()
    first = mod.build(_args(prefix), rt.run, rt.popen)
    probe = prefix / "lib" / "torch" / "probe.py"
    probe.write_text("print('heartbeat')\n")
    os.utime(probe, ns=(1, 2))
    second = mod.build(_args(prefix), rt.run, rt.popen)
    assert second["changed"] is True and second["image"] != first["image"]
    assert set(rt.images) == {second["image"], f"{REPO}:provisioned"}
    assert rt.images[f"{REPO}:provisioned"] == second["id"]


def test_the_image_holds_the_tree_but_not_the_excluded_paths(tree: tuple[ModuleType, Path]) -> None:
    mod, prefix = tree
    rt = FakeRuntime()
    out = mod.build(_args(prefix), rt.run, rt.popen)
    with tarfile.open(fileobj=io.BytesIO(rt.imported[out["image"]])) as tar:
        names = {m.name: m for m in tar.getmembers()}
    rel = str(prefix).lstrip("/")
    assert f"{rel}/lib/torch/probe.py" in names and f"{rel}/lib/torch/include/big.h" not in names
    assert names[f"{rel}/bin/python"].issym() and names["tmp"].mode == 0o1777
    assert "etc/passwd" in names
    imp = next(c for c in rt.calls if "import" in c)
    assert imp[:2] == ["podman", "--root=/s/root"] and f"ENV PATH={prefix}/bin:/usr/bin:/bin" in imp


def test_symlinked_folders_are_kept_as_links(tmp_path: Path) -> None:
    """merged /usr: a library found at /lib/x/libc.so.6 is stored under usr/lib, with lib -> usr/lib."""
    mod = _load()
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "libc.so.6").write_text("elf")
    (tmp_path / "lib").symlink_to("usr/lib")
    got = mod.with_links(str(tmp_path / "lib" / "libc.so.6"))
    assert got == [str(tmp_path / p) for p in ("lib", "usr/lib", "usr/lib/libc.so.6")]
