"""`orch stragglers` on the 3-node lab: the pair matrix through Slurm, one 2-node sendrecv step
per pair in 3 rounds, kept in the run folder and drawn in the HTML report.

Three nodes give each node 2 partners, one short of the rule's 3 (docs/isolation.md): the matrix
is run, kept and drawn, the nodes are "not judged" and orch exits 1. With node3's fab0 throttled
at 20 mbit, node3's two pairs are the slowest of the matrix. Naming a straggler needs 4 nodes of
a kind (the 8-node lab).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from labfaults import throttled

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
ORCH = [sys.executable, "-m", "orchestrator"]
ARGS = ["--size", "1M", "--iters", "5", "--timeout", "30"]


def _orch(lab: Lab, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ORCH, *args], capture_output=True, text=True, env=lab.env, timeout=timeout, check=False, cwd=REPO
    )


def _matrix(lab: Lab, out: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, object], Path]:
    proc = _orch(lab, "stragglers", "-i", str(lab.inventory), *ARGS, "--out", str(out))
    runs = [p for p in out.iterdir() if p.is_dir()]
    assert len(runs) == 1, proc.stdout + proc.stderr
    return proc, json.loads((runs[0] / "stragglers.json").read_text()), runs[0]


def test_the_pair_matrix_runs_through_slurm_is_drawn_and_a_throttled_node_has_the_slowest_pairs(
    lab: Lab, tmp_path: Path
) -> None:
    """One matrix (CI time), with node3's fab0 at 20 mbit: every pair runs, in 3 rounds, and is
    kept and drawn; node3's pairs are the slowest."""
    with throttled(lab, "node3", tmp_path / "faults"):
        proc, res, run_dir = _matrix(lab, tmp_path / "slow")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 3 nodes: measured, not judged
    assert "round 1/3:" in proc.stderr and "round 3/3:" in proc.stderr
    assert "every pair: 3 pairs in 3 rounds" in proc.stdout
    assert "not judged: node1, node2, node3" in proc.stdout
    assert all(p["figure"] for p in res["pairs"]), res["pairs"]  # type: ignore[attr-defined]
    rep = _orch(lab, "report", str(run_dir), "--format", "html")
    assert rep.returncode == 0, rep.stderr
    html = (run_dir / "report.html").read_text()
    assert 'data-kind="heatmap"' in html and "orch stragglers" in html and "not judged" in html
    fig = {frozenset((p["a"], p["b"])): p["figure"] for p in res["pairs"]}  # type: ignore[attr-defined]
    fast = fig[frozenset(("node1", "node2"))]
    assert fig[frozenset(("node1", "node3"))] > fast and fig[frozenset(("node2", "node3"))] > fast, fig
    print(f"\nnode3 at 20 mbit: {sorted((sorted(k), round(v)) for k, v in fig.items())} us; {proc.stdout}")
