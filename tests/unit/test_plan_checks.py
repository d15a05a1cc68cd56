"""What `plan show` refuses before anything runs (issue 12, new user items 2, 4 and 10), and the
threshold size a step really runs (run_size)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.metrics.verdict import summarize, threshold_failures
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.plan import PlanOverrides
from orchestrator.models.results import CollRow, PlaceResult, run_size
from orchestrator.plan import expand_steps, load_plan, resolve_plan


def main_exit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    got = capsys.readouterr()
    return int(info.value.code or 0), got.out, got.err


def nodes(*vendors: str) -> Cluster:
    ns = [
        Node(name=f"n{i}", address=f"198.18.0.{10 + i}", gpu_vendor=v, gpus_per_node=8)  # type: ignore[arg-type]
        for i, v in enumerate(vendors, 1)
    ]
    return Cluster(source=Path("x.ini"), nodes=ns, groups={"all": [n.name for n in ns]})


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- 2: a threshold at a size collbench rounds ------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "size", "nranks", "want"),
    [
        ("all_gather", 1024, 3, 1008),  # 256 floats / 3 = 85 -> 84 (whole 16-byte blocks) x 3
        ("alltoall", 1024, 3, 1008),
        ("reduce_scatter", 1024, 4, 1024),
        ("all_reduce", 1024, 3, 1024),
        ("all_reduce", 1023, 3, 1020),  # whole floats
        ("sendrecv", 1 << 20, 7, 1 << 20),
    ],
)
def test_run_size_is_what_the_size_column_says(collective: str, size: int, nranks: int, want: int) -> None:
    assert run_size(collective, size, nranks) == want  # type: ignore[arg-type]


def _row(collective: str, size: int, nranks: int, busbw: float) -> CollRow:
    place = PlaceResult(time_us=10.0, algbw_gbs=busbw, busbw_gbs=busbw, wrong=0)
    return CollRow(
        collective=collective, size_bytes=size, count=size // 4, dtype="float", nranks=nranks,  # type: ignore[arg-type]
        out_of_place=place, in_place=place,
    )  # fmt: skip


def test_threshold_at_a_rounded_size_is_judged_on_the_row_that_ran(tmp_path: Path) -> None:
    plan = load_plan(
        write(
            tmp_path, "t.yaml",
            "sizes: {min: 1K, max: 4K, factor: 4}\n"
            "collectives: [all_gather]\n"
            "thresholds: {busbw: [{collective: all_gather, min_gbs: 1.0, size: 1K}]}\n",
        )
    )  # fmt: skip
    # collbench at 3 ranks prints 1008 and 4080 for the requested 1024 and 4096
    rows = [_row("all_gather", 1008, 3, 0.5), _row("all_gather", 4080, 3, 2.0)]
    reasons = threshold_failures(plan, rows, summarize(rows))
    assert len(reasons) == 1 and "no measurement" not in reasons[0]
    assert "busbw 0.500 GB/s < threshold 1 GB/s" in reasons[0] and "1008" in reasons[0]
    rows = [_row("all_gather", 1008, 3, 1.5), _row("all_gather", 4080, 3, 2.0)]
    assert threshold_failures(plan, rows, summarize(rows)) == []


def test_plan_show_refuses_a_threshold_at_a_size_the_plan_does_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = write(
        tmp_path, "bad.yaml",
        "sizes: {min: 1K, max: 16K, factor: 4}\n"
        "thresholds: {busbw: [{collective: all_gather, min_gbs: 1.0, size: 2K}]}\n",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"all_gather at 2048 B is not a size step n1xg1 runs"):
        expand_steps(load_plan(bad), nodes("none"))
    good = write(tmp_path, "good.yaml", bad.read_text().replace("size: 2K", "size: 1K"))
    steps = expand_steps(resolve_plan(good, PlanOverrides(nodes="1", gpus_per_node="3")), nodes("none"))
    assert [s.world_size for s in steps] == [3]
    code, _, err = main_exit(["plan", "show", "--plan", str(bad)], capsys)
    assert code == 2 and "2048 B is not a size" in err


# --- 4: mixed vendors, gpu_vendor unset ------------------------------------------------------------


@pytest.mark.parametrize("vendors", [("none", "amd"), ("amd", "nvidia"), ("nvidia", "none", "nvidia")])
def test_a_step_mixing_vendors_is_refused_naming_step_and_nodes(vendors: tuple[str, ...]) -> None:
    plan = load_plan("smoke")
    with pytest.raises(ConfigError) as info:
        expand_steps(plan, nodes(*vendors))
    message = str(info.value)
    assert f"step n2xg1 mixes gpu_vendor ({vendors[0]}: n1" in message
    assert f"{vendors[1]}: n2" in message and "mixed_vendors: true" in (info.value.hint or "")
    plan.mixed_vendors = True
    assert expand_steps(plan, nodes(*vendors))[-1].nodes == [f"n{i}" for i in range(1, len(vendors) + 1)]


def test_one_vendor_and_single_node_steps_are_fine() -> None:
    assert len(expand_steps(load_plan("smoke"), nodes("amd", "amd"))) == 2 * 4
    # 1-node steps cannot mix: only the 2-node step sees both
    plan = resolve_plan("smoke", PlanOverrides(nodes="1"))
    assert {tuple(s.nodes) for s in expand_steps(plan, nodes("amd", "nvidia"))} == {("n1",)}


def test_mixed_vendors_in_plan_show_and_unset_vendor_warned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = write(
        tmp_path, "mix.ini",
        "[all]\nlogin1 ansible_host=10.0.0.3\nnode1 ansible_host=10.0.0.1 gpu_vendor=amd gpus_per_node=8\n",
    )  # fmt: skip
    code, out, err = main_exit(["plan", "show", "-i", str(inv)], capsys)
    assert code == 2 and "step n2xg1 mixes gpu_vendor (none: login1; amd: node1)" in err
    assert "gpu_vendor is not set on 1 host (login1): taken as 'none'" in err
    code, out, err = main_exit(["plan", "show", "-i", str(inv), "--yaml"], capsys)
    assert code == 2 and out == "" and "mixes gpu_vendor" in err
    ok = write(
        tmp_path,
        "ok.yaml",
        load_plan("smoke").model_dump_json().replace('"mixed_vendors":false', '"mixed_vendors":true'),
    )
    code, out, err = main_exit(["plan", "show", "-i", str(inv), "--plan", str(ok)], capsys)
    assert code == 0 and "n2xg1" in out


# --- 10: --partition ---------------------------------------------------------------------------------


@pytest.mark.parametrize("view", [[], ["--yaml"]])
def test_partition_with_shell_refused_in_plan_show(
    view: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = main_exit(["plan", "show", "--partition", "gpu;rm -rf", *view], capsys)
    assert code == 2 and out == ""
    assert "--partition 'gpu;rm -rf'" in err and len(err.strip().splitlines()) == 1
    code, out, _ = main_exit(["plan", "show", "--partition", "gpu-a100.x", *view], capsys)
    assert code == 0 and "gpu-a100.x" in out


def test_partition_with_shell_refused_in_a_plan_file(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "sizes: {min: 8, max: 8}\npartition: 'gpu;rm -rf /'\n")
    with pytest.raises(ConfigError, match=r"partition"):
        load_plan(path)
