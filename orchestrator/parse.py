"""`orch parse`: read tool outputs that came from runs outside orch, whatever their kind.

A registry maps each kind to its parser; kinds for nvidia-smi / amd-smi can be added later.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import ParseError
from orchestrator.metrics.busbw import busbw_gbs
from orchestrator.models.results import Collective
from orchestrator.provision import smi
from orchestrator.scheduler.base import JobState
from orchestrator.scheduler.slurm_state import parse_sacct, parse_scontrol, parse_squeue
from orchestrator.workloads.nccltests import ParsedRun, parse_nccl_tests, program_collective


@dataclass(frozen=True)
class ParsedFile:
    """What one file held: a benchmark run or job states, and the kind it was read as."""

    path: Path
    kind: str
    run: ParsedRun | None = None
    jobs: dict[str, JobState] | None = None
    data: Any = None  # GPU/RDMA tool reports (orchestrator.provision.smi models)


Parser = Callable[[str, Path], ParsedFile]


def _collective_from_name(path: Path) -> Collective | None:
    name = path.name.lower().replace("-", "_")
    for program in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"):
        if program in name or program.replace("_", "") in name:
            return program_collective(program)
    return program_collective("reduce") if "reduce" in name else None


def _bench(kind: str) -> Parser:
    def parse(text: str, path: Path) -> ParsedFile:
        return ParsedFile(path, kind, run=parse_nccl_tests(text, collective=_collective_from_name(path)))

    return parse


def _jobs(kind: str, fn: Callable[[str], dict[str, JobState]]) -> Parser:
    def parse(text: str, path: Path) -> ParsedFile:
        return ParsedFile(path, kind, jobs=fn(text))

    return parse


def _smi(kind: str, fn: Callable[[str], Any]) -> Parser:
    def parse(text: str, path: Path) -> ParsedFile:
        return ParsedFile(path, kind, data=fn(text))

    return parse


PARSERS: dict[str, Parser] = {
    "nccl-tests": _bench("nccl-tests"),
    "rccl-tests": _bench("rccl-tests"),
    "collbench": _bench("collbench"),
    "sacct": _jobs("sacct", parse_sacct),
    "squeue": _jobs("squeue", parse_squeue),
    "scontrol": _jobs("scontrol", parse_scontrol),
    "nvidia-smi-csv": _smi("nvidia-smi-csv", smi.parse_nvidia_smi_csv),
    "nvidia-smi-q": _smi("nvidia-smi-q", smi.parse_nvidia_smi_q),
    "amd-smi": _smi("amd-smi", smi.parse_amd_smi_static),
    "rocm-smi": _smi("rocm-smi", smi.parse_rocm_smi),
    "ibv_devinfo": _smi("ibv_devinfo", smi.parse_ibv_devinfo),
}


def detect_kind(text: str) -> str:
    """Guess the kind of a tool output; raises ParseError when nothing fits."""
    if "#orch-json " in text:
        return "collbench"
    if re.search(r"^rccl-tests: Version|Errors with asterisks|RCCL version", text, re.M):
        return "rccl-tests"
    if re.search(
        r"^#\s*(nThread|nccl-tests version|Collective test)|out-of-place|Avg bus bandwidth", text, re.M
    ):
        return "nccl-tests"
    if text.lstrip().startswith("{") and '"results"' in text:
        return "nccl-tests"
    if re.search(r"^JobId=\d+", text, re.M):
        return "scontrol"
    if re.search(r"^\s*\d+(?:[._]\S+)?\|[^|\n]*\|", text, re.M) or text.lstrip().startswith("JobID|"):
        first = next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")), "")
        return "sacct" if first.count("|") >= 5 else "squeue"
    raise ParseError("cannot tell what tool wrote this file", raw=text, hint="give --kind")


def parse_file(path: Path, kind: str | None = None) -> ParsedFile:
    """Parse one file as `kind` (detected when None). Raises ParseError with one line saying why."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ParseError(f"{path}: cannot read: {e.strerror}") from e
    try:
        chosen = kind or detect_kind(text)
        if chosen not in PARSERS:
            raise ParseError(f"unknown kind {chosen!r}", hint=f"one of {', '.join(PARSERS)}")
        return PARSERS[chosen](text, path)
    except ParseError as e:
        raise ParseError(f"{path}: {e.message}", raw=e.raw or text, hint=e.hint) from e


def recomputed_busbw(run: ParsedRun) -> list[tuple[float, float | None]]:
    """busbw recomputed from size, time and rank count, per row: (out-of-place, in-place)."""
    out: list[tuple[float, float | None]] = []
    for row in run.rows:
        oop = busbw_gbs(row.collective, row.size_bytes, row.out_of_place.time_us, row.nranks)
        ip = (
            busbw_gbs(row.collective, row.size_bytes, row.in_place.time_us, row.nranks)
            if row.in_place is not None
            else None
        )
        out.append((oop, ip))
    return out
