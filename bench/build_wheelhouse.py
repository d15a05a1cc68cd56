"""bench/build_wheelhouse.py — the wheels bench/gpu_check.sh installs on a machine with no index.

    python bench/build_wheelhouse.py [--dest bench/wheelhouse] [--python-version 3.12]
    python bench/build_wheelhouse.py --print-requirements

The GPU machine (shared/LAB-NOTES.md, "The GPU machine") reaches no package index: whatever
gpu_check.sh installs must travel with the working tree. This script, run where pip reaches an
index, puts into DEST (git-ignored):

- orch's own wheel, built from this checkout (`pip wheel --no-deps .`);
- every wheel of the requirements below and of their dependencies, for CPython X.Y on x86-64
  manylinux (binary wheels only), resolved once by pip (`pip install --dry-run --report`) and then
  downloaded one by one with `--no-deps`, so that the packages left out below never download;
- requirements.txt: the serving packages gpu_check.sh installs beside orch (the cpu-serve stack's
  pins); SHA256SUMS; and LEFT-OUT.txt, the resolved packages not carried and why.

Requirements: orch's dependencies as pyproject.toml states them, and the cpu-serve stack's
packages (orchestrator/playbooks/stacks/cpu-serve.yaml: transformers and tokenizers at the pins the
lab serves with, fastapi and uvicorn for `transformers serve`, and the rest of transformers'
serving extra). Both are read from their files here, never copied into this script.

Left out: torch and what it needs (nvidia-*, cuda-*, triton, sympy, mpmath, networkx) and numpy.
The GPU image has its own CUDA build of torch and numpy; carrying torch would be gigabytes, and
with the rest (numpy alone is 15 MiB) the wheelhouse was 65.9 MiB, over the device tool's 64 MiB
for the working tree and carried paths together. gpu_check.sh makes its venv see the image's
packages, so requirements on torch and numpy are met there.

Exit status: 0; 1 when pip fails; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACK = "cpu-serve"
# A name pip resolved that is not carried, matched on its normalised name (PEP 503).
# Each is in the GPU image (KINDS.md's package list for nvidia-h200: torch 2.11 with CUDA 13,
# numpy 2.5.2, sympy, networkx, mpmath) and large: carried, the wheelhouse was 65.9 MiB for 3.12.
LEFT_OUT = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|sympy|mpmath|networkx|numpy)$")
LEFT_OUT_WHY = "the GPU image has it (torch and its CUDA libraries, numpy); too large to carry"
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def orch_requirements(root: Path = ROOT) -> list[str]:
    """orch's run-time dependencies as pyproject.toml states them."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def serving_requirements(stack: str = STACK) -> list[str]:
    """The serving stack's packages (pinned), as its manifest states them."""
    sys.path.insert(0, str(ROOT))
    from orchestrator.stacks import load_stack

    s = load_stack(stack)
    if s.python is None:
        raise SystemExit(f"stack {stack} has no python section")
    return list(s.python.packages)


def target_flags(py: str) -> list[str]:
    major, minor = py.split(".")
    flags = ["--only-binary=:all:", "--python-version", py, "--implementation", "cp",
             "--abi", f"cp{major}{minor}", "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for p in PLATFORMS:
        flags += ["--platform", p]
    return flags


def pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        raise SystemExit(1)


def resolve(reqs: list[str], py: str) -> list[tuple[str, str]]:
    """(name, version) of every distribution pip would install for reqs on the target."""
    with tempfile.TemporaryDirectory(prefix="orch-wheelhouse-") as tmp:
        report = Path(tmp) / "report.json"
        pip("install", "--quiet", "--dry-run", "--ignore-installed", "--report", str(report),
            "--target", str(Path(tmp) / "target"), *target_flags(py), *reqs)  # fmt: skip
        doc = json.loads(report.read_text())
    return sorted((item["metadata"]["name"], item["metadata"]["version"]) for item in doc["install"])


def sha256sums(dest: Path) -> str:
    lines = []
    for f in sorted(dest.glob("*.whl")):
        lines.append(f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dest", type=Path, default=ROOT / "bench" / "wheelhouse")
    ap.add_argument("--python-version", default="3.12", help="the target's X.Y (the GPU image: 3.12)")
    ap.add_argument("--print-requirements", action="store_true", help="print what is resolved, and stop")
    a = ap.parse_args(argv)
    if not re.fullmatch(r"3\.\d+", a.python_version):
        print(f"error: --python-version {a.python_version!r} is not 3.X", file=sys.stderr)
        return 2
    orch_reqs, serve_reqs = orch_requirements(), serving_requirements()
    if a.print_requirements:
        print("\n".join(orch_reqs + serve_reqs))
        return 0
    dest: Path = a.dest
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest), str(ROOT))
    carried, left = [], []
    for name, version in resolve(orch_reqs + serve_reqs, a.python_version):
        (left if LEFT_OUT.match(normalise(name)) else carried).append(f"{name}=={version}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pins:
        pins.write("\n".join(carried) + "\n")
        pins.flush()
        pip("download", "--quiet", "--no-deps", "--dest", str(dest), *target_flags(a.python_version),
            "-r", pins.name)  # fmt: skip
    (dest / "requirements.txt").write_text("\n".join(serve_reqs) + "\n")
    (dest / "LEFT-OUT.txt").write_text("".join(f"{p}  # {LEFT_OUT_WHY}\n" for p in left))
    (dest / "SHA256SUMS").write_text(sha256sums(dest))
    size = sum(f.stat().st_size for f in dest.iterdir() if f.is_file())
    wheels = len(list(dest.glob("*.whl")))
    print(f"wheelhouse {dest}: {wheels} wheels, {size / 2**20:.1f} MiB, for CPython {a.python_version} "
          f"x86-64; left out: {', '.join(left) or 'nothing'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
