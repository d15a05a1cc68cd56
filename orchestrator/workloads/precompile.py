"""Write the bytecode of what the stack's jobs run, once, on the node, after provisioning.

    python -m orchestrator.workloads.precompile [--module NAME ...]

roles/workload_env installs the stack with ``pip install --no-compile``: pip would byte-compile
every file of every package (cpu-gloo: about 7,500 files, 167 MB, most never imported by a job:
torch's test and compiler trees, ansible's modules), 70 % of the install (one node here: 26.5 s
with, 8.0 s without). This step compiles what jobs run instead:

- all of orch's own package (compileall: a few hundred files; its CLI imports per command);
- the modules that jobs and node-side commands import, by importing them: torch and
  torch.distributed, torch's elastic launcher (the probe under torchrun), every module of
  orchestrator.workloads (what jobs run with ``python -m``, and pydantic, numpy... behind them),
  the commands a prolog and a health check run (`orch check`, `orch health`), and, where the
  stack has transformers, its ``serve`` command (the lab's engine).

Imports run with bytecode writing on: a job's environment may carry PYTHONDONTWRITEBYTECODE (CI
shells do), and Python would then compile the same modules again at every start. Anything else a
job imports is compiled on its first import, as Python does.

Prints one JSON line: {"changed": bool (new .pyc files written), "pyc": N (written), "modules":
[imported], "absent": [optional modules the venv lacks], "seconds": S}. Exits 1, naming the module,
when a required module fails to import: the venv is broken and the provisioning stops there.
"""

from __future__ import annotations

import argparse
import compileall
import importlib
import importlib.util
import json
import os
import pkgutil
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

# imported by every stack's jobs and node-side commands (a prolog's `orch check --quick`, the
# health check's `orch health --local`), with every module of orchestrator.workloads (workloads()):
# a failure here is a broken venv
REQUIRED = ("torch", "torch.distributed", "torch.distributed.run", "orchestrator.cli.check",
            "orchestrator.cli.health")  # fmt: skip
# imported where the venv has them (an engine the stack serves with)
OPTIONAL = ("transformers.cli.transformers", "transformers.cli.serve")


def workloads() -> tuple[str, ...]:
    """Every module of orchestrator.workloads (what jobs run with ``python -m``), this one aside."""
    here = Path(__file__).resolve().parent
    return tuple(
        f"{__package__}.{m.name}" for m in pkgutil.iter_modules([str(here)]) if m.name != "precompile"
    )


def _pyc_count(roots: Iterable[Path]) -> int:
    n = 0
    for root in roots:
        for folder, _dirs, files in os.walk(root):
            if folder.endswith("__pycache__"):
                n += sum(1 for f in files if f.endswith(".pyc"))
    return n


def _present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # a parent package is missing
        return False


def precompile(required: Sequence[str], optional: Sequence[str], roots: Sequence[Path]) -> dict[str, object]:
    """Compile orch's package and import the modules; the outcome as printed."""
    t0 = time.monotonic()
    sys.dont_write_bytecode = False
    before = _pyc_count(roots)
    package = Path(__file__).resolve().parents[1]
    compileall.compile_dir(str(package), quiet=1, workers=1)
    imported: list[str] = []
    absent: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch without numpy warns; nothing to act on here
        for name in [*required, *(m for m in optional if m not in required)]:
            if name not in required and not _present(name):
                absent.append(name)
                continue
            importlib.import_module(name)
            imported.append(name)
    written = _pyc_count(roots) - before
    return {
        "changed": written > 0,
        "pyc": written,
        "modules": imported,
        "absent": absent,
        "seconds": round(time.monotonic() - t0, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m orchestrator.workloads.precompile", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--module", action="append", default=None, help="a required module (repeatable; default: "
                    + ", ".join(REQUIRED) + ", and every module of orchestrator.workloads)")  # fmt: skip
    ap.add_argument("--optional", action="append", default=None, help="an optional module (repeatable)")
    args = ap.parse_args(argv)
    required = tuple(args.module) if args.module else (*REQUIRED, *workloads())
    optional = tuple(args.optional) if args.optional is not None else OPTIONAL
    venv = Path(sys.prefix)  # the venv's own folders: site-packages (not the controller's checkout)
    roots = sorted(
        {Path(p) for p in sys.path if p and Path(p).resolve().is_relative_to(venv) and Path(p).is_dir()}
    )
    try:
        out = precompile(required, optional, roots)
    except ImportError as e:
        print(f"precompile: {e.name or e}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
