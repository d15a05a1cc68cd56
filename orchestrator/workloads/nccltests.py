"""Parser for nccl-tests / rccl-tests output (text table or -J JSON) and collbench's `#orch-json` lines.

The table is read from both ends: on the left size, count and type, then optional redop and/or
root (older headers lack one or both, alltoall prints a blank redop); on the right the placement
groups (time, algbw, busbw, #wrong|error [, extra columns]) whose width the header gives. This holds
across nccl-tests versions (pre-2.13 "error" column, 2.13+ "#wrong", per-iteration columns) and
rccl-tests (in-place-only tables, "#wrong" with asterisks).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import Field

from orchestrator.errors import ParseError, one_line
from orchestrator.models.base import StrictModel
from orchestrator.models.results import Collective, CollRow, PlaceResult

Tool = Literal["nccl-tests", "rccl-tests", "collbench"]
ORCH_JSON_PREFIX = "#orch-json "

_PROGRAM_TO_COLLECTIVE: dict[str, Collective] = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
}

_RANK_RE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+(.*)$"
)
_STARTING_RE = re.compile(r"^#\s*Collective test (?:starting|concluded):\s*(\S+)")
_NCCLTESTS_VERSION_RE = re.compile(r"^#\s*nccl-tests version\s+(\S+)(?:.*nccl-library=(\d+))?")
_RCCLTESTS_VERSION_RE = re.compile(r"^rccl-tests: Version\s*(.*?)\s*$")
_LIB_VERSION_RE = re.compile(r"^(?:RCCL version\s*:\s*(.+?)|NCCL version\s+(\S+))\s*$")
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_ABORT_RE = re.compile(
    r"(Test (?:\w+ )?failure|Test timeout|NCCL failure|CUDA failure|HIP failure|Segmentation fault"
    r"|terminate called|Aborted|mpirun noticed|srun: error|Killed)"
)
_TIME_COLUMNS = ("time", "cputime")
_STARTING_LINE_RE = re.compile(r"^#\s*Collective test starting:", re.M)


class UnnamedCollective(ParseError):
    """The output has rows but names no collective, and none was given (old nccl-tests)."""


class RowText(StrictModel):
    """The printed tokens of one row, kept so that recomputed figures can be checked within rounding."""

    line_no: int
    time: list[str]
    algbw: list[str]
    busbw: list[str]


class ParsedRun(StrictModel):
    """One benchmark run as read from its output: header facts, rows and how the run ended."""

    tool: Tool
    vendor: Literal["nvidia", "amd"] | None = None
    version: str | None = Field(default=None, description="nccl-tests / rccl-tests version if printed")
    library_version: str | None = Field(default=None, description="NCCL/RCCL version if printed")
    program: str | None = None
    collective: Collective | None = None
    nranks: int | None = Field(default=None, ge=1)
    hosts: list[str] = Field(default_factory=list)
    dtype: str | None = None
    redop: str | None = None
    rows: list[CollRow] = Field(default_factory=list)
    row_text: list[RowText] = Field(default_factory=list)
    avg_busbw_gbs: float | None = None
    out_of_bounds: int | None = Field(default=None, description="the footer's count; None if no footer")
    wrong_total: int = Field(default=0, description="sum of #wrong over rows and placements")
    rows_with_wrong: int = 0
    max_error: float | None = Field(default=None, description="largest legacy 'error' column value")
    warnings: list[str] = Field(default_factory=list, description="NCCL WARN lines, as printed")
    errors: list[str] = Field(default_factory=list, description="failure lines, as printed")
    truncated: bool = False
    aborted: str | None = Field(default=None, description="the first failure line, if the run printed one")
    from_json: bool = False

    @property
    def ok(self) -> bool:
        """Complete, not aborted, no wrong values: the only state that may count as a pass."""
        return (
            not self.truncated
            and self.aborted is None
            and self.wrong_total == 0
            and not self.out_of_bounds
            and bool(self.rows)
        )


def program_collective(program: str) -> Collective | None:
    """Map a program name or path (`./build/all_reduce_perf_mpi`) to its collective, if orch knows it."""
    name = program.rsplit("/", 1)[-1]
    for suffix in ("_mpi", "_perf"):
        name = name.removesuffix(suffix)
    return _PROGRAM_TO_COLLECTIVE.get(name)


def split_tests(text: str) -> list[str]:
    """One text per `# Collective test starting:` block of a log holding several (collbench prints
    all its collectives into one log; nccl-tests runs are often concatenated). The lines before
    the first block that are not table rows (versions, device lines) go in front of every block.
    A text with fewer than two blocks comes back whole."""
    body = strip_source_line(text)
    starts = [m.start() for m in _STARTING_LINE_RE.finditer(body)]
    if len(starts) < 2:
        return [text]
    head = [ln for ln in body[: starts[0]].splitlines() if not re.match(r"^\s*\d+\s+\d+\s", ln)]
    prefix = "".join(f"{ln}\n" for ln in head)
    ends = [*starts[1:], len(body)]
    return [prefix + body[a:b] for a, b in zip(starts, ends, strict=True)]


def strip_source_line(text: str) -> str:
    """Drop a leading `# source:` line (fixture provenance) if present."""
    if text.startswith("# source:"):
        _, _, rest = text.partition("\n")
        return rest
    return text


def parse_nccl_tests(
    text: str, *, collective: Collective | None = None, nranks: int | None = None
) -> ParsedRun:
    """Parse nccl-tests, rccl-tests or collbench output (text table, -J JSON, `#orch-json` lines).

    `collective` and `nranks` are used when the output does not state them (old nccl-tests print
    neither the program name nor, without device lines, the rank count).
    Raises ParseError (with the raw text) when the input is not such output at all, or when rows
    exist but their collective or rank count cannot be known.
    """
    try:
        body = strip_source_line(text)
        if body.lstrip().startswith("{"):
            return _parse_json(body, text, collective)
        return _parse_text(body, text, collective, nranks)
    except ParseError:
        raise
    except (ValueError, ArithmeticError, LookupError, TypeError, AttributeError, RecursionError) as e:
        # ValidationError is a ValueError; RecursionError comes from JSON nested too deeply
        raise ParseError(f"not parseable as nccl-tests output: {one_line(e)}", raw=text) from e


class _Layout:
    """Where the placement groups sit at the right of a data line."""

    def __init__(self, widths: list[int], wrong_kind: str, timestamp: bool) -> None:
        self.widths = widths
        self.wrong_kind = wrong_kind  # "#wrong" or "error"
        self.timestamp = timestamp

    @property
    def right(self) -> int:
        return sum(self.widths)

    @classmethod
    def default(cls) -> _Layout:
        return cls([4, 4], "#wrong", False)

    @classmethod
    def from_header(cls, names: list[str]) -> _Layout | None:
        starts = [i for i, n in enumerate(names) if n in _TIME_COLUMNS]
        if not starts or "size" not in names:
            return None
        end = names.index("timestamp") if "timestamp" in names else len(names)
        bounds = [*starts, end]
        widths = [bounds[k + 1] - bounds[k] for k in range(len(starts))]
        if any(w < 4 for w in widths):
            return None
        wrong_kind = "error" if "error" in names else "#wrong"
        return cls(widths, wrong_kind, "timestamp" in names)


def _is_int(token: str) -> bool:
    return bool(re.fullmatch(r"-?\d+", token))


def _number(token: str) -> float:
    value = float(token)
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise ValueError(f"not a usable figure: {token!r}")
    return value


def _parse_wrong(token: str, kind: str) -> tuple[int | None, float | None]:
    """(#wrong, legacy error) of one placement; rccl-tests may suffix an asterisk."""
    token = token.rstrip("*")
    if token.upper() == "N/A":
        return None, None
    value = _number(token)
    if kind == "error":
        return None, value
    return round(value), None


class _TextState:
    def __init__(self) -> None:
        self.layout: _Layout | None = None
        self.header_seen = False
        self.footer_seen = False
        self.concluded = False
        self.marker_seen = False
        self.cut_row = False


def _parse_text(body: str, raw: str, collective: Collective | None, nranks: int | None) -> ParsedRun:
    st = _TextState()
    run: dict[str, Any] = {"tool": "nccl-tests", "warnings": [], "errors": [], "hosts": []}
    ranks: dict[int, str] = {}
    parsed_rows: list[tuple[int, list[str], str | None, int | None]] = []
    orch_rows: list[CollRow] = []
    amd = False
    for line_no, line in enumerate(body.splitlines(), start=1):
        s = line.strip()
        if not s:
            continue
        if s.startswith(ORCH_JSON_PREFIX.strip()):
            orch_rows.append(CollRow.model_validate_json(s[len(ORCH_JSON_PREFIX.strip()) :].strip()))
            continue
        if "NCCL WARN" in s or "RCCL WARN" in s:
            run["warnings"].append(s)
            continue
        if s.startswith("#"):
            _header_line(s, st, run, ranks)
            amd = amd or "Errors with asterisks" in s
            continue
        if m := _RCCLTESTS_VERSION_RE.match(s):
            run["version"] = m.group(1) or None
            amd = st.marker_seen = True
            continue
        if m := _LIB_VERSION_RE.match(s):
            run["library_version"] = m.group(1) or m.group(2)
            amd = amd or s.startswith("RCCL")
            continue
        tokens = s.split()
        if _is_int(tokens[0]) and len(tokens) >= 3 and _is_int(tokens[1]):
            row = _split_row(tokens, st.layout or _Layout.default())
            if row is None:
                st.cut_row = True
            else:
                parsed_rows.append((line_no, *row))
            continue
        if _ABORT_RE.search(s):
            run["errors"].append(s)
    if not (st.marker_seen or st.header_seen or parsed_rows or orch_rows):
        raise ParseError("no nccl-tests/rccl-tests header, table or #orch-json line found", raw=raw)

    device_names = " ".join(ranks.values())
    amd = amd or bool(re.search(r"\bAMD\b|Radeon|Instinct", device_names))
    run["vendor"] = "amd" if amd else "nvidia"
    if amd:
        run["tool"] = "rccl-tests"
    run["hosts"] = sorted({h.split()[0] for h in ranks.values()})
    coll = run.get("collective") or collective
    n = len(ranks) or nranks
    run["collective"] = coll
    run["nranks"] = n

    rows, texts = _build_rows(parsed_rows, st.layout or _Layout.default(), coll, n, raw, run)
    if orch_rows:
        run["tool"] = "collbench"
        rows, texts = orch_rows, []
        run["collective"] = run["collective"] or orch_rows[0].collective
        run["nranks"] = run["nranks"] or orch_rows[0].nranks
    run["rows"] = rows
    run["row_text"] = texts
    if rows:
        run["dtype"] = rows[0].dtype
        run["redop"] = rows[0].redop
    _count_wrong(run, rows)
    run["truncated"] = st.cut_row or not st.footer_seen
    if run["errors"]:
        run["aborted"] = run["errors"][0]
    return ParsedRun.model_validate(run)


def _header_line(s: str, st: _TextState, run: dict[str, Any], ranks: dict[int, str]) -> None:
    if m := _NCCLTESTS_VERSION_RE.match(s):
        run["version"] = m.group(1)
        if m.group(2):
            run["library_version"] = m.group(2)
        st.marker_seen = True
    elif m := _STARTING_RE.match(s):
        run["program"] = m.group(1)
        run["collective"] = program_collective(m.group(1))
        st.marker_seen = True
        st.concluded = st.concluded or "concluded" in s
    elif m := _RANK_RE.match(s):
        ranks[int(m.group(1))] = f"{m.group(2)} {m.group(4)}"
        st.marker_seen = True
    elif s.startswith("# nThread") or s.startswith("# Using devices"):
        st.marker_seen = True
    elif m := _OOB_RE.match(s):
        run["out_of_bounds"] = int(m.group(1))
        st.footer_seen = True
    elif m := _AVG_RE.match(s):
        run["avg_busbw_gbs"] = _number(m.group(1))
        st.footer_seen = True
    else:
        names = s.lstrip("#").split()
        if "size" in names and "count" in names:
            layout = _Layout.from_header(names)
            if layout is not None:
                st.layout = layout
                st.header_seen = True


def _split_row(tokens: list[str], layout: _Layout) -> tuple[list[str], str | None, int | None] | None:
    """(right-hand tokens, redop, root) of a data line, or None if it does not fit (a cut row)."""
    if layout.timestamp:
        while tokens and re.fullmatch(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d", tokens[-1]):
            tokens = tokens[:-1]
    middle = len(tokens) - 3 - layout.right
    if middle < 0 or middle > 2:
        return None
    redop: str | None = None
    root: int | None = None
    for tok in tokens[3 : 3 + middle]:
        if _is_int(tok):
            root = int(tok)
        else:
            redop = tok
    return tokens, redop, root


def _build_rows(
    parsed: list[tuple[int, list[str], str | None, int | None]],
    layout: _Layout,
    coll: Collective | None,
    nranks: int | None,
    raw: str,
    run: dict[str, Any],
) -> tuple[list[CollRow], list[RowText]]:
    if not parsed:
        return [], []
    if coll is None:
        raise UnnamedCollective("the output does not name its collective", raw=raw, hint="pass --collective")
    if not nranks:
        raise ParseError("the output has no device lines to count ranks from", raw=raw, hint="pass --nranks")
    rows: list[CollRow] = []
    texts: list[RowText] = []
    max_error: float | None = None
    for line_no, tokens, redop, root in parsed:
        places: list[PlaceResult] = []
        text = RowText(line_no=line_no, time=[], algbw=[], busbw=[])
        start = len(tokens) - layout.right
        for width in layout.widths:
            group = tokens[start : start + width]
            start += width
            wrong, err = _parse_wrong(group[3], layout.wrong_kind)
            if err is not None:
                max_error = err if max_error is None else max(max_error, err)
            places.append(
                PlaceResult(
                    time_us=_number(group[0]),
                    algbw_gbs=_number(group[1]),
                    busbw_gbs=_number(group[2]),
                    wrong=wrong,
                )
            )
            text.time.append(group[0])
            text.algbw.append(group[1])
            text.busbw.append(group[2])
        rows.append(
            CollRow(
                collective=coll,
                size_bytes=int(tokens[0]),
                count=int(tokens[1]),
                dtype=tokens[2],
                redop=None if redop in (None, "none") else redop,
                root=None if root is None or root < 0 else root,
                nranks=nranks,
                out_of_place=places[0],
                in_place=places[1] if len(places) > 1 else None,
            )
        )
        texts.append(text)
    run["max_error"] = max_error
    return rows, texts


def _count_wrong(run: dict[str, Any], rows: list[CollRow]) -> None:
    total = 0
    bad_rows = 0
    for row in rows:
        wrongs = [p.wrong or 0 for p in (row.out_of_place, row.in_place) if p is not None]
        total += sum(wrongs)
        bad_rows += any(wrongs)
    run["wrong_total"] = total
    run["rows_with_wrong"] = bad_rows


def _parse_json(body: str, raw: str, collective: Collective | None) -> ParsedRun:
    """nccl-tests -J output (nccl-tests 2.17+, JSON_FILE_VERSION 1)."""
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as e:
        raise ParseError(f"nccl-tests JSON output is cut or malformed: {e}", raw=raw) from e
    if not isinstance(doc, dict) or "results" not in doc:
        raise ParseError("JSON without a 'results' list: not nccl-tests -J output", raw=raw)
    args = doc.get("args") or []
    program = str(args[0]) if args else None
    coll = (program_collective(program) if program else None) or collective
    devices = (doc.get("config") or {}).get("devices") or []
    nranks = len(devices) or None
    run: dict[str, Any] = {
        "tool": "nccl-tests",
        "vendor": "nvidia",
        "program": program,
        "collective": coll,
        "nranks": nranks,
        "library_version": str(doc["nccl_version"]) if doc.get("nccl_version") is not None else None,
        "from_json": True,
        "warnings": [],
        "errors": [],
    }
    rows: list[CollRow] = []
    for entry in doc["results"]:
        places: list[PlaceResult | None] = []
        for key in ("out_of_place", "in_place"):
            p = entry.get(key)
            if p is None:
                places.append(None)
                continue
            nwrong = p.get("nwrong")
            places.append(
                PlaceResult(
                    time_us=_number(str(p.get("time", p.get("cpu_time")))),
                    algbw_gbs=_number(str(p["alg_bw"])),
                    busbw_gbs=_number(str(p["bus_bw"])),
                    wrong=None if nwrong is None else round(float(nwrong)),
                )
            )
        oop = places[0] or places[1]
        if oop is None or coll is None or not nranks:
            raise ParseError("JSON result without placement, collective or devices", raw=raw)
        root = int(str(entry.get("root", "-1")).strip() or -1)
        rows.append(
            CollRow(
                collective=coll,
                size_bytes=int(entry["size"]),
                count=int(entry["count"]),
                dtype=str(entry["type"]),
                redop=None if entry.get("redop") in (None, "none") else str(entry["redop"]),
                root=None if root < 0 else root,
                nranks=nranks,
                out_of_place=oop,
                in_place=places[1] if places[0] is not None else None,
            )
        )
    run["rows"] = rows
    if rows:
        run["dtype"], run["redop"] = rows[0].dtype, rows[0].redop
    oob = doc.get("out_of_bounds")
    avg = doc.get("average_bus_bandwidth")
    run["out_of_bounds"] = int(oob["count"]) if isinstance(oob, dict) else None
    run["avg_busbw_gbs"] = _number(str(avg["bandwidth"])) if isinstance(avg, dict) else None
    run["truncated"] = oob is None or avg is None
    _count_wrong(run, rows)
    return ParsedRun.model_validate(run)
