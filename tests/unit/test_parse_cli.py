"""`orch parse` end to end through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.parse import detect_kind, parse_file
from orchestrator.scheduler.base import JobStatus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_detect_kinds() -> None:
    assert (
        detect_kind((FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt").read_text())
        == "rccl-tests"
    )
    assert detect_kind((FIXTURES / "nccl-tests/all_reduce-a100x8-legacy.txt").read_text()) == "nccl-tests"
    assert detect_kind("JobId=12 JobName=x\n   JobState=RUNNING Reason=None\n") == "scontrol"


def test_collective_from_file_name() -> None:
    parsed = parse_file(FIXTURES / "nccl-tests/reduce_scatter-a100x8-legacy.txt")
    assert parsed.run is not None and parsed.run.collective == "reduce_scatter"
    parsed = parse_file(FIXTURES / "nccl-tests/reduce-a100x8-legacy.txt")
    assert parsed.run is not None and parsed.run.collective == "reduce"


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["parse", str(FIXTURES / "nccl-tests/all_reduce-gh200x2-2.17.8-wrong.txt")], capsys)
    assert rc == 0
    assert "busbw" in out and "#wrong total 128" in out


def test_json_output_marks_truncated(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "nccl-tests/all_reduce-gh200x8-2.17.8-aborted.txt"
    rc, out, _ = _run(["parse", "--json", str(path)], capsys)
    assert rc == 0
    doc = json.loads(out)
    (run,) = doc[0]["runs"]
    assert run["truncated"] is True and run["aborted"]


def test_json_has_recomputed_busbw(capsys: pytest.CaptureFixture[str]) -> None:
    path = FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt"
    rc, out, _ = _run(["parse", "--json", "--kind", "rccl-tests", str(path)], capsys)
    doc = json.loads(out)
    (run,) = doc[0]["runs"]
    assert rc == 0 and len(run["recomputed_busbw"]) == len(run["rows"])


def test_unparseable_file_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("just some notes\n")
    rc, _, err = _run(["parse", str(bad)], capsys)
    assert rc == 2
    # one message; the stderr console may wrap it at the terminal width (common.err has no soft_wrap)
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "notes.txt" in err and "cannot tell what tool wrote this file" in " ".join(err.split())


# --- every kind told by the text itself -------------------------------------------------------------

DETECTED = {
    "smi/amd-smi-static.txt": "amd-smi",
    "smi/amd-smi-version.txt": "amd-smi",
    "smi/amd-smi-list-mi210.txt": "amd-smi",
    "smi/rocm-smi-concise.txt": "rocm-smi",
    "smi/rocm-smi-productname.json": "rocm-smi",
    "smi/rocm-smi-showid-mi300x.txt": "rocm-smi",
    "smi/rocm-smi-showid-mi300a.txt": "rocm-smi",
    "smi/rocm-smi-concise-mi300a.txt": "rocm-smi",
    "smi/nvidia-smi-table-titanxp.txt": "nvidia-smi",
    "smi/nvidia-smi-table-331.txt": "nvidia-smi",
    "smi/nvidia-smi-table-a100x2.txt": "nvidia-smi",
    "smi/nvidia-smi-q.txt": "nvidia-smi-q",
    "smi/nvidia-smi-query-gpu.csv": "nvidia-smi-csv",
    "smi/nvidia-smi-topo-m.txt": "nvidia-smi-topo",
    "smi/nvidia-smi-topo-m-nic.txt": "nvidia-smi-topo",
    "smi/ibv_devinfo-mlx4-infiniband.txt": "ibv_devinfo",
    "smi/ibv_devinfo-mlx5-roce.txt": "ibv_devinfo",
    "smi/ibdev2netdev-cx7-bond.txt": "ibdev2netdev",
    "smi/rdma-link-cx6dx.txt": "rdma-link",
    "collbench/smoke-n1xg4-rank0.log": "collbench",
    "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt": "rccl-tests",
    **{f"nccl-tests/{p.name}": "nccl-tests" for p in sorted((FIXTURES / "nccl-tests").glob("*.txt"))},
    **{f"slurm/{p.name}": p.name.split("-")[0] for p in sorted((FIXTURES / "slurm").glob("*-*.txt"))},
    "serving/vllm-bench-llama3b-l40s-10qps.txt": "vllm-bench",
    "serving/vllm-bench-qwen3-8b-jetson-thor-c8.txt": "vllm-bench",
    "serving/vllm-bench-glm52-mtp5-spec-decode.txt": "vllm-bench",
    "serving/vllm-save-result-llama3b-l40s.jsonl": "vllm-bench-json",
    "serving/vllm-save-result-llama3b-l40s-10qps.json": "vllm-bench-json",
    "serving/sglang-bench-deepseek-ocr.txt": "sglang-bench",
    "serving/sglang-bench-llama70b-h200.jsonl": "sglang-bench-json",
    "serving/sglang-bench-issue12389-c16.jsonl": "sglang-bench-json",
    "serving/guidellm-benchmarks-stripped.json": "guidellm",
    "serving/guidellm-benchmarks-stripped.yaml": "guidellm",
    "serving/guidellm-0.8.1-report-v2-c1-c4.json": "guidellm",
    "serving/mlperf-summary-llama2-70b-server-h100.txt": "mlperf-summary",
    "serving/mlperf-summary-singlestream-early-stopping.txt": "mlperf-summary",
    "slurm/sacct-CANCELLED-srun-step-signal.txt": "sacct",
    "serving/genai-perf-console-dynamo-streaming.txt": "genai-perf",
    "serving/genai-perf-console-multiturn-no-ttft.txt": "genai-perf",
    "serving/genai-perf-console-goodput-2024.txt": "genai-perf",
    "serving/genai-perf-export-c100-streaming.json": "genai-perf-json",
    "serving/guidellm-0.8.1-console-c1-c4.txt": "guidellm-console",
    "serving/guidellm-0.3.0-console-stripped.txt": "guidellm-console",
    "serving/guidellm-0.1.0-console-inf2-sweep.txt": "guidellm-console",
    "serving/aiperf-export-gpt-oss-20b-c100.json": "genai-perf-json",
    "serving/mlperf-summary-server-invalid-issue1788.txt": "mlperf-summary",
    "diag/dcgmi-diag-r3-1gpu.json": "dcgmi-diag-json",
    "diag/gpu-burn-a100x8.txt": "gpu-burn",
    "diag/nvbandwidth-gh200-v0.6.txt": "nvbandwidth",
    "diag/ib_write_bw-roce-postlist.txt": "perftest",
    "diag/transferbench-v1.69-dma-htod.txt": "transferbench",
    "diag/rvs-gst-mi355x-1.6.75.txt": "rvs",
    "diag/dcgmi-diag-table-3.3.8.txt": "dcgmi-diag",
    "diag/dcgmi-diag-table-3.3.9-r3-a10g-fail.txt": "dcgmi-diag",
    "diag/rvs-iet-mi355x-1.6.75.txt": "rvs",
    "diag/rvs-pebb-mi355x-1.6.75.txt": "rvs",
    "diag/rvs-pbqt-mi355x-1.6.75.txt": "rvs",
    "diag/rvs-babel-mi355x-1.6.75.txt": "rvs",
}


def test_every_fixture_kind_is_listed() -> None:
    from orchestrator.parse import PARSERS

    assert set(DETECTED.values()) == set(PARSERS)


@pytest.mark.parametrize("name", sorted(DETECTED))
def test_fixture_detected_without_kind(name: str) -> None:
    parsed = parse_file(FIXTURES / name)
    assert parsed.kind == DETECTED[name]
    assert parsed.runs or parsed.jobs or parsed.data or parsed.serving


def test_versions_and_gpus_read_without_kind() -> None:
    """The figures each text states (read off the fixtures), through detection."""
    amd = parse_file(FIXTURES / "smi/amd-smi-version.txt").data
    assert (amd.rocm, amd.driver) == ("7.0.2", "6.14.14")
    rocm = parse_file(FIXTURES / "smi/rocm-smi-showid-mi300x.txt").data
    assert len(rocm.gpus) == 16 and rocm.gpus[3].name == "AMD Instinct MI300X"
    mi300a = parse_file(FIXTURES / "smi/rocm-smi-showid-mi300a.txt").data
    assert [g.name for g in mi300a.gpus] == ["AMD Instinct MI300A"] * 3
    nv = parse_file(FIXTURES / "smi/nvidia-smi-table-a100x2.txt").data
    assert (nv.driver, nv.cuda, len(nv.gpus)) == ("580.126.09", "13.0", 2)
    q = parse_file(FIXTURES / "smi/nvidia-smi-q.txt").data
    assert (q.driver, q.cuda, q.gpus[0].name) == ("566.36", "12.7", "NVIDIA GeForce RTX 4070 Laptop GPU")
    static = parse_file(FIXTURES / "smi/amd-smi-static.txt").data
    assert (static.driver, static.gpus[0].name) == ("6.18.3", "AMD Instinct MI350X")
    topo = parse_file(FIXTURES / "smi/nvidia-smi-topo-m.txt").data
    assert [g.name for g in topo.gpus] == ["GPU0", "GPU1"]


def test_unknown_text_names_what_was_tried(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "mystery.log"
    bad.write_text("Fan: 30%\nTemp: 41C\n")
    rc, _, err = _run(["parse", str(bad)], capsys)
    msg = " ".join(err.split())
    assert rc == 2 and "Traceback" not in err
    assert "mystery.log" in msg and "tried:" in msg and "nvidia-smi-topo" in msg and "rdma-link" in msg


def test_text_of_two_tools_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    both = tmp_path / "paste.txt"
    both.write_text(
        (FIXTURES / "smi/amd-smi-version.txt").read_text()
        + (FIXTURES / "smi/rocm-smi-concise.txt").read_text()
    )
    rc, _, err = _run(["parse", str(both)], capsys)
    msg = " ".join(err.split())
    assert rc == 2 and "more than one tool (amd-smi, rocm-smi)" in msg and "Traceback" not in err


# --- benchmark logs -------------------------------------------------------------------------------


def test_collbench_log_reads_as_one_run_per_collective() -> None:
    path = FIXTURES / "collbench/smoke-n1xg4-rank0.log"
    text = path.read_text()
    programs = [
        ln.split(":", 1)[1].split()[0] for ln in text.splitlines() if "Collective test starting" in ln
    ]
    parsed = parse_file(path)
    assert len(parsed.runs) == len(programs) == 6 and parsed.run is None
    assert [f"{r.collective}_perf" for r in parsed.runs] == programs
    for run in parsed.runs:
        assert run.nranks == 4 and len(run.rows) == 6
        assert {row.collective for row in run.rows} == {run.collective}
        assert not run.truncated  # each test has its own footer


def test_collbench_table_has_a_collective_column(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["parse", str(FIXTURES / "collbench/smoke-n1xg4-rank0.log")], capsys)
    assert rc == 0 and "collective" in out
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"):
        assert f"collbench {coll} n=4" in out


def test_file_name_naming_two_collectives_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An all_gather log (old nccl-tests: no program name in it) named after two collectives."""
    log = tmp_path / "allreduce-vs-allgather.txt"
    log.write_text((FIXTURES / "nccl-tests/all_gather-a100x8-legacy.txt").read_text())
    rc, _, err = _run(["parse", str(log)], capsys)
    msg = " ".join(err.split())
    assert rc == 2 and "Traceback" not in err
    assert "names 2 (all_reduce, all_gather)" in msg and "--collective" in msg
    rc, out, _ = _run(["parse", "--json", "--collective", "all_gather", str(log)], capsys)
    (run,) = json.loads(out)[0]["runs"]
    assert rc == 0 and run["collective"] == "all_gather"
    # read as all_gather, the recomputed busbw agrees with the printed one (all_reduce would double it)
    for row, (oop, _ip) in zip(run["rows"], run["recomputed_busbw"], strict=True):
        assert abs(oop - row["out_of_place"]["busbw_gbs"]) <= 0.01 + 0.01 * row["out_of_place"]["busbw_gbs"]


def test_nranks_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log without its device lines: the rank count must be given."""
    text = (FIXTURES / "nccl-tests/all_gather-a100x8-legacy.txt").read_text()
    log = tmp_path / "all_gather.txt"
    log.write_text("".join(ln for ln in text.splitlines(keepends=True) if " Rank " not in ln))
    rc, _, err = _run(["parse", str(log)], capsys)
    assert rc == 2 and "--nranks" in err
    rc, out, _ = _run(["parse", "--json", "--nranks", "8", str(log)], capsys)
    (run,) = json.loads(out)[0]["runs"]
    assert rc == 0 and run["nranks"] == 8 and {r["nranks"] for r in run["rows"]} == {8}


@pytest.mark.parametrize(
    "args", [["--collective", "allreduce_fast"], ["--nranks", "0"], ["--kind", "nosuch"], ["--fields", ","]]
)
def test_bad_option_values_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(["parse", *args, str(FIXTURES / "nccl-tests/all_gather-a100x8-legacy.txt")], capsys)
    assert rc == 2 and "Traceback" not in err and err.count("error:") == 1


# --- sacct field order ----------------------------------------------------------------------------


def _reordered(lines: list[str], order: list[int]) -> list[str]:
    return ["|".join(ln.split("|")[k] for k in order) for ln in lines]


def test_sacct_custom_order_with_header(tmp_path: Path) -> None:
    """The recorded lines with their fields put in another order, under the header sacct prints."""
    from orchestrator.scheduler.slurm_state import SACCT_FIELDS

    lines = [ln for ln in (FIXTURES / "slurm/sacct-FAILED-exit3.txt").read_text().splitlines()[1:] if ln]
    order = [1, 9, 0, 3, 2, 4, 5, 6, 7, 8]  # State|JobName|JobID|Elapsed|ExitCode|...
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join(_reordered(["|".join(SACCT_FIELDS), *lines], order)) + "\n")
    parsed = parse_file(f)
    assert parsed.kind == "sacct" and parsed.jobs is not None
    job = parsed.jobs["31"]  # the fixture: job 31, FAILED, exit 3
    assert (job.status, job.raw_state, job.exit_code) == (JobStatus.FAILED, "FAILED", 3)


def test_sacct_custom_order_without_header_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in (FIXTURES / "slurm/sacct-FAILED-exit3.txt").read_text().splitlines()[1:] if ln]
    f = tmp_path / "sacct.txt"
    f.write_text("\n".join(_reordered(lines, [0, 2, 1, 3, 4, 5, 6, 7, 8, 9])) + "\n")  # ExitCode before State
    rc, _, err = _run(["parse", "--kind", "sacct", str(f)], capsys)
    msg = " ".join(err.split())
    assert rc == 2 and "Traceback" not in err
    assert "without a header" in msg and "State '3:0' is not a Slurm state" in msg


def test_sacct_without_jobid_field_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sacct.txt"
    f.write_text("JobName|State|ExitCode\nfails|FAILED|3:0\n")
    rc, _, err = _run(["parse", "--kind", "sacct", str(f)], capsys)
    assert rc == 2 and "without JobID" in " ".join(err.split())


def test_unnamed_collective_hint_names_a_real_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.log"  # an old nccl-tests log that names no collective, under a name that names none
    log.write_text((FIXTURES / "nccl-tests/all_gather-a100x8-legacy.txt").read_text())
    rc, _, err = _run(["parse", str(log)], capsys)
    assert rc == 2 and "does not name its collective" in " ".join(err.split()) and "--collective" in err
    rc, _, _ = _run(["parse", "--collective", "all_gather", str(log)], capsys)
    assert rc == 0


@pytest.mark.parametrize(
    ("name", "names"),
    [
        ("allreduce-vs-allgather.txt", ["all_reduce", "all_gather"]),
        ("reduce-a100x8.txt", ["reduce"]),
        ("reduce_scatter-a100x8.txt", ["reduce_scatter"]),
        ("broadcast-then-reduce.txt", ["broadcast", "reduce"]),
        ("run.log", []),
    ],
)
def test_collectives_in_file_name(name: str, names: list[str]) -> None:
    from orchestrator.parse import collectives_in_name

    assert collectives_in_name(Path(name)) == names


def test_parse_shows_step_states_and_the_step_that_decided(capsys: pytest.CaptureFixture[str]) -> None:
    """martius-lab/cluster_utils#87: jobs Slurm recorded COMPLETED whose srun step was CANCELLED."""
    path = str(FIXTURES / "slurm/sacct-CANCELLED-srun-step-signal.txt")
    rc, out, _ = _run(["parse", path], capsys)
    assert rc == 0
    assert out.count("CANCELLED (step 0)") == 4 and "0 CANCELLED" in out
    rc, out, _ = _run(["parse", "--json", path], capsys)
    jobs = json.loads(out)[0]["jobs"]
    assert {j["status"] for j in jobs.values()} == {"CANCELLED"}
    assert jobs["239023"]["raw_state"] == "COMPLETED" and jobs["239023"]["decided_by"] == "0"
    assert jobs["239023"]["steps"]["0"] == "CANCELLED"
