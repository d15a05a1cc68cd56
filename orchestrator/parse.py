"""`orch parse`: read tool outputs that came from runs outside orch, whatever their kind.

A registry maps each kind to its parser and to the rule that recognises its text. Detection is
by each tool's own marks (a banner, a header line, a line shape), never by the file name; a text
that fits no rule, or rules of two different tools, is refused with the kinds tried named.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast, get_args

from orchestrator.errors import ConfigError, ParseError
from orchestrator.metrics.busbw import busbw_gbs
from orchestrator.models.results import Collective
from orchestrator.models.serving_results import ServingSummary
from orchestrator.provision import diagtools, smi
from orchestrator.safefs import read_regular
from orchestrator.scheduler.base import JobState
from orchestrator.scheduler.slurm_state import parse_sacct, parse_scontrol, parse_squeue
from orchestrator.workloads import servingbench
from orchestrator.workloads.nccltests import (
    ParsedRun,
    UnnamedCollective,
    parse_nccl_tests,
    split_tests,
)

# every collective nccl-tests has a program for (reduce included, which orch's plans do not run)
PARSE_COLLECTIVES: tuple[str, ...] = get_args(Collective)


@dataclass(frozen=True)
class ParseOptions:
    """What the user says about a file that the file may not say itself."""

    collective: Collective | None = None
    nranks: int | None = None
    fields: tuple[str, ...] | None = None  # the columns of a headerless --query-gpu CSV

    @classmethod
    def from_flags(cls, collective: str | None, nranks: int | None, fields: str | None) -> ParseOptions:
        """Options from `orch parse` flags; raises ConfigError on a value orch cannot use."""
        if collective is not None and collective not in PARSE_COLLECTIVES:
            raise ConfigError(f"--collective {collective!r} is not a collective",
                              hint=f"one of {', '.join(PARSE_COLLECTIVES)}")  # fmt: skip
        if nranks is not None and nranks < 1:
            raise ConfigError(f"--nranks {nranks} must be at least 1")
        names = tuple(f.strip() for f in fields.split(",") if f.strip()) if fields is not None else None
        if names is not None and not names:
            raise ConfigError(
                "--fields is empty", hint="give the --query-gpu list, e.g. index,name,memory.total"
            )
        return cls(collective=cast("Collective | None", collective), nranks=nranks, fields=names)


DEFAULT_OPTIONS = ParseOptions()


@dataclass(frozen=True)
class ParsedFile:
    """What one file held: benchmark runs, job states, a tool report or serving-benchmark summaries,
    and the kind it was read as."""

    path: Path
    kind: str
    runs: tuple[ParsedRun, ...] = ()
    jobs: dict[str, JobState] | None = None
    data: Any = None  # GPU/RDMA tool reports and diagnostics (provision.smi, provision.diagtools)
    serving: tuple[ServingSummary, ...] = ()  # vLLM/SGLang/guidellm outputs, one per load level

    @property
    def run(self) -> ParsedRun | None:
        """The benchmark run when the file held exactly one."""
        return self.runs[0] if len(self.runs) == 1 else None


class Parser(Protocol):
    def __call__(self, text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile: ...


def collectives_in_name(path: Path) -> list[Collective]:
    """Every collective a file name names (`allreduce-vs-allgather.txt` names two); `reduce` counts
    only where it is not part of all_reduce or reduce_scatter."""
    name = path.name.lower().replace("-", "_")
    found = [
        cast("Collective", c)
        for c in PARSE_COLLECTIVES
        if c != "reduce" and (c in name or c.replace("_", "") in name)
    ]
    rest = name
    for c in found:
        rest = rest.replace(c, "").replace(c.replace("_", ""), "")
    return [*found, "reduce"] if "reduce" in rest else found


def _parse_bench(text: str, path: Path, opts: ParseOptions) -> ParsedRun:
    """One run; the collective comes from the text, else --collective, else an unambiguous file name."""
    try:
        return parse_nccl_tests(text, collective=opts.collective, nranks=opts.nranks)
    except UnnamedCollective as e:
        names = collectives_in_name(path)
        if len(names) > 1:
            raise UnnamedCollective(
                f"the output does not name its collective and the file name names {len(names)} "
                f"({', '.join(names)})",
                raw=text,
                hint="pass --collective",
            ) from e
        if not names:
            raise
        return parse_nccl_tests(text, collective=names[0], nranks=opts.nranks)


def _bench(kind: str) -> Parser:
    def parse(text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile:
        parts = split_tests(text)
        runs: list[ParsedRun] = []
        for k, part in enumerate(parts, start=1):
            try:
                runs.append(_parse_bench(part, path, opts))
            except ParseError as e:
                if len(parts) == 1:
                    raise
                raise type(e)(f"test {k} of {len(parts)}: {e.message}", raw=text, hint=e.hint) from e
        return ParsedFile(path, kind, runs=tuple(runs))

    return parse


def _jobs(kind: str, fn: Callable[[str], dict[str, JobState]]) -> Parser:
    def parse(text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile:
        return ParsedFile(path, kind, jobs=fn(text))

    return parse


def _smi(kind: str, fn: Callable[[str], Any]) -> Parser:
    def parse(text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile:
        return ParsedFile(path, kind, data=fn(text))

    return parse


def _serving(kind: str, fn: Callable[[str], list[ServingSummary]]) -> Parser:
    def parse(text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile:
        return ParsedFile(path, kind, serving=tuple(fn(text)))

    return parse


def _csv(text: str, path: Path, opts: ParseOptions = DEFAULT_OPTIONS, /) -> ParsedFile:
    return ParsedFile(path, "nvidia-smi-csv", data=smi.parse_nvidia_smi_csv(text, opts.fields))


PARSERS: dict[str, Parser] = {
    "nccl-tests": _bench("nccl-tests"),
    "rccl-tests": _bench("rccl-tests"),
    "collbench": _bench("collbench"),
    "sacct": _jobs("sacct", lambda t: parse_sacct(t, check_order=True)),
    "squeue": _jobs("squeue", parse_squeue),
    "scontrol": _jobs("scontrol", parse_scontrol),
    "nvidia-smi": _smi("nvidia-smi", smi.parse_nvidia_smi_table),
    "nvidia-smi-csv": _csv,
    "nvidia-smi-q": _smi("nvidia-smi-q", smi.parse_nvidia_smi_q),
    "nvidia-smi-topo": _smi("nvidia-smi-topo", smi.parse_nvidia_smi_topo),
    "amd-smi": _smi("amd-smi", smi.parse_amd_smi),
    "rocm-smi": _smi("rocm-smi", smi.parse_rocm_smi),
    "ibv_devinfo": _smi("ibv_devinfo", smi.parse_ibv_devinfo),
    "ibdev2netdev": _smi("ibdev2netdev", smi.parse_ibdev2netdev),
    "rdma-link": _smi("rdma-link", smi.parse_rdma_link),
    "dcgmi-diag-json": _smi("dcgmi-diag-json", diagtools.parse_dcgmi_diag_json),
    "dcgmi-diag": _smi("dcgmi-diag", diagtools.parse_dcgmi_diag_table),
    "gpu-burn": _smi("gpu-burn", diagtools.parse_gpu_burn),
    "nvbandwidth": _smi("nvbandwidth", diagtools.parse_nvbandwidth),
    "perftest": _smi("perftest", diagtools.parse_perftest_bw),
    "transferbench": _smi("transferbench", diagtools.parse_transferbench),
    "rvs": _smi("rvs", diagtools.parse_rvs),
    "vllm-bench": _serving("vllm-bench", servingbench.parse_console),
    "vllm-bench-json": _serving("vllm-bench-json", servingbench.parse_vllm_json),
    "sglang-bench": _serving("sglang-bench", servingbench.parse_console),
    "sglang-bench-json": _serving("sglang-bench-json", servingbench.parse_sglang_jsonl),
    "guidellm": _serving("guidellm", servingbench.parse_guidellm),
    "mlperf-summary": _serving("mlperf-summary", servingbench.parse_mlperf_summary),
    "genai-perf": _serving("genai-perf", servingbench.parse_genai_perf_console),
    "genai-perf-json": _serving("genai-perf-json", servingbench.parse_genai_perf_json),
    "guidellm-console": _serving("guidellm-console", servingbench.parse_guidellm_console),
}


def _first_line(text: str) -> str:
    return next((ln for ln in text.splitlines() if ln.strip() and not ln.startswith("# source:")), "")


def _is_csv_header(text: str) -> bool:
    return smi.csv_header(_first_line(text)) is not None


def _slurm_kind(text: str) -> str | None:
    """sacct or squeue by the header (sacct prints JobID, squeue JOBID), else by the field count."""
    first = _first_line(text)
    cells = [c.strip() for c in first.split("|")]
    if len(cells) > 1 and cells[0] == "JOBID":
        return "squeue"
    if len(cells) > 1 and any(c in ("JobID", "JobIDRaw") for c in cells):
        return "sacct"
    if re.search(r"^\s*\d+(?:[._]\S+)?\|[^|\n]*\|", text, re.M):
        return "sacct" if first.count("|") >= 5 else "squeue"
    return None


def _has(*patterns: str) -> Callable[[str], bool]:
    """A rule that holds when every pattern matches somewhere (multi-line mode)."""
    compiled = [re.compile(p, re.M) for p in patterns]
    return lambda text: all(c.search(text) for c in compiled)


def _any(*rules: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda text: any(rule(text) for rule in rules)


_DCGM_JSON = _has(r'"DCGM (?:GPU )?Diagnostic"\s*:')

_RULES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    # the benchmark kinds, most specific first: one group, the first that fits wins
    ("collbench", _has(r"^#orch-json |^# collbench \(orch\)")),
    ("rccl-tests", _has(r"^rccl-tests: Version|Errors with asterisks|RCCL version")),
    ("nccl-tests", _any(
        _has(r"^#\s*(nThread|nccl-tests version|Collective test)|out-of-place|Avg bus bandwidth"),
        # nccl-tests -J; dcgmi diag's JSON has "results" too
        lambda t: _has(r"\A\s*\{", r'"results"')(t) and not _DCGM_JSON(t),
    )),
    # one rule per other tool
    ("scontrol", _has(r"^JobId=\d+")),
    ("nvidia-smi-q", _has(r"NVSMI LOG")),
    ("nvidia-smi", _has(r"^\|\s*NVIDIA-SMI \S+")),
    ("nvidia-smi-topo", _has(r"^[ \t]+GPU0[ \t]", r"^GPU0\s+X\s")),
    ("nvidia-smi-csv", _is_csv_header),
    ("amd-smi", _any(_has(r"^AMDSMI Tool:"), _has(r"^GPU: \d+\s*$", r"^\s+[A-Z][A-Z0-9_]+:"))),
    ("rocm-smi", _any(_has(r"ROCm System Management Interface"), _has(r"\A\s*\{", r'"card\d+"\s*:'))),
    ("ibv_devinfo", _has(r"^hca_id:|No IB devices found")),
    ("ibdev2netdev", _has(r"^\S+ port \d+ ==> \S+ \(\w+\)")),
    ("rdma-link", _has(r"^link \S+/\d+ ")),
    # GPU and NIC diagnostics (orchestrator.provision.diagtools)
    ("dcgmi-diag-json", _DCGM_JSON),
    ("dcgmi-diag", _has(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$")),
    ("gpu-burn", _has(r"^Tested \d+ GPUs:|proc'd: \d+ \(\d")),
    ("nvbandwidth", _has(r"^nvbandwidth Version: ")),
    ("perftest", _has(r"^\s*#bytes\s+#iterations\s+BW peak\[")),
    ("transferbench", _has(r"^TransferBench v\d")),
    ("rvs", _has(
        r"ROCm Validation Suite \(RVS\) Summary|^\s*\[RESULT\]\s*\[[^\]]*\]\s*\[[^\]]+\]\s*\[GPU::"
    )),
    # serving benchmarks: the summary block (SGLang's has its backend and retokenized count), the
    # result JSON by its keys, guidellm's report by its benchmark type
    ("vllm-bench", lambda t: bool(servingbench.HEADER.search(t)) and not servingbench.is_sglang_console(t)),
    ("sglang-bench", servingbench.is_sglang_console),
    ("vllm-bench-json", _has(r"\A\s*\{", r'"model_id"\s*:', r'"completed"\s*:')),
    ("sglang-bench-json", _has(r"\A\s*\{", r'"total_output_tokens_retokenized"\s*:')),
    ("guidellm", _any(
        _has(r"\A\s*\{", r'"benchmarks"\s*:', r'"generative_benchmark"'),
        _has(r"^benchmarks:", r"type_: generative_benchmark"),
    )),
    ("mlperf-summary", _has(r"^MLPerf Results Summary[ \t]*$")),
    ("guidellm-console", servingbench.is_guidellm_console),
    ("genai-perf", lambda t: bool(servingbench.GENAI_PERF_HEADER.search(t))),
    # GenAI-Perf's metric objects; AIPerf's carry their tag before the unit
    ("genai-perf-json", _has(
        r"\A\s*\{",
        r'"(?:time_to_first_token|request_throughput)"\s*:\s*\{\s*(?:"tag"\s*:\s*"\w+"\s*,\s*)?"unit"',
    )),
    ("sacct", lambda t: _slurm_kind(t) == "sacct"),
    ("squeue", lambda t: _slurm_kind(t) == "squeue"),
)  # fmt: skip
_BENCH = ("collbench", "rccl-tests", "nccl-tests")


def detect_kind(text: str) -> str:
    """The kind of a tool output, by the tool's own marks.

    Raises ParseError naming the kinds tried when none fits, or the kinds that fit when the
    text fits two different tools (a paste of two outputs, say).
    """
    body = text.partition("\n")[2] if text.startswith("# source:") else text
    fits = [kind for kind, rule in _RULES if rule(body)]
    bench = [k for k in fits if k in _BENCH][:1]
    others = [k for k in fits if k not in _BENCH]
    found = bench + others
    if len(found) == 1:
        return found[0]
    if not found:
        raise ParseError(f"cannot tell what tool wrote this file (tried: {', '.join(PARSERS)})",
                         raw=text, hint="give --kind")  # fmt: skip
    raise ParseError(f"the text fits more than one tool ({', '.join(found)})", raw=text,
                     hint="split the file, or give --kind")  # fmt: skip


def parse_file(path: Path, kind: str | None = None, opts: ParseOptions = DEFAULT_OPTIONS) -> ParsedFile:
    """Parse one file as `kind` (detected when None). Raises ParseError with one line saying why."""
    try:
        # A FIFO or device is refused, not waited on; newlines as text mode reads them.
        raw = read_regular(path).decode("utf-8", errors="replace")
        text = raw.replace("\r\n", "\n").replace("\r", "\n")
    except OSError as e:
        raise ParseError(f"{path}: cannot read: {e.strerror}") from e
    try:
        chosen = kind or detect_kind(text)
        if chosen not in PARSERS:
            raise ParseError(f"unknown kind {chosen!r}", hint=f"one of {', '.join(PARSERS)}")
        parsed = PARSERS[chosen](text, path, opts)
    except ParseError as e:
        raise ParseError(f"{path}: {e.message}", raw=e.raw or text, hint=e.hint) from e
    return parsed


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
