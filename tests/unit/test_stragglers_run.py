"""`orch stragglers`: the round-robin schedule and its sample, and the run end to end over a
stand-in scheduler (each pair a pipeline step), judged by the robust rule, with the heatmap in
the HTML report rebuilt from the run folder."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml
from fakes import InstantScheduler

import orchestrator.runs.executor as executor
import orchestrator.runs.stragglers as st
from orchestrator.errors import ConfigError
from orchestrator.models.requests import StragglersRequest
from orchestrator.report.html import render_html
from orchestrator.runs.resume import resume
from orchestrator.scheduler.base import JobSpec
from orchestrator.store.load import load_run

# rank 0 of real collbench runs (SOURCE.md beside them). a-vs-a: broadcast and sendrecv 1M..64M,
# sendrecv at 64 MiB (the largest size: the step's summary) p50 per iteration 12085-12302 us over
# runs 1-5. a-vs-a-2ranks: all_reduce 1M..16M, at 16 MiB p50 run5 26341 us, run6 54070 us.
FIX = Path(__file__).parents[1] / "fixtures" / "collbench" / "a-vs-a"
EVEN = [FIX / f"run{i}-rank0.log" for i in range(1, 6)]
FIX2 = FIX.parent / "a-vs-a-2ranks"
FAST, SLOW = FIX2 / "run5-rank0.log", FIX2 / "run6-rank0.log"


def test_round_robin_every_pair_once_in_disjoint_rounds() -> None:
    for n in range(2, 12):
        nodes = [f"n{i}" for i in range(n)]
        rounds = st.round_robin(nodes)
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == sorted(itertools.combinations(nodes, 2))  # each pair once, ordered
        assert len(rounds) == (n - 1 if n % 2 == 0 else n)
        for r in rounds:
            members = [x for p in r for x in p]
            assert len(members) == len(set(members))  # disjoint
            assert len(r) == n // 2
    assert st.round_robin(["a"]) == []
    with pytest.raises(ValueError, match="twice"):
        st.round_robin(["a", "b", "a"])


@pytest.mark.parametrize(("n", "k"), [(8, 3), (9, 3), (64, 4), (65, 5), (1024, 3), (5, 7)])
def test_sample_is_bounded_and_covers_every_node(n: int, k: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = st.sample_rounds(nodes, k, seed=7)
    pairs = [p for r in rounds for p in r]
    assert len(pairs) == len(set(pairs))
    count = {x: 0 for x in nodes}
    for a, b in pairs:
        count[a] += 1
        count[b] += 1
    want = min(k, n - 1)
    assert min(count.values()) >= want
    assert len(rounds) <= want + 1 and len(pairs) <= (want + 1) * (n // 2)
    if n % 2 == 0:  # even: exactly k rounds, every node in exactly k pairs
        assert len(rounds) == want and set(count.values()) == {want}
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    # seeded: the same seed gives the same sample, another seed (almost surely) another
    assert st.sample_rounds(nodes, k, seed=7) == rounds
    if n > 8:
        assert st.sample_rounds(nodes, k, seed=8) != rounds


class PairStandIn(InstantScheduler):
    """Jobs end at once, COMPLETED, with a real collbench log chosen by the pair's nodes."""

    def __init__(self, log_of: dict[frozenset[str], Path] | None, slow: set[str]) -> None:
        super().__init__()
        self.log_of, self.slow = log_of, slow

    def log_for(self, spec: JobSpec) -> Path | None:
        if self.log_of is not None:
            return self.log_of[frozenset(spec.nodes)]
        return SLOW if self.slow & set(spec.nodes) else FAST


def _inventory(tmp_path: Path, n: int) -> Path:
    inv = tmp_path / "inv.yml"
    hosts = {
        f"node{i}": {"ansible_host": f"198.18.0.{10 + i}", "gpu_vendor": "none"} for i in range(1, n + 1)
    }
    shared = {"orch_shared_dirs": str(tmp_path)}  # the run folder is the nodes' own: nothing over SSH
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": shared}}))
    return inv


def _run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    n: int,
    *,
    slow: set[str] = frozenset(),  # type: ignore[assignment]
    log_of: dict[frozenset[str], Path] | None = None,
    size: int = 16 * 2**20,
    collective: str = "all_reduce",
    **kw: object,
) -> tuple[st.MatrixRun, PairStandIn, list[tuple[int, int, int]]]:
    fake = PairStandIn(log_of, set(slow))
    monkeypatch.setattr(st, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    req = StragglersRequest(
        inventory=_inventory(tmp_path, n), size=size, collective=collective, out_dir=tmp_path / "runs", **kw
    )  # type: ignore[arg-type]
    seen: list[tuple[int, int, int]] = []
    result = st.run_stragglers(req, on_round=lambda i, total, res: seen.append((i, total, len(res))))
    return result, fake, seen


def test_one_slow_node_is_named_and_no_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, fake, seen = _run(tmp_path, monkeypatch, 6, slow={"node4"})
    assert result.stragglers == ["node4"] and result.exit_code == 1 and result.status == "failed"
    assert result.not_judged == [] and result.failed_pairs == []
    # 15 pairs in 5 rounds of 3 disjoint 2-node steps, each a pipeline step of its own folder
    assert len(result.pairs) == 15 and result.rounds == 5 and [s[2] for s in seen] == [3] * 5
    assert [s[0] for s in seen] == [1, 2, 3, 4, 5] and {s[1] for s in seen} == {5}
    assert sorted(tuple(s.nodes) for s in fake.specs.values()) == list(
        itertools.combinations([f"node{i}" for i in range(1, 7)], 2)
    )
    assert all(len(s.nodes) == 2 for s in fake.specs.values())
    assert all((Path(s.workdir) / "result.json").exists() for s in fake.specs.values())
    rep = result.kinds[0].report
    assert rep is not None and rep.stragglers[0].node == "node4" and len(rep.stragglers[0].pairs) == 5
    assert rep.centre == pytest.approx(26341, rel=0.01) and rep.stragglers[0].score == pytest.approx(
        54070, rel=0.01
    )
    lines = st.straggler_lines(result)
    assert any(
        "straggler node4" in line and "over 5 pairs" in line and "x the median" in line for line in lines
    )
    # the run folder: journal, stragglers.json, report.md, and the heatmap from the folder alone
    events = [json.loads(x) for x in (result.run_dir / "journal.jsonl").read_text().splitlines()]
    started = next(e for e in events if e["event"] == "run_started")
    assert started["kind"] == "stragglers" and len(started["steps"]) == 15
    assert [e["round"] for e in events if e["event"] == "stragglers_round"] == [1, 2, 3, 4, 5]
    assert next(e for e in events if e["event"] == "stragglers_result")["stragglers"] == ["node4"]
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 1
    saved = st.MatrixRun.model_validate_json((result.run_dir / "stragglers.json").read_text())
    assert saved.stragglers == ["node4"] and len(saved.pairs) == 15
    assert "straggler node4" in (result.run_dir / "report.md").read_text()
    rec = load_run(result.run_dir)
    assert rec.kind == "stragglers" and len(rec.steps) == 15
    html = render_html(rec, result.run_dir)
    assert "<svg" in html and 'class="stragglers-section"' in html and "orch stragglers" in html
    assert html.count("flagged") >= 1 and "node4" in html.split('class="stragglers"')[1].split("</ul>")[0]
    with pytest.raises(ConfigError, match="not resumed"):
        resume(result.run_dir, open_shells=lambda _c: None)  # type: ignore[arg-type,return-value]


def test_a_clean_matrix_names_nobody(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every pair a real run at 64 MiB (five runs spread 1.8 %), assigned in turn
    nodes = [f"node{i}" for i in range(1, 8)]
    log_of = {frozenset(p): EVEN[i % 5] for i, p in enumerate(itertools.combinations(nodes, 2))}
    result, _, seen = _run(
        tmp_path, monkeypatch, 7, log_of=log_of, size=64 * 2**20, collective="sendrecv", concurrent=True
    )
    assert result.stragglers == [] and result.exit_code == 0 and result.status == "accepted"
    assert result.mode == "concurrent" and result.rounds == 7 and len(result.pairs) == 21
    assert [s[2] for s in seen] == [3] * 7  # odd N: one node sits each round out
    html = render_html(load_run(result.run_dir), result.run_dir)
    assert "<svg" in html and "no straggler" in html


def test_a_sample_is_stated_and_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, fake, _ = _run(tmp_path, monkeypatch, 10, slow={"node7"}, sample=3, seed=5)
    assert result.sample == 3 and result.seed == 5 and result.pairs_all == 45
    assert len(result.pairs) == 15 and len(fake.specs) == 15 and result.rounds == 3
    assert "sample: 15 of 45 pairs in 3 rounds" in result.sample_line()
    assert result.stragglers == ["node7"]


def test_three_nodes_run_but_are_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, _, _ = _run(tmp_path, monkeypatch, 3)
    assert result.rounds == 3 and len(result.pairs) == 3 and result.stragglers == []
    assert result.not_judged == ["node1", "node2", "node3"] and result.exit_code == 1
    assert "not judged" in "\n".join(st.straggler_lines(result))
    html = render_html(load_run(result.run_dir), result.run_dir)  # the matrix is drawn all the same
    assert 'data-kind="heatmap"' in html and "not judged" in html and "flagged" not in html


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nodeX"):
        st.run_stragglers(StragglersRequest(inventory=_inventory(tmp_path, 3), nodes=["node1", "nodeX"]))
    with pytest.raises(ConfigError, match="at least 2 nodes"):
        st.run_stragglers(StragglersRequest(inventory=_inventory(tmp_path, 3), nodes=["node1"]))
    with pytest.raises(ValueError, match="greater than or equal to 3"):
        StragglersRequest(inventory=tmp_path / "inv.yml", sample=2)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as e:
        main(list(args))
    got = capsys.readouterr()
    return (e.value.code if isinstance(e.value.code, int) else 1), got.out, got.err


def test_the_command_and_its_html_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [f"node{i}" for i in range(1, 5)]
    log_of = {frozenset(p): EVEN[i % 5] for i, p in enumerate(itertools.combinations(nodes, 2))}
    monkeypatch.setattr(st, "make_scheduler", lambda *_a, **_k: PairStandIn(log_of, set()))
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    inv, runs = _inventory(tmp_path, 4), tmp_path / "runs"
    code, out, err = _cli(
        capsys, "stragglers", "-i", str(inv), "--size", "64M", "--iters", "3", "--out", str(runs)
    )
    assert code == 0, err
    assert "round 1/3:" in err and "round 3/3:" in err and "rounds run sequential" in err
    assert "every pair: 6 pairs in 3 rounds" in out and "no straggler" in out and "MAD" in out
    run_dir = next(p for p in runs.iterdir() if p.is_dir())
    code, _, err = _cli(capsys, "report", str(run_dir), "--format", "html")
    assert code == 0, err
    html = (run_dir / "report.html").read_text()
    assert "<svg" in html and "stragglers-section" in html and "orch stragglers" in html
    code, _, err = _cli(capsys, "stragglers", "-i", str(inv), "--sample", "2", "--out", str(runs))
    assert code == 2 and "--sample" in err
    code, _, err = _cli(
        capsys, "stragglers", "-i", str(inv), "--collective", "all_reduce", "--out", str(runs)
    )
    assert code == 2
