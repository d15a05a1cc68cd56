"""workloads/precompile: after `pip install --no-compile`, the bytecode of what jobs import is
written once (with PYTHONDONTWRITEBYTECODE in force, as in a CI shell), a second run writes
nothing (the role's changed=false), a module the venv lacks is named: required ones stop the
provisioning, optional ones (an engine the stack does not serve with) are listed as absent."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.workloads import precompile as P


def _forget() -> None:
    """Drop the fake package from sys.modules, so that the next import reads its files again."""
    for name in [m for m in sys.modules if m == "pcfake" or m.startswith("pcfake.")]:
        del sys.modules[name]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site"
    pkg = root / "pcfake"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text("from pcfake import dep\nVALUE = dep.VALUE + 1\n")
    (pkg / "dep.py").write_text("VALUE = 41\n")
    (pkg / "unused.py").write_text("VALUE = 0\n")
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield root
    _forget()



def test_what_a_job_imports_is_compiled_once_and_nothing_else(site: Path) -> None:
    out = P.precompile(["pcfake.job"], ["pcfake_absent.serve"], [site])
    cache = sorted(p.name.split(".")[0] for p in (site / "pcfake" / "__pycache__").glob("*.pyc"))
    assert cache == ["__init__", "dep", "job"], cache  # written against dont_write_bytecode; unused.py not
    assert out["changed"] is True and out["pyc"] == 3, out
    assert out["modules"] == ["pcfake.job"] and out["absent"] == ["pcfake_absent.serve"], out
    _forget()
    again = P.precompile(["pcfake.job"], [], [site])
    assert again["changed"] is False and again["pyc"] == 0, again


def test_a_required_module_the_venv_lacks_stops_naming_it(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert P.main(["--module", "pcfake.job", "--module", "pcfake.gone", "--optional", "x_absent"]) == 1
    assert "pcfake.gone" in capsys.readouterr().err
    _forget()
    assert P.main(["--module", "pcfake.job", "--optional", "x_absent"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["modules"] == ["pcfake.job"] and printed["absent"] == ["x_absent"], printed


def test_the_default_list_names_every_workload_module_and_the_node_side_commands() -> None:
    names = P.workloads()
    assert "orchestrator.workloads.collbench" in names and "orchestrator.workloads.probe" in names
    assert "orchestrator.workloads.precompile" not in names
    assert {"torch", "torch.distributed", "orchestrator.cli.check"} <= set(P.REQUIRED)
