"""Fuzz every parser orch reads outside text with: tool outputs, Slurm states, inventories, plans, stacks.

Each test mutates real fixtures (tests/fixtures/, each with its source) and requires that the parser
either returns its typed value or raises the module's documented error, which for tool outputs
(ParseError) keeps the raw text. The budget is ORCH_FUZZ_EXAMPLES per test (see fuzzing.py);
`make fuzz` runs 10,000. The regression tests at the end pin the inputs fuzzing found.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzing import TOKENS, fuzz_settings, mutate
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import ConfigError, InventoryError, ParseError
from orchestrator.inventory import load_inventory
from orchestrator.parse import PARSERS, detect_kind, parse_file
from orchestrator.plan import load_plan, parse_collectives, parse_counts, parse_sizes
from orchestrator.provision import smi
from orchestrator.scheduler.slurm_state import parse_sacct, parse_scontrol, parse_squeue
from orchestrator.stacks import STACKS_DIR, load_stack
from orchestrator.workloads.nccltests import parse_nccl_tests

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"

# nccl-tests -J (JSON_FILE_VERSION 1) as the parser reads it; constructed, no recorded -J output yet.
NCCL_JSON = json.dumps(
    {
        "args": ["all_reduce_perf", "-b", "8", "-e", "16", "-J", "out.json"],
        "config": {"devices": [{"rank": 0, "host": "gpu01"}, {"rank": 1, "host": "gpu01"}]},
        "nccl_version": "2.21.5",
        "results": [
            {
                "size": s, "count": s // 4, "type": "float", "redop": "sum", "root": -1,
                "out_of_place": {"time": 10.5, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0},
                "in_place": {"time": 10.1, "alg_bw": 0.1, "bus_bw": 0.1, "nwrong": 0},
            }
            for s in (8, 16)
        ],
        "out_of_bounds": {"count": 0},
        "average_bus_bandwidth": {"bandwidth": 0.1},
    },
    indent=1,
)  # fmt: skip


def _texts(*globs: str) -> list[str]:
    paths = sorted(p for g in globs for p in FIX.glob(g))
    assert paths, globs
    return [p.read_text() for p in paths]


TOOL_SEEDS: dict[str, list[str]] = {
    "nccl-tests": [*_texts("nccl-tests/*.txt"), NCCL_JSON],
    "rccl-tests": _texts("rccl-tests/*.txt"),
    "collbench": _texts("collbench/*.log"),
    "sacct": _texts("slurm/sacct-*.txt"),
    "squeue": _texts("slurm/squeue-*.txt"),
    "scontrol": _texts("slurm/scontrol-*.txt"),
    "nvidia-smi": _texts("smi/nvidia-smi-table-*.txt"),
    "nvidia-smi-csv": _texts("smi/nvidia-smi-query-gpu.csv"),
    "nvidia-smi-q": _texts("smi/nvidia-smi-q.txt"),
    "nvidia-smi-topo": _texts("smi/nvidia-smi-topo-m.txt"),
    "amd-smi": _texts("smi/amd-smi-*.txt"),
    "rocm-smi": _texts("smi/rocm-smi-*"),
    "ibv_devinfo": _texts("smi/ibv_devinfo-*.txt"),
    "ibdev2netdev": _texts("smi/ibdev2netdev-*.txt"),
    "rdma-link": _texts("smi/rdma-link-*.txt"),
    "dcgmi-diag-json": _texts("diag/dcgmi-diag-*.json"),
    "dcgmi-diag": _texts("diag/dcgmi-diag-table-*.txt"),
    "gpu-burn": _texts("diag/gpu-burn-*.txt"),
    "nvbandwidth": _texts("diag/nvbandwidth-*.txt"),
    "perftest": _texts("diag/ib_*_bw-*.txt"),
    "transferbench": _texts("diag/transferbench-*.txt"),
    "rvs": _texts("diag/rvs-*.txt"),
    "vllm-bench": _texts("serving/vllm-bench-*.txt"),
    "vllm-bench-json": _texts("serving/vllm-save-result-*.json", "serving/vllm-save-result-*.jsonl"),
    "sglang-bench": _texts("serving/sglang-bench-*.txt"),
    "sglang-bench-json": _texts("serving/sglang-bench-*.jsonl"),
    "guidellm": _texts("serving/guidellm-*.json", "serving/guidellm-*.yaml"),
    "mlperf-summary": _texts("serving/mlperf-summary-*.txt"),
    "genai-perf": _texts("serving/genai-perf-console-*.txt"),
    "genai-perf-json": _texts("serving/genai-perf-export-*.json", "serving/aiperf-export-*.json"),
    "guidellm-console": _texts("serving/guidellm-*-console-*.txt"),
}


def test_every_parser_kind_is_fuzzed() -> None:
    assert set(PARSERS) == set(TOOL_SEEDS)


def test_seeds_parse_unmutated() -> None:
    for kind, texts in TOOL_SEEDS.items():
        for text in texts:
            PARSERS[kind](text, Path("all_reduce.txt"))


def _expect_parse_error_with_raw(fn: Callable[[], Any], text: str) -> None:
    try:
        fn()
    except ParseError as e:
        assert e.raw == text, "a ParseError must keep the raw text it could not parse"
        assert e.message and "\n" not in e.message.strip()


@pytest.mark.parametrize("kind", sorted(TOOL_SEEDS))
@fuzz_settings
@given(data=st.data(), seed=st.integers(), ops=st.integers(min_value=1, max_value=8))
def test_tool_output_mutations(kind: str, data: st.DataObject, seed: int, ops: int) -> None:
    text = mutate(data.draw(st.sampled_from(TOOL_SEEDS[kind])), seed, ops)
    _expect_parse_error_with_raw(lambda: PARSERS[kind](text, Path("all_reduce.txt")), text)


@fuzz_settings
@given(data=st.data(), seed=st.integers(), ops=st.integers(min_value=1, max_value=8))
def test_detected_kind_mutations(data: st.DataObject, seed: int, ops: int) -> None:
    """What `orch parse FILE` does without --kind: detect, then parse as the detected kind."""
    seeds = data.draw(st.sampled_from(sorted(TOOL_SEEDS.values())))
    text = mutate(data.draw(st.sampled_from(seeds)), seed, ops)

    def detect_and_parse() -> None:
        PARSERS[detect_kind(text)](text, Path("x.log"))

    _expect_parse_error_with_raw(detect_and_parse, text)


_token_text = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=40).map("".join)


@pytest.mark.parametrize("kind", sorted(TOOL_SEEDS))
@fuzz_settings
@given(text=_token_text)
def test_tool_output_from_nothing(kind: str, text: str) -> None:
    """Text built from separators, numbers and junk, not from a fixture."""
    _expect_parse_error_with_raw(lambda: PARSERS[kind](text, Path("all_reduce.txt")), text)


# --- files: `orch parse` reads bytes that may not be UTF-8 -----------------------------------------


@fuzz_settings
@given(blob=st.binary(max_size=400))
def test_parse_file_on_arbitrary_bytes(blob: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "out.txt"
        path.write_bytes(blob)
        with contextlib.suppress(ParseError):
            parse_file(path)


# --- inventories (through Ansible's own parser) ----------------------------------------------------


@pytest.fixture(scope="module")
def inventory_copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as d:
        shutil.copytree(FIX / "inventories", Path(d) / "inv")
        yield Path(d) / "inv"


def _entry_point(file: Path, root: Path) -> Path:
    """The path load_inventory is given for a mutated file: a vars file is read through its inventory."""
    if file.parent.name in ("group_vars", "host_vars"):
        top = file.parent.parent
        return next(p for p in sorted(top.iterdir()) if p.is_file())
    return file


@fuzz_settings
@given(data=st.data(), seed=st.integers(), ops=st.integers(min_value=1, max_value=6))
def test_inventory_mutations(inventory_copy: Path, data: st.DataObject, seed: int, ops: int) -> None:
    files = sorted(p for p in inventory_copy.rglob("*") if p.is_file())
    file = data.draw(st.sampled_from(files))
    original = file.read_text()
    try:
        file.write_text(mutate(original, seed, ops))
        try:
            load_inventory(_entry_point(file, inventory_copy))
        except InventoryError as e:
            assert e.message
    finally:
        file.write_text(original)


# --- plans and stacks ------------------------------------------------------------------------------

PLAN_SEEDS = {p.stem: p.read_text() for p in sorted((REPO / "orchestrator" / "plans").glob("*.yaml"))}
STACK_SEEDS = {p.stem: p.read_text() for p in sorted(STACKS_DIR.glob("*.yaml"))}


def _load_mutated(
    seeds: dict[str, str], load: Callable[[Path], object], data: st.DataObject, seed: int, ops: int
) -> None:
    """A mutated copy of one seed file loads, or is refused with a message (ConfigError)."""
    name = data.draw(st.sampled_from(sorted(seeds)))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{name}.yaml"
        path.write_text(mutate(seeds[name], seed, ops))
        try:
            load(path)
        except ConfigError as e:
            assert e.message


@fuzz_settings
@given(data=st.data(), seed=st.integers(), ops=st.integers(min_value=1, max_value=8))
def test_plan_mutations(data: st.DataObject, seed: int, ops: int) -> None:
    _load_mutated(PLAN_SEEDS, load_plan, data, seed, ops)


@fuzz_settings
@given(data=st.data(), seed=st.integers(), ops=st.integers(min_value=1, max_value=8))
def test_stack_mutations(data: st.DataObject, seed: int, ops: int) -> None:
    _load_mutated(STACK_SEEDS, load_stack, data, seed, ops)


@fuzz_settings
@given(text=st.one_of(_token_text, st.text(max_size=30)))
def test_plan_flags(text: str) -> None:
    """--sizes, --collectives, --nodes, --gpus-per-node as typed on the command line."""
    for parse in (
        lambda: parse_sizes(text),
        lambda: parse_collectives(text),
        lambda: parse_counts(text, flag="--nodes", n=4, g=8),
    ):
        try:
            parse()
        except ConfigError as e:
            assert e.message


# --- regressions: inputs fuzzing found that escaped as bare Python errors --------------------------


@pytest.mark.parametrize(
    ("fn", "text"),
    [
        # RecursionError from json on deep nesting
        (parse_nccl_tests, '{"results":' + "[" * 100_000),
        (smi.parse_rocm_smi, "{" + '"card0":' * 1 + "[" * 100_000),
        # two header lines run together: the layout wants more columns than a row has (IndexError)
        (
            parse_nccl_tests,
            "        4096          1024   float       0    35.37    0.12    0.12    N/A"
            "    34.59    0.12    0.12    N/A\n"
            "#   Rank  7 Pid 112528 on localhost device  7 [0x00] A100-SXM4-40GB\n"
            "#       size         count    type    root     time   algbw   busbw  error     time"
            "     (B)    (elements)                     (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)\n",
        ),
        # scontrol: empty JobId= / JobState=: IndexError
        (parse_scontrol, "JobId= JobName=x\n   JobState= Reason=None\n"),
        # nvidia-smi csv: a repeated header line: ValueError on int('index')
        (smi.parse_nvidia_smi_csv, "index, name, driver_version\nindex, name, driver_version\n"),
        # ibv_devinfo: a port number that is not one, a state without a value
        (smi.parse_ibv_devinfo, "hca_id:\tmlx5_0\n\tport:\tx\n"),
        (smi.parse_ibv_devinfo, "hca_id:\tmlx5_0\n\tport:\t1\n\t\tstate:\t\n"),
    ],
)
def test_found_by_fuzzing(fn: Callable[[str], Any], text: str) -> None:
    with pytest.raises(ParseError) as e:
        fn(text)
    assert e.value.raw == text


def test_slurm_parsers_keep_raw_on_nonsense() -> None:
    text = "JobID|State\n|\n"
    for fn in (parse_sacct, parse_squeue, parse_scontrol):
        with pytest.raises(ParseError) as e:
            fn(text)
        assert e.value.raw == text
