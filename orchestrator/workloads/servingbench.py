"""Serving-benchmark outputs from outside orch, read into ServingSummary (`orch parse`).

Read, each into one ServingSummary per load level (docs/serving.md, "Results from elsewhere"):
  - the console summary of vLLM's serving benchmark (`vllm bench serve`, benchmarks/benchmark_serving.py)
    and of SGLang's `sglang.bench_serving`: the "Serving Benchmark Result" block, one per level, with
    the lines vLLM prints before it (request rate, burstiness, concurrency cap, the Namespace line);
  - vLLM's `--save-result` JSON (one object, or one per line with `--append-result`);
  - SGLang's `--output-file` JSONL (one object per line);
  - guidellm's benchmarks report (JSON or YAML), one summary per benchmark, and the console tables
    of guidellm 0.4+ (`| Benchmark | … |||`), one summary per benchmark row;
  - MLPerf Inference loadgen's mlperf_log_summary.txt, one summary per file;
  - NVIDIA GenAI-Perf's console table ("NVIDIA GenAI-Perf | LLM Metrics"), one summary per table,
    and its JSON export (profile_export_genai_perf.json), one summary per file.

Each reader knows the names its tool uses; a figure under another name is kept in `other`. The
foreign JSON is checked only in what is read (the type of every known key); per-request lists
(vLLM's input_lens, ttfts, itls, generated_texts, errors; guidellm's requests) are not read, their
summary figures are. Anything malformed is refused with ParseError naming what is wrong.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal

import yaml
from pydantic import ValidationError

from orchestrator.errors import ParseError, one_line
from orchestrator.models.base import first_error
from orchestrator.models.serving_results import FigureValue, ServingSummary, StatedLatency

HEADER = re.compile(r"^=+ Serving Benchmark Result =+[ \t]*$", re.M)
_RULE_END = re.compile(r"^={10,}[ \t]*$")
_SECTION = re.compile(r"^-{2,}[A-Za-z0-9 ().,-]*?-{2,}[ \t]*$")
_LABEL_LINE = re.compile(r"^(?P<label>[A-Za-z][^:]{0,80}?):[ \t]*(?P<value>\S(?:.*\S)?)?[ \t]*$")
_NUMBER = re.compile(r"^[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
# a summary line's number followed, after blanks, by text that is not part of it ("0   <<<<<<< New line")
_STRAY = re.compile(r"^(?P<number>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)[ \t]+(?P<stray>\S.*)$")
# the name under which such lines are kept aside (sections_aside), whole
STRAY_TEXT = "text after a number"
_LATENCY_LABEL = re.compile(
    r"^(?P<stat>Mean|Median|Std|Min|Max|P\d{1,2}(?:\.\d{1,4})?) "
    r"(?P<metric>TTFT|TPOT|ITL|E2EL|E2E Latency) \(ms\)$"
)
_LATENCY_KEY = re.compile(
    r"^(?P<stat>mean|median|std|min|max|p\d{1,2}(?:\.\d{1,4})?)_(?P<metric>ttft|tpot|itl|e2el|e2e_latency)_ms$"
)
_METRIC = {"TTFT": "ttft", "TPOT": "tpot", "ITL": "itl", "E2EL": "e2e", "E2E Latency": "e2e",
           "ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e", "e2e_latency": "e2e"}  # fmt: skip
_MAX_TEXT = 1000  # longest string value kept from an output

Kind = Literal["int", "float", "num", "rate", "cap", "str"]

# console label -> (ServingSummary field, how its value reads); labels as vLLM and SGLang print them
_CONSOLE: dict[str, tuple[str, Kind]] = {
    "Backend": ("backend", "str"),
    "Traffic request rate": ("request_rate", "rate"),
    "Request rate configured (RPS)": ("request_rate", "rate"),
    "Burstiness factor": ("burstiness", "float"),
    "Max request concurrency": ("max_concurrency", "cap"),
    "Max reqeuest concurrency": ("max_concurrency", "cap"),  # SGLang's spelling until late 2024
    "Maximum request concurrency": ("max_concurrency", "cap"),
    "Successful requests": ("completed", "int"),
    "Failed requests": ("failed", "int"),
    "Benchmark duration (s)": ("duration_s", "float"),
    "Total input tokens": ("total_input_tokens", "int"),
    "Total generated tokens": ("total_output_tokens", "int"),
    "Total generated tokens (retokenized)": ("total_output_tokens_retokenized", "int"),
    "Request throughput (req/s)": ("request_throughput", "float"),
    "Request goodput (req/s)": ("request_goodput", "float"),
    "Input token throughput (tok/s)": ("input_throughput", "float"),
    "Output token throughput (tok/s)": ("output_throughput", "float"),
    "Peak output token throughput (tok/s)": ("peak_output_throughput", "float"),
    "Peak concurrent requests": ("peak_concurrent_requests", "float"),
    "Total Token throughput (tok/s)": ("total_token_throughput", "float"),
    "Total token throughput (tok/s)": ("total_token_throughput", "float"),
    "Total throughput (tok/s)": ("total_token_throughput", "float"),
    "Concurrency": ("mean_concurrency", "float"),
}
# what vLLM prints before its summary block (the Namespace line is read for the model only)
_PREAMBLE = {"Traffic request rate", "Burstiness factor", "Maximum request concurrency"}
_REQUIRED_CONSOLE = ("Successful requests", "Benchmark duration (s)")
# the sections of the summary block whose lines are read (vLLM's and SGLang's headings, lower case);
# a section under any other heading is kept aside whole and named, never a reason to refuse
_KNOWN_SECTIONS = {"time to first token", "time per output token (excl. 1st token)", "inter-token latency",
                   "end-to-end latency"}  # fmt: skip

# JSON key -> (ServingSummary field, kind), per tool
_JSON_COMMON: dict[str, tuple[str, Kind]] = {
    "backend": ("backend", "str"),
    "request_rate": ("request_rate", "rate"),
    "burstiness": ("burstiness", "float"),
    "max_concurrency": ("max_concurrency", "cap"),
    "duration": ("duration_s", "float"),
    "completed": ("completed", "int"),
    "failed": ("failed", "int"),
    "total_input_tokens": ("total_input_tokens", "int"),
    "total_output_tokens": ("total_output_tokens", "int"),
    "request_throughput": ("request_throughput", "float"),
    "output_throughput": ("output_throughput", "float"),
}
_JSON_VLLM: dict[str, tuple[str, Kind]] = {
    **_JSON_COMMON,
    "date": ("date", "str"),
    "label": ("label", "str"),
    "model_id": ("model", "str"),
    "tokenizer_id": ("tokenizer", "str"),
    "num_prompts": ("num_prompts", "int"),
    "request_goodput": ("request_goodput", "float"),
    "request_goodput:": ("request_goodput", "float"),  # the key's spelling in vLLM until mid-2025
    "total_token_throughput": ("total_token_throughput", "float"),
    "max_output_tokens_per_s": ("peak_output_throughput", "float"),
    "max_concurrent_requests": ("peak_concurrent_requests", "float"),
}
_JSON_SGLANG: dict[str, tuple[str, Kind]] = {
    **_JSON_COMMON,
    "dataset_name": ("dataset", "str"),
    "total_output_tokens_retokenized": ("total_output_tokens_retokenized", "int"),
    "input_throughput": ("input_throughput", "float"),
    "total_throughput": ("total_token_throughput", "float"),
    "concurrency": ("mean_concurrency", "float"),
}
_REQUIRED_JSON = {"vllm bench serve": ("model_id", "completed", "duration"),
                  "sglang bench_serving": ("backend", "completed", "duration")}  # fmt: skip
# per-request lists of vLLM (--save-detailed) and SGLang (--output-details): not read
_PER_REQUEST = {"input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
                "start_times", "end_times"}  # fmt: skip


def _q(text: object, limit: int = 60) -> str:
    """A value from the file, quoted for a one-line message."""
    s = repr(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _raw_on_error(parse: Callable[[str], list[ServingSummary]]) -> Callable[[str], list[ServingSummary]]:
    """Any slip on malformed text (a bad value, deep JSON, a model check) becomes ParseError(raw=text)."""

    @functools.wraps(parse)
    def wrapper(text: str) -> list[ServingSummary]:
        try:
            return parse(text)
        except ParseError as e:
            if e.raw == text:
                raise
            raise ParseError(e.message, raw=text, hint=e.hint) from e
        except ValidationError as e:
            where, why = first_error(e)
            raise ParseError(f"{where}: {one_line(ValueError(why))}", raw=text) from e
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            ArithmeticError,
            RecursionError,
            yaml.YAMLError,
        ) as e:
            raise ParseError(f"malformed output: {one_line(e)}", raw=text) from e

    return wrapper


def _body(text: str) -> str:
    """The text without the `# source:` line fixtures carry."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# source:"))


def _convert(kind: Kind, value: Any, name: str) -> Any:
    """A stated value as the field takes it; raises ParseError naming the figure on a wrong type."""
    if value is None:
        return None
    if kind == "str":
        if not isinstance(value, str) or len(value) > _MAX_TEXT:
            raise ParseError(f"{name} is not a text of at most {_MAX_TEXT} characters: {_q(value)}")
        return value
    if isinstance(value, str):
        v = value.strip()
        if kind == "rate" and v.lower() in ("inf", "infinity"):
            return "inf"
        if kind == "cap" and v in ("not set", "None", "none"):
            return None
        if not _NUMBER.match(v):
            raise ParseError(f"{name} is not a number: {_q(value)}")
        value = int(v) if kind != "float" and kind != "rate" and re.fullmatch(r"[-+]?\d+", v) else float(v)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(f"{name} is not a number: {_q(value)}")
    if math.isinf(value) and kind == "rate" and value > 0:
        return "inf"
    if math.isnan(value):
        return None  # NaN: what the tools write where no request succeeded; not stated
    if math.isinf(value):
        raise ParseError(f"{name} is not a finite number: {_q(value)}")
    if kind in ("int", "cap"):
        if value != int(value) or value < 0:
            raise ParseError(f"{name} is not a count: {_q(value)}")
        return int(value)
    return value if kind == "num" else float(value)


def _scalar(value: Any) -> FigureValue:
    """A value kept in `other`; lists and objects are not kept (documented)."""
    if isinstance(value, str):
        return value[:_MAX_TEXT]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value if value is None or isinstance(value, bool | int | float) else None


def _latency_stat(
    lat: dict[str, dict[str, Any]], metric: str, stat: str, value: float | None, name: str
) -> None:
    entry = lat.setdefault(_METRIC[metric], {"percentiles": {}})
    stat = stat.lower()
    if stat.startswith("p"):
        if stat in entry["percentiles"]:
            raise ParseError(f"{name} is stated twice")
        if value is not None:
            entry["percentiles"][stat] = value
    else:
        if stat in entry:
            raise ParseError(f"{name} is stated twice")
        entry[stat] = value


# --- console summaries (vLLM, SGLang) ---------------------------------------------------------------


def _console_tool(block: dict[str, str]) -> Literal["vllm bench serve", "sglang bench_serving"]:
    """SGLang prints its backend and the retokenized count in the block; vLLM does not."""
    return (
        "sglang bench_serving"
        if "Backend" in block or "Total generated tokens (retokenized)" in block
        else "vllm bench serve"
    )


def is_sglang_console(text: str) -> bool:
    """A summary block with SGLang's own lines (for detection)."""
    return bool(HEADER.search(text)) and bool(
        re.search(r"^Backend:[ \t]*\S|^Total generated tokens \(retokenized\):", text, re.M)
    )


def _blocks(lines: list[str]) -> Iterator[tuple[list[str], list[tuple[int, str]]]]:
    """(preamble lines, numbered block lines) per summary block; raises on a block cut short."""
    start = 0
    i = 0
    while i < len(lines):
        if HEADER.match(lines[i]):
            preamble = lines[start:i]
            body: list[tuple[int, str]] = []
            j = i + 1
            while j < len(lines) and not _RULE_END.match(lines[j]):
                if HEADER.match(lines[j]):
                    break
                body.append((j + 1, lines[j]))
                j += 1
            if j >= len(lines) or not _RULE_END.match(lines[j]):
                n = sum(1 for ln in lines[: i + 1] if HEADER.match(ln))
                raise ParseError(
                    f"summary {n} is cut short: no closing ==== line after its last figure",
                    hint="the output was truncated; copy the whole block",
                )
            yield preamble, body
            start = i = j + 1
            continue
        i += 1


def _namespace_value(preamble: list[str], key: str) -> str | None:
    """`key='…'` from the `Namespace(…)` line vLLM prints with its arguments."""
    for ln in preamble:
        if ln.startswith("Namespace("):
            m = re.search(rf"\b{key}='([^'\n]{{0,{_MAX_TEXT}}})'", ln)
            if m:
                return m.group(1)
    return None


@_raw_on_error
def parse_console(text: str) -> list[ServingSummary]:
    """Every "Serving Benchmark Result" block of a vLLM or SGLang console log, in order."""
    lines = _body(text).splitlines()
    if not any(HEADER.match(ln) for ln in lines):
        raise ParseError(
            "no '==== Serving Benchmark Result ====' block",
            hint="give the console output of vllm bench serve or sglang.bench_serving",
        )
    out: list[ServingSummary] = []
    for index, (preamble, body) in enumerate(_blocks(lines)):
        where = f"summary {index + 1}"
        stated: dict[str, str] = {}
        aside: dict[str, list[str]] = {}
        section: str | None = None  # the unknown section the line is in, if any
        for no, ln in body:
            if _SECTION.match(ln):
                name = ln.strip().strip("-").strip()
                section = None if name.lower() in _KNOWN_SECTIONS else name[:100]
                if section is not None:
                    aside.setdefault(section, [])
                continue
            if section is not None:
                aside[section].append(ln.rstrip())
                continue
            if not ln.strip():
                continue
            m = _LABEL_LINE.match(ln)
            if m is None or m.group("value") is None:
                raise ParseError(f"{where}, line {no}: not 'label: value': {_q(ln.strip())}",
                                 hint="the summary is cut or edited; copy it as printed")  # fmt: skip
            label = m.group("label").strip()
            if label in stated:
                raise ParseError(f"{where}: {label!r} is stated twice (two summaries pasted into one block?)")
            value = m.group("value")
            if (sm := _STRAY.match(value)) is not None:
                # a number, blanks, then text that is no part of it (a note pasted after the figure):
                # the number is read, the line kept aside as printed
                value = sm.group("number")
                aside.setdefault(STRAY_TEXT, []).append(ln.rstrip())
            stated[label] = value
        missing = [k for k in _REQUIRED_CONSOLE if k not in stated]
        if missing:
            raise ParseError(f"{where} states no {' and no '.join(repr(k) for k in missing)}",
                             hint="the summary is cut short; copy the whole block")  # fmt: skip
        # what vLLM prints before the block, where the block itself does not state it
        pre: dict[str, str] = {}
        for ln in preamble:
            m = _LABEL_LINE.match(ln.strip())
            if m and m.group("label") in _PREAMBLE and m.group("value"):
                # "1.0 (Poisson process)", "15.0 RPS.": the first word; a value that does not read is
                # left out (these lines are outside the summary and vary between versions)
                first = m.group("value").split()[0].rstrip(".")
                try:
                    _convert(_CONSOLE[m.group("label")][1], first, m.group("label"))
                except ParseError:
                    continue
                pre[m.group("label")] = first
        fields: dict[str, Any] = {}
        lat: dict[str, dict[str, Any]] = {}
        other: dict[str, FigureValue] = {}
        for label, value in [*pre.items(), *stated.items()]:
            lm = _LATENCY_LABEL.match(label)
            if lm:
                _latency_stat(
                    lat, lm.group("metric"), lm.group("stat"), _convert("float", value, label), label
                )
            elif label in _CONSOLE:
                field, kind = _CONSOLE[label]
                fields[field] = _convert(kind, value, label)
            else:
                other[label] = _convert("num", value, label) if _NUMBER.match(value) else _scalar(value)
        for name, kept in aside.items():
            for ln in kept:
                km = _LABEL_LINE.match(ln.strip())
                if km and km.group("value") and _NUMBER.match(km.group("value")):
                    other[f"{name}: {km.group('label').strip()}"[:200]] = _convert(
                        "num", km.group("value"), name
                    )
        model = _namespace_value(preamble, "model")
        out.append(
            ServingSummary(
                tool=_console_tool(stated),
                source_format="console",
                index=index,
                model=model,
                **fields,
                **{k: StatedLatency(**v) for k, v in lat.items()},
                other=other,
                sections_aside={k: "\n".join(v)[:_MAX_TEXT] for k, v in aside.items()} or None,
            )
        )
    return out


# --- JSON results (vLLM --save-result, SGLang --output-file) -----------------------------------------


def json_values(text: str) -> list[Any]:
    """Every JSON value in the text, one after another (one document, or one per line)."""
    body = _body(text)
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = 0
    while True:
        while pos < len(body) and body[pos] in " \t\r\n":
            pos += 1
        if pos >= len(body):
            return values
        try:
            value, pos = decoder.raw_decode(body, pos)
        except json.JSONDecodeError as e:
            line = body.count("\n", 0, e.pos) + 1
            raise ParseError(f"JSON value {len(values) + 1} (line {line}) is not valid JSON: {e.msg}",
                             hint="the file is cut short or edited") from e  # fmt: skip
        values.append(value)


def _from_json(
    obj: Any, index: int, tool: Literal["vllm bench serve", "sglang bench_serving"]
) -> ServingSummary:
    where = f"result {index + 1}"
    if not isinstance(obj, dict):
        raise ParseError(f"{where} is not a JSON object but {type(obj).__name__}")
    table = _JSON_VLLM if tool == "vllm bench serve" else _JSON_SGLANG
    missing = [k for k in _REQUIRED_JSON[tool] if k not in obj]
    if missing:
        other_tool = "sglang" if tool == "vllm bench serve" else "vllm"
        hint = f"a result of another tool (--kind {other_tool}-bench-json) or version? docs/serving.md"
        raise ParseError(f"{where} has no {', '.join(repr(k) for k in missing)}: not a {tool} result",
                         hint=hint)  # fmt: skip
    fields: dict[str, Any] = {}
    lat: dict[str, dict[str, Any]] = {}
    other: dict[str, FigureValue] = {}
    for key, value in obj.items():
        name = f"{where}: {key!r}"
        km = _LATENCY_KEY.match(key) if isinstance(key, str) else None
        if km:
            _latency_stat(lat, km.group("metric"), km.group("stat"), _convert("float", value, name), name)
        elif key in table:
            field, kind = table[key]
            if field in fields and fields[field] is not None:
                raise ParseError(f"{where}: {field} is stated twice")
            fields[field] = _convert(kind, value, name)
        elif key in _PER_REQUEST or isinstance(value, list | dict):
            continue  # per-request lists and nested objects: not read (docs/serving.md)
        else:
            other[str(key)[:200]] = _scalar(value)
    return ServingSummary(
        tool=tool,
        source_format="json",
        index=index,
        **fields,
        **{k: StatedLatency(**v) for k, v in lat.items()},
        other=other,
    )


def _json_reader(
    tool: Literal["vllm bench serve", "sglang bench_serving"],
) -> Callable[[str], list[ServingSummary]]:
    @_raw_on_error
    def parse(text: str) -> list[ServingSummary]:
        values = json_values(text)
        if not values:
            raise ParseError("no JSON result in the file")
        return [_from_json(v, i, tool) for i, v in enumerate(values)]

    return parse


parse_vllm_json = _json_reader("vllm bench serve")
parse_sglang_jsonl = _json_reader("sglang bench_serving")


# --- guidellm benchmarks report (JSON or YAML) -------------------------------------------------------

# guidellm metric -> (ServingSummary latency, factor to milliseconds). By guidellm's definitions
# (its docs/guides/metrics.md), its inter-token latency is per request and excludes the first
# token: orch's TPOT; its time per output token includes the first token. guidellm states no
# distribution of the gaps between chunks (orch's ITL).
_GUIDELLM_LATENCY = {
    "time_to_first_token_ms": ("ttft", 1.0),
    "inter_token_latency_ms": ("tpot", 1.0),
    "time_per_output_token_ms": ("tpot_with_first", 1.0),
    "request_latency": ("e2e", 1000.0),  # seconds
}
# guidellm metric -> ServingSummary field, from the mean of its successful distribution
_GUIDELLM_RATE = {
    "requests_per_second": "request_throughput",
    "output_tokens_per_second": "output_throughput",
    "tokens_per_second": "total_token_throughput",
    "request_concurrency": "mean_concurrency",
}
# guidellm metric -> ServingSummary field, from the total of its successful distribution
_GUIDELLM_TOTAL = {"prompt_token_count": "total_input_tokens", "output_token_count": "total_output_tokens"}
_GUIDELLM_REQUIRED = ("time_to_first_token_ms", "request_latency", "requests_per_second")


def _percentile_name(key: str) -> str:
    """guidellm's p001/p01/p05/p10/p999 as percent: p0.1, p1, p5, p10, p99.9."""
    digits = key[1:]
    if not digits.isdigit():
        raise ParseError(f"percentile {key!r} is not pNN")
    if len(digits) == 2:
        value = float(digits)
    else:  # p001 = 0.1, p999 = 99.9
        value = float(digits[:2] + "." + digits[2:]) if len(digits) > 2 else float(digits)
    return f"p{value:g}"


def _dist(obj: Any, name: str, factor: float = 1.0) -> StatedLatency:
    """A guidellm distribution summary ({mean, median, std_dev, min, max, count, percentiles})."""
    if not isinstance(obj, dict):
        raise ParseError(f"{name} is not a distribution summary")
    num = functools.partial(_convert, "float")

    def scaled(key: str) -> float | None:
        v = num(obj.get(key), f"{name}.{key}")
        return None if v is None else v * factor

    pct = obj.get("percentiles") or {}
    if not isinstance(pct, dict):
        raise ParseError(f"{name}.percentiles is not an object")
    percentiles: dict[str, float] = {}
    for k, v in pct.items():
        value = num(v, f"{name}.percentiles.{k}")
        if value is not None:
            percentiles[_percentile_name(str(k))] = value * factor
    return StatedLatency(
        mean=scaled("mean"), median=scaled("median"), std=scaled("std_dev"), min=scaled("min"),
        max=scaled("max"), percentiles=percentiles, n=_convert("int", obj.get("count"), f"{name}.count"),
    )  # fmt: skip


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _path(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def _guidellm_benchmark(
    b: Any, index: int, fmt: Literal["json", "yaml"], version: str | None
) -> ServingSummary:
    where = f"benchmark {index + 1}"
    if not isinstance(b, dict):
        raise ParseError(f"{where} is not an object")
    metrics = b.get("metrics")
    if not isinstance(metrics, dict):
        raise ParseError(f"{where} has no metrics", hint="a guidellm report of another schema?")
    missing = [k for k in _GUIDELLM_REQUIRED if k not in metrics]
    if missing:
        raise ParseError(
            f"{where}: metrics has no {', '.join(missing)}",
            hint="a guidellm report of another schema? docs/serving.md names the one read",
        )

    def successful(metric: str) -> Any:
        s = _path(metrics, metric, "successful")
        if s is None:
            raise ParseError(f"{where}: metrics.{metric} has no 'successful' summary")
        return s

    fields: dict[str, Any] = {}
    for metric, (field, factor) in _GUIDELLM_LATENCY.items():
        if metric in metrics:
            fields[field] = _dist(successful(metric), f"{where}.metrics.{metric}.successful", factor)
    for metric, field in _GUIDELLM_RATE.items():
        if metric in metrics:
            fields[field] = _convert("float", _path(successful(metric), "mean"), f"{where}.{metric}.mean")
    for metric, field in _GUIDELLM_TOTAL.items():
        if metric in metrics:
            fields[field] = _convert(
                "int", _path(successful(metric), "total_sum"), f"{where}.{metric}.total_sum"
            )
    # schema version 2 (guidellm 0.4+): request_totals under metrics, the strategy, backend and
    # profile under config; before it: request_totals, args and worker beside metrics
    v2 = "request_totals" in metrics and "request_totals" not in b
    totals = metrics.get("request_totals") if v2 else b.get("request_totals")
    if not isinstance(totals, dict):
        raise ParseError(f"{where} has no request_totals (neither beside its metrics nor in them)")
    fields["completed"] = _convert("int", totals.get("successful"), f"{where}.request_totals.successful")
    fields["failed"] = _convert("int", totals.get("errored"), f"{where}.request_totals.errored")
    fields["incomplete"] = _convert("int", totals.get("incomplete"), f"{where}.request_totals.incomplete")
    fields["duration_s"] = _convert("float", b.get("duration"), f"{where}.duration")
    strategy = _path(b, "config" if v2 else "args", "strategy")
    if not isinstance(strategy, dict):
        strategy = {}
    stype = _convert("str", strategy.get("type_"), f"{where}.args.strategy.type_")
    rate = strategy.get("rate")
    streams = strategy.get("streams")
    if stype == "synchronous":
        fields["max_concurrency"] = 1
    elif streams is not None:
        fields["max_concurrency"] = _convert("cap", streams, f"{where}.args.strategy.streams")
    elif strategy.get("max_concurrency") is not None:
        fields["max_concurrency"] = _convert(
            "cap", strategy.get("max_concurrency"), f"{where}.args.strategy.max_concurrency"
        )
    if rate is not None:
        fields["request_rate"] = _convert("rate", rate, f"{where}.args.strategy.rate")
    # as guidellm's console names its benchmarks: constant@2, concurrent@4
    at = rate if isinstance(rate, int | float) else streams if v2 and isinstance(streams, int) else None
    label = f"{stype}@{at:g}" if stype is not None and at is not None else stype
    start = _convert("float", b.get("start_time"), f"{where}.start_time")
    date = (
        datetime.fromtimestamp(start, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if start is not None and 0 <= start < 1e11  # epoch seconds; anything else is not a date
        else None
    )
    loader = _obj(b.get("request_loader"))
    other: dict[str, FigureValue] = {}
    if v2:
        worker = _obj(_path(b, "config", "backend"))
        keys = {"backend_type": "kind", "backend_target": "target", "backend_model": "model"}
        wpath, profile_key = f"{where}.config.backend", ("config", "profile", "kind")
    else:
        worker = _obj(b.get("worker"))
        keys = {k: k for k in ("backend_type", "backend_target", "backend_model")}
        wpath, profile_key = f"{where}.worker", ("args", "profile", "type_")
    target = worker.get(keys["backend_target"])
    if target is not None:
        other["backend_target"] = _convert("str", target, f"{wpath}.{keys['backend_target']}")
    profile = _path(b, *profile_key)
    if profile is not None:
        other["profile"] = _convert("str", profile, f"{where}.{'.'.join(profile_key)}")
    return ServingSummary(
        tool="guidellm", tool_version=version, source_format=fmt, index=index, label=label, date=date,
        backend=_convert("str", worker.get(keys["backend_type"]), f"{wpath}.{keys['backend_type']}"),
        model=_convert("str", worker.get(keys["backend_model"]), f"{wpath}.{keys['backend_model']}"),
        tokenizer=_convert("str", loader.get("processor"), f"{where}.request_loader.processor"),
        dataset=_convert("str", loader.get("data"), f"{where}.request_loader.data")
        if isinstance(loader.get("data"), str) else None,
        other=other, **fields,
    )  # fmt: skip


@_raw_on_error
def parse_guidellm(text: str) -> list[ServingSummary]:
    """Every benchmark of a guidellm benchmarks report, JSON or YAML."""
    body = _body(text)
    fmt: Literal["json", "yaml"] = "json" if body.lstrip().startswith("{") else "yaml"
    if fmt == "json":
        values = json_values(body)
        if len(values) != 1:
            raise ParseError(f"a guidellm report is one JSON document, this file holds {len(values)}")
        doc = values[0]
    else:
        doc = yaml.safe_load(body)
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not isinstance(benchmarks, list) or not benchmarks:
        raise ParseError("no 'benchmarks' list: not a guidellm benchmarks report")
    version = _path(doc, "metadata", "guidellm_version")
    version = version if isinstance(version, str) and len(version) <= 100 else None
    return [_guidellm_benchmark(b, i, fmt, version) for i, b in enumerate(benchmarks)]


# --- MLPerf Inference loadgen mlperf_log_summary.txt --------------------------------------------------

MLPERF_HEADER = re.compile(r"^MLPerf Results Summary[ \t]*$", re.M)
_MLPERF_RULE = re.compile(r"^={10,}[ \t]*$")
_MLPERF_PCT = re.compile(
    r"^(?P<q>\d{1,2}(?:\.\d{1,4})?) percentile (?P<what>latency|first token latency|"
    r"time to output token) \(ns\)$"
)
_MLPERF_STAT = re.compile(
    r"^(?P<stat>Min|Max|Mean) (?P<what>latency|First Token latency|Time to Output Token) \(ns\)$"
)
_MLPERF_METRIC = {"latency": "E2EL", "first token latency": "TTFT", "time to output token": "TPOT"}
# loadgen label -> (ServingSummary field, kind); the rest of the summary goes to `other`
_MLPERF_FIELDS: dict[str, tuple[str, Kind]] = {
    "SUT name": ("backend", "str"),
    "Completed samples per second": ("request_throughput", "float"),
    "Samples per second": ("request_throughput", "float"),
    "Completed tokens per second": ("output_throughput", "float"),
    "Tokens per second": ("output_throughput", "float"),
}
_MLPERF_REQUIRED = ("Scenario", "Result is")


def _mlperf_pairs(lines: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """`label : value` pairs of the summary (the first repeat of a label is kept) and the blocks
    loadgen writes as a heading line followed by ` * ` lines (the early-stopping results)."""
    pairs: dict[str, str] = {}
    notes: dict[str, str] = {}
    heading: str | None = None
    for ln in lines:
        stripped = ln.strip()
        if not stripped or _MLPERF_RULE.match(stripped) or MLPERF_HEADER.match(stripped):
            heading = None
            continue
        if heading is not None and (ln.startswith(" ") or stripped.startswith("*")):
            text = stripped.removeprefix("*").strip()
            notes[heading] = f"{notes[heading]} {text}".strip()[:_MAX_TEXT]
            continue
        label, sep, value = stripped.partition(":")
        label, value = label.strip(), value.strip()
        if not sep or not label:
            heading = None
            continue  # "No warnings encountered during test." and the like: prose
        if not value:
            heading = label[:200]  # "TTFT Early Stopping Result:", "Recommendations:"
            notes.setdefault(heading, "")
            continue
        heading = None
        pairs.setdefault(label[:200], value)
    return pairs, notes


@_raw_on_error
def parse_mlperf_summary(text: str) -> list[ServingSummary]:
    """The figures of one MLPerf Inference loadgen mlperf_log_summary.txt (any scenario).

    Latencies are stated in ns and read in ms, from the `NN.NN percentile` and Min/Max/Mean
    lines of its Additional Stats (the result's own `90.0th percentile latency` stays in
    `other`): `latency` is E2E, `first token latency` TTFT and `time to output token` TPOT
    (loadgen's per-sample figure, first token excluded). The Server scenario's `target_qps` is
    the Poisson rate the run aimed at (request_rate); the scheduled and completed samples/s, the
    result (VALID/INVALID), every `satisfied` line and the early-stopping results are kept in
    `other` under loadgen's own words.
    """
    lines = _body(text).splitlines()
    if not any(MLPERF_HEADER.match(ln) for ln in lines):
        raise ParseError("no 'MLPerf Results Summary' heading",
                         hint="give loadgen's mlperf_log_summary.txt")  # fmt: skip
    pairs, notes = _mlperf_pairs(lines)
    missing = [k for k in _MLPERF_REQUIRED if k not in pairs]
    if missing:
        raise ParseError(f"the summary states no {' and no '.join(repr(k) for k in missing)}",
                         hint="the file is cut short; copy the whole mlperf_log_summary.txt")  # fmt: skip
    result = pairs["Result is"]
    if result not in ("VALID", "INVALID"):
        raise ParseError(f"'Result is' is neither VALID nor INVALID: {_q(result)}")
    fields: dict[str, Any] = {}
    lat: dict[str, dict[str, Any]] = {}
    other: dict[str, FigureValue] = {}
    for label, value in pairs.items():
        pm, sm = _MLPERF_PCT.match(label), _MLPERF_STAT.match(label)
        if pm or sm:
            ns = _convert("float", value, label)
            ms = None if ns is None else ns / 1e6
            if pm:
                metric = _MLPERF_METRIC[pm.group("what")]
                _latency_stat(lat, metric, f"p{float(pm.group('q')):g}", ms, label)
            elif sm:
                _latency_stat(lat, _MLPERF_METRIC[sm.group("what").lower()], sm.group("stat"), ms, label)
        elif label in _MLPERF_FIELDS:
            field, kind = _MLPERF_FIELDS[label]
            fields[field] = _convert(kind, value, label)
        else:
            other[label] = _convert("num", value, label) if _NUMBER.match(value) else _scalar(value)
    # an early-stopping heading with nothing under it is kept, empty: loadgen printed no result for it
    other.update({k: v for k, v in notes.items() if v or k.endswith("Early Stopping Result")})
    scenario = pairs["Scenario"]
    if scenario == "Server" and "target_qps" in pairs:
        fields["request_rate"] = _convert("rate", pairs["target_qps"], "target_qps")
    for entry in lat.values():  # loadgen states the median as its 50.00 percentile
        entry.setdefault("median", entry["percentiles"].get("p50"))
    return [
        ServingSummary(
            tool="mlperf loadgen", source_format="console", index=0,
            label=f"{scenario} {pairs.get('Mode', '')}".strip()[:250] + f": {result}", **fields,
            **{k: StatedLatency(**v) for k, v in lat.items()}, other=other,
        )
    ]  # fmt: skip


# --- NVIDIA GenAI-Perf console table ------------------------------------------------------------------

GENAI_PERF_HEADER = re.compile(r"^┃\s*Statistic\s*┃(?:\s*[a-z0-9]+\s*┃)+\s*$", re.M)
_GENAI_STAT = re.compile(r"^(?:avg|min|max|std|p\d{1,2}(?:\.\d{1,4})?)$")
# genai-perf row (lower case, unit words as printed) -> (latency, None) or (None, field)
_GENAI_ROWS: dict[str, tuple[str | None, str | None]] = {
    "time to first token (ms)": ("ttft", None),
    # genai-perf's inter-token latency is per request, (request latency - TTFT) / (output tokens - 1)
    # by its docs: orch's TPOT, not the pooled gaps between chunks
    "inter token latency (ms)": ("tpot", None),
    "request latency (ms)": ("e2e", None),
    "output token throughput (per sec)": (None, "output_throughput"),
    "output token throughput (tokens/sec)": (None, "output_throughput"),
    "request throughput (per sec)": (None, "request_throughput"),
    "request goodput (per sec)": (None, "request_goodput"),
    "request count (count)": (None, "completed"),
}
_GENAI_NOT_STATED = ("N/A", "")


def _genai_cell(value: str, name: str) -> float | None:
    """A cell as printed: thousands separators dropped; N/A or empty is not stated."""
    v = value.strip()
    if v in _GENAI_NOT_STATED:
        return None
    if v.endswith("…"):
        raise ParseError(f"{name} is cut by the table width: {_q(v)}", hint="print the table wider")
    number: float | None = _convert("float", v.replace(",", ""), name)
    return number


@_raw_on_error
def parse_genai_perf_console(text: str) -> list[ServingSummary]:
    """The LLM Metrics table GenAI-Perf prints, with the `label: value` lines the 2024 layout
    prints below it (throughputs, goodput). A row wrapped onto a second line (`Output Token
    Throughput Per User` / `(tokens/sec/user)`) is joined; a row the table does not have (TTFT and
    ITL without --streaming) leaves its field empty."""
    lines = _body(text).splitlines()
    starts = [i for i, ln in enumerate(lines) if GENAI_PERF_HEADER.match(ln.strip())]
    if not starts:
        raise ParseError("no '┃ Statistic ┃ avg ┃ …' table header",
                         hint="give GenAI-Perf's console output (its LLM Metrics table)")  # fmt: skip
    out: list[ServingSummary] = []
    for index, start in enumerate(starts):
        where = f"table {index + 1}"
        stats = [c.strip() for c in lines[start].strip().strip("┃").split("┃")][1:]
        bad = [c for c in stats if not _GENAI_STAT.match(c)]
        if bad:
            raise ParseError(f"{where}: column {_q(bad[0])} is not a statistic (avg, min, max, pNN)")
        rows: list[tuple[str, list[str]]] = []
        end = start + 1
        for end in range(start + 1, len(lines)):
            ln = lines[end].strip()
            if ln.startswith("└"):
                break
            if not ln.startswith("│"):
                continue  # the rule under the header
            cells = [c.strip() for c in ln.strip("│").split("│")]
            if len(cells) != len(stats) + 1:
                raise ParseError(f"{where}, line {end + 1}: {len(cells)} cells, the header has "
                                 f"{len(stats) + 1}: {_q(ln)}")  # fmt: skip
            if rows and cells[0].startswith("(") and not any(cells[1:]):
                label, values = rows[-1]
                rows[-1] = (f"{label} {cells[0]}", values)  # a label wrapped onto the next line
                continue
            rows.append((cells[0], cells[1:]))
        else:
            raise ParseError(f"{where} is cut short: no closing └ line", hint="copy the whole table")
        fields: dict[str, Any] = {}
        lat: dict[str, dict[str, Any]] = {}
        other: dict[str, FigureValue] = {}
        for label, values in rows:
            name = f"{where}: {label!r}"
            key = label.lower()
            known = _GENAI_ROWS.get(key)
            read = {st: _genai_cell(v, f"{name} {st}") for st, v in zip(stats, values, strict=True)}
            if known is not None and known[0] is not None:
                metric = known[0]
                if metric in lat:
                    raise ParseError(f"{name} is stated twice")
                lat[metric] = {
                    "mean": read.get("avg"), "min": read.get("min"), "max": read.get("max"),
                    "std": read.get("std"),
                    "percentiles": {st: v for st, v in read.items() if st.startswith("p") and v is not None},
                }  # fmt: skip
            elif known is not None and known[1] is not None:
                field = known[1]
                fields[field] = _convert("int" if field == "completed" else "float", read.get("avg"), name)
            else:
                other.update({f"{label[:150]} {st}": v for st, v in read.items() if v is not None})
        for ln in lines[end + 1 : starts[index + 1] if index + 1 < len(starts) else len(lines)]:
            m = _LABEL_LINE.match(ln.strip())
            below = _GENAI_ROWS.get(m.group("label").strip().lower()) if m and m.group("value") else None
            if m and below is not None and below[1] is not None:
                fields[below[1]] = _convert("float", m.group("value").replace(",", ""), m.group("label"))
        for entry in lat.values():
            entry["median"] = entry["percentiles"].get("p50")
        out.append(
            ServingSummary(
                tool="genai-perf", source_format="console", index=index, **fields,
                **{k: StatedLatency(**v) for k, v in lat.items()}, other=other,
            )
        )  # fmt: skip
    return out


# GenAI-Perf export key -> (latency, None) or (None, field); the same metrics as its console table
_GENAI_JSON: dict[str, tuple[str | None, str | None]] = {
    "time_to_first_token": ("ttft", None),
    "inter_token_latency": ("tpot", None),  # per request: orch's TPOT (see _GENAI_ROWS)
    "request_latency": ("e2e", None),
    "output_token_throughput": (None, "output_throughput"),
    "request_throughput": (None, "request_throughput"),
    "request_goodput": (None, "request_goodput"),
    "request_count": (None, "completed"),
    "benchmark_duration": (None, "duration_s"),
    "error_request_count": (None, "failed"),  # AIPerf's; its cancelled requests among them
}
_GENAI_UNITS = {"time_to_first_token": "ms", "inter_token_latency": "ms", "request_latency": "ms",
                "benchmark_duration": "sec"}  # fmt: skip
# AIPerf's profile_export_aiperf.json: the metric objects under "records", keyed by tag, with the tag and
# a header beside the statistics; the same metrics, some under shorter tags
_AIPERF_TAGS = {"ttft": "time_to_first_token", "ttst": "time_to_second_token"}
_AIPERF_TEXT = ("tag", "header")
_GENAI_CONFIG: dict[str, tuple[str, Kind]] = {
    "backend": ("backend", "str"),
    "concurrency": ("max_concurrency", "cap"),
    "request_rate": ("request_rate", "rate"),
    "tokenizer": ("tokenizer", "str"),
}


@_raw_on_error
def parse_genai_perf_json(text: str) -> list[ServingSummary]:
    """GenAI-Perf's JSON export: each metric an object {unit, avg, min, max, std, pNN}, and the
    run's settings in `input_config` (concurrency or request rate, model, backend). AIPerf's export
    (profile_export_aiperf.json) holds the same objects under `records`, each with its tag, header
    and count, and its settings under `input_config.endpoint`/`.loadgen`. A latency in another unit
    than ms, or a duration in another than sec, is refused, not scaled by guess."""
    values = json_values(text)
    if len(values) != 1 or not isinstance(values[0], dict):
        raise ParseError("a GenAI-Perf export is one JSON object")
    top: dict[str, Any] = values[0]
    aiperf = isinstance(top.get("records"), dict)
    doc: dict[str, Any] = (
        {_AIPERF_TAGS.get(str(k), str(k)): v for k, v in top["records"].items()} if aiperf else top
    )
    if not any(isinstance(doc.get(k), dict) and "unit" in doc[k] for k in _GENAI_JSON):
        raise ParseError("no metric object with a 'unit' (request_throughput, time_to_first_token, …)",
                         hint="give GenAI-Perf's profile_export_genai_perf.json")  # fmt: skip
    fields: dict[str, Any] = {}
    lat: dict[str, dict[str, Any]] = {}
    other: dict[str, FigureValue] = {}
    for key, metric in doc.items():
        if key == "input_config" or not isinstance(metric, dict) or "unit" not in metric:
            continue
        name = f"{key!s:.100}"
        unit = metric.get("unit")
        if key in _GENAI_UNITS and unit != _GENAI_UNITS[key]:
            raise ParseError(f"{name} is in {_q(unit)}, not {_GENAI_UNITS[key]}")
        skip = ("unit", *_AIPERF_TEXT) if aiperf else ("unit",)
        stats = {str(k): _convert("float", v, f"{name}.{k}") for k, v in metric.items() if k not in skip}
        known = _GENAI_JSON.get(key)
        if known is not None and known[0] is not None:
            pct = {
                k: v for k, v in stats.items() if re.fullmatch(r"p\d{1,2}(?:\.\d{1,4})?", k) and v is not None
            }
            lat[known[0]] = {
                "mean": stats.get("avg"), "median": pct.get("p50"), "min": stats.get("min"),
                "max": stats.get("max"), "std": stats.get("std"), "percentiles": pct,
                "n": _convert("int", metric.get("count"), f"{name}.count"),
            }  # fmt: skip
        elif known is not None and known[1] is not None:
            kind: Kind = "int" if known[1] == "completed" else "float"
            fields[known[1]] = _convert(kind, metric.get("avg"), f"{name}.avg")
        else:
            other.update({f"{name} {k}": v for k, v in stats.items() if v is not None})
    config = _obj(top.get("input_config"))
    if aiperf:  # its settings grouped: endpoint (model_names, type, streaming), loadgen (concurrency …)
        endpoint, loadgen = _obj(config.get("endpoint")), _obj(config.get("loadgen"))
        config = {**loadgen, "model": endpoint.get("model_names"), "endpoint_type": endpoint.get("type"),
                  "streaming": endpoint.get("streaming")}  # fmt: skip
    for key, (field, kind) in _GENAI_CONFIG.items():
        if config.get(key) is not None:
            fields[field] = _convert(kind, config[key], f"input_config.{key}")
    model = config.get("model")
    if isinstance(model, list) and model and isinstance(model[0], str):
        fields["model"] = _convert("str", model[0], "input_config.model")
    for key in ("streaming", "endpoint_type", "service_kind"):
        if config.get(key) is not None:
            other[f"input_config.{key}"] = _scalar(config[key])
    return [
        ServingSummary(
            tool="aiperf" if aiperf else "genai-perf", source_format="json", index=0, **fields,
            **{k: StatedLatency(**v) for k, v in lat.items()}, other=other,
        )
    ]  # fmt: skip


# --- guidellm 0.4+ console tables ----------------------------------------------------------------------

GUIDELLM_CONSOLE = re.compile(r"^\|\s*Benchmark\s*\|.*\n\|\s*Strategy\s*\|", re.M)
# a table's title follows guidellm's status glyph (U+2139 information source, before "Request Latency
# Statistics (Completed Requests)"; its check, warning and cross marks on other lines)
_GL_TITLE = re.compile(r"^[\u2139\u2714\u26a0\u2716]\s+(?P<title>[A-Z][A-Za-z ]+?)\s*(?:\([^)]*\))?\s*$")
_GL_LOAD = re.compile(r"^(?P<kind>[a-z_]+)(?:@(?P<at>\d+(?:\.\d+)?))?$")
# (table, group, stat) -> ServingSummary field, from guidellm's Run Summary and Server Throughput tables
_GL_FIELDS: dict[tuple[str, str, str], tuple[str, Kind]] = {
    ("Run Summary Info", "Timings", "Dur Sec"): ("duration_s", "float"),
    ("Run Summary Info", "Requests", "Comp Tot"): ("completed", "int"),
    ("Run Summary Info", "Requests", "Inc Tot"): ("incomplete", "int"),
    ("Run Summary Info", "Requests", "Err Tot"): ("failed", "int"),
    ("Run Summary Info", "Input Tokens", "Comp Tot"): ("total_input_tokens", "int"),
    ("Run Summary Info", "Output Tokens", "Comp Tot"): ("total_output_tokens", "int"),
    ("Server Throughput Statistics", "Requests", "Concurrency Mean"): ("mean_concurrency", "float"),
    ("Server Throughput Statistics", "Requests", "Per Sec Mean"): ("request_throughput", "float"),
    ("Server Throughput Statistics", "Input Tokens", "Per Sec Mean"): ("input_throughput", "float"),
    ("Server Throughput Statistics", "Output Tokens", "Per Sec Mean"): ("output_throughput", "float"),
    ("Server Throughput Statistics", "Total Tokens", "Per Sec Mean"): ("total_token_throughput", "float"),
    # guidellm 0.3's pipe tables (Benchmarks Info, Benchmarks Stats)
    ("Benchmarks Info", "Metadata", "Duration (s)"): ("duration_s", "float"),
    ("Benchmarks Info", "Requests Made", "Comp"): ("completed", "int"),
    ("Benchmarks Info", "Requests Made", "Inc"): ("incomplete", "int"),
    ("Benchmarks Info", "Requests Made", "Err"): ("failed", "int"),
    ("Benchmarks Info", "Prompt Tok Total", "Comp"): ("total_input_tokens", "int"),
    ("Benchmarks Info", "Output Tok Total", "Comp"): ("total_output_tokens", "int"),
    ("Benchmarks Stats", "Request Stats", "Per Second"): ("request_throughput", "float"),
    ("Benchmarks Stats", "Request Stats", "Concurrency"): ("mean_concurrency", "float"),
    ("Benchmarks Stats", "Out Tok/sec", "mean"): ("output_throughput", "float"),
    ("Benchmarks Stats", "Tot Tok/sec", "mean"): ("total_token_throughput", "float"),
}
# Request Latency Statistics group -> (latency, factor to ms); as in the JSON report, guidellm's ITL is
# orch's TPOT and its TPOT counts the first token
_GL_LATENCY = {"Request Latency": ("e2e", 1000.0), "TTFT": ("ttft", 1.0), "ITL": ("tpot", 1.0),
               "TPOT": ("tpot_with_first", 1.0)}  # fmt: skip
# the same in guidellm 0.3's Benchmarks Stats table, its groups named with their units
_GL03_LATENCY = {"Req Latency (sec)": ("e2e", 1000.0), "TTFT (ms)": ("ttft", 1.0), "ITL (ms)": ("tpot", 1.0),
                 "TPOT (ms)": ("tpot_with_first", 1.0)}  # fmt: skip
GUIDELLM03_CONSOLE = re.compile(r"^Benchmarks (?:Info|Stats):[ \t]*\n=+[ \t]*\nMetadata +\|", re.M)
_GL03_RULE = re.compile(r"^-+(?:\|-+)+\s*$")


GUIDELLM01_CONSOLE = re.compile(r"^\s*│ │ (?:Requests Data|Performance Summary) by Benchmark\b", re.M)
# guidellm 0.1's rich boxes: Performance Stats' percentile lists (`Request Latency [1%, …, 99%] (sec)`,
# its ITL every gap between tokens pooled, orch's ITL) and Performance Summary's means, with units
_GL01_LIST = re.compile(r"^(?P<name>[A-Za-z ]+?) \[(?P<pcts>[^\]]*)\] \((?P<unit>sec|ms)\)$")
_GL01_METRIC = {"Request Latency": "e2e", "Time to First Token": "ttft", "Inter Token Latency": "itl"}
_GL01_TO_MS = {"sec": 1000.0, "ms": 1.0}
# Performance Summary column -> (field or latency, the unit it is printed in)
_GL01_SUMMARY = {"Requests per Second": ("request_throughput", "req/sec"), "Request Latency": ("e2e", "sec"),
                 "Time to First Token": ("ttft", "ms"), "Inter Token Latency": ("itl", "ms"),
                 "Output Token Throughput": ("output_throughput", "tokens/sec")}  # fmt: skip
_GL01_LOAD = re.compile(r"^(?P<kind>[a-z_]+)(?:@(?P<at>\d+(?:\.\d+)?) req/sec)?$")


def is_guidellm_console(text: str) -> bool:
    """guidellm's console report: 0.4+'s `| Benchmark |` over `| Strategy |`, 0.3's pipe tables, or
    0.1's rich boxes."""
    return bool(
        GUIDELLM_CONSOLE.search(text) or GUIDELLM03_CONSOLE.search(text) or GUIDELLM01_CONSOLE.search(text)
    )


def _gl01_tables(text: str) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """(title, column headers, rows) of each table inside guidellm 0.1's report box: the two frames
    (`│ │ … │ │`) taken off, header lines (┃) joined per column, a row whose first cell is empty
    (a value wrapped onto the next line) joined to the row before."""
    inner = [ln.strip()[3:-3].strip() for ln in text.splitlines() if re.match(r"^\s*│ │.*│ │\s*$", ln)]
    title = ""
    i = 0
    while i < len(inner):
        if not inner[i].startswith("┏"):
            title = inner[i] if inner[i] and inner[i][0] not in "┃│┡└" else title
            i += 1
            continue
        heads: list[list[str]] = []
        rows: list[list[str]] = []
        i += 1
        while i < len(inner) and inner[i].startswith("┃"):
            heads.append([c.strip() for c in inner[i].strip("┃").split("┃")])
            i += 1
        if i >= len(inner) or not inner[i].startswith("┡") or not heads:
            raise ParseError(
                f"table {title!r}: its header is not followed by a ┡ rule", hint="copy the table whole"
            )
        i += 1
        while i < len(inner) and inner[i].startswith("│"):
            cells = [c.strip() for c in inner[i].strip("│").split("│")]
            if rows and not cells[0] and len(cells) == len(rows[-1]):
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
            i += 1
        if i >= len(inner) or not inner[i].startswith("└"):
            raise ParseError(f"table {title!r} is cut short: no closing └ line", hint="copy the table whole")
        if any(len(r) != len(heads[0]) for r in [*heads, *rows]):
            raise ParseError(f"table {title!r}: rows of different widths", hint="copy the table as printed")
        yield title, [" ".join(h[k] for h in heads if h[k]) for k in range(len(heads[0]))], rows


def _gl01_unit(cell: str, unit: str, name: str) -> float | None:
    """`113.56 sec` read in its unit, which must be the one guidellm prints there."""
    value, _, printed = cell.partition(" ")
    if printed != unit:
        raise ParseError(f"{name} is not in {unit}: {_q(cell)}")
    number: float | None = _convert("float", value, name)
    return number


def _guidellm01(text: str) -> list[ServingSummary]:
    """guidellm 0.1's report: one ServingSummary per benchmark row (synchronous, asynchronous@0.85 req/sec,
    throughput) from its Requests Data, Tokens Data, Performance Stats and Performance Summary tables."""
    per: dict[str, dict[str, Any]] = {}
    lat: dict[str, dict[str, dict[str, Any]]] = {}
    other: dict[str, dict[str, FigureValue]] = {}
    for title, heads, rows in _gl01_tables(text):
        for row in rows:
            bench = row[0]
            if not _GL01_LOAD.match(bench):
                raise ParseError(f"table {title!r}: {_q(bench)} is not a benchmark name (synchronous …)")
            fields, blat, bother = (
                per.setdefault(bench, {}),
                lat.setdefault(bench, {}),
                other.setdefault(bench, {}),
            )
            for head, cell in zip(heads[1:], row[1:], strict=True):
                name = f"{title}: {head}"[:200]
                lm = _GL01_LIST.match(head)
                if title.startswith("Performance Stats") and lm and lm.group("name") in _GL01_METRIC:
                    pcts = re.findall(r"(\d+(?:\.\d+)?)%", lm.group("pcts"))
                    values = [v.strip() for v in cell.split(",")]
                    if len(values) != len(pcts):
                        raise ParseError(
                            f"{bench}: {name} has {len(values)} values for {len(pcts)} percentiles"
                        )
                    entry = blat.setdefault(_GL01_METRIC[lm.group("name")], {"percentiles": {}})
                    for q, v in zip(pcts, values, strict=True):
                        ms = _convert("float", v, f"{bench}: {name} {q}%")
                        entry["percentiles"][f"p{float(q):g}"] = ms * _GL01_TO_MS[lm.group("unit")]
                    entry["median"] = entry["percentiles"].get("p50")
                elif title.startswith("Performance Summary") and head in _GL01_SUMMARY:
                    target, unit = _GL01_SUMMARY[head]
                    value = _gl01_unit(cell, unit, f"{bench}: {name}")
                    if target in _GL01_METRIC.values():
                        blat.setdefault(target, {"percentiles": {}})["mean"] = (
                            None if value is None else value * _GL01_TO_MS[unit]
                        )
                    else:
                        fields[target] = value
                elif title.startswith("Requests Data") and head in ("Requests Completed", "Request Failed"):
                    count = re.fullmatch(r"(\d+)/(\d+)", cell)
                    if count is None:
                        raise ParseError(f"{bench}: {name} is not a count N/M: {_q(cell)}")
                    fields["completed" if head == "Requests Completed" else "failed"] = int(count.group(1))
                elif title.startswith("Requests Data") and head == "Duration":
                    fields["duration_s"] = _gl01_unit(cell, "sec", f"{bench}: {name}")
                elif cell:
                    bother[name] = _convert("num", cell, name) if _NUMBER.match(cell) else cell[:200]
    if not per:
        raise ParseError("no guidellm 0.1 benchmark row", hint="give guidellm's whole Benchmarks Report box")
    model = re.search(r"^\s*│ │ Backend\([^)]*\bmodel=(?P<m>[^,)\s]+)", text, re.M)
    out: list[ServingSummary] = []
    for index, (bench, fields) in enumerate(per.items()):
        m = _GL01_LOAD.match(bench)
        assert m is not None  # checked above
        if m.group("kind") == "synchronous":
            fields["max_concurrency"] = 1
        elif m.group("at") is not None:
            fields["request_rate"] = _convert("rate", m.group("at"), bench)
        if model:
            fields["model"] = _convert("str", model.group("m"), "Backend model")
        out.append(
            ServingSummary(
                tool="guidellm", source_format="console", index=index, label=bench, **fields,
                **{k: StatedLatency(**v) for k, v in lat.get(bench, {}).items()}, other=other.get(bench, {}),
            )
        )  # fmt: skip
    return out


def _gl_latency(title: str, group: str) -> tuple[str, float] | None:
    if title.startswith("Request Latency"):
        return _GL_LATENCY.get(group)
    return _GL03_LATENCY.get(group) if title == "Benchmarks Stats" else None


def _gl_cells(line: str) -> list[str]:
    """The cells of a `| a | b ||| c |` row; an empty string marks a cell spanned by the one before."""
    parts = line.rstrip().split("|")
    return [c if c == "" else c.strip() for c in parts[1:-1]]


def _gl_fill(row: list[str]) -> list[str]:
    out: list[str] = []
    for c in row:
        out.append(out[-1] if c == "" and out else c)
    return out


def _gl_tables(lines: list[str]) -> Iterator[tuple[str, list[str], list[str], list[list[str]]]]:
    """(title, group per column, stat per column, data rows) of every header block of every table."""
    title = ""
    i = 0
    while i < len(lines):
        ln = lines[i]
        tm = _GL_TITLE.match(ln) if not ln.startswith("|") else None
        if tm and ln.strip():
            title = tm.group("title")
        if not re.match(r"^\|\s*Benchmark\s*\|", ln):
            i += 1
            continue
        header: list[list[str]] = []
        while i < len(lines) and lines[i].startswith("|") and not re.match(r"^\|-+\|", lines[i]):
            header.append(_gl_cells(lines[i]))
            i += 1
        if i >= len(lines) or len(header) < 2:
            raise ParseError(f"table {title!r}: its header is not followed by a |---| rule",
                             hint="the table is cut short; copy it whole")  # fmt: skip
        i += 1
        rows: list[list[str]] = []
        while i < len(lines) and lines[i].startswith("|") and not lines[i].startswith("|="):
            rows.append([c.strip() for c in _gl_cells(lines[i])])
            i += 1
        if i >= len(lines):
            raise ParseError(f"table {title!r} is cut short: no closing |===| rule")
        filled = [_gl_fill(r) for r in header]
        width = len(filled[0])
        if any(len(r) != width for r in [*filled, *rows]):
            raise ParseError(f"table {title!r}: rows of different widths", hint="copy the table as printed")
        groups = filled[0]
        stats = [" ".join(w for w in col if w) for col in zip(*filled[1:], strict=True)]
        yield title, groups, stats, rows


def _gl03_tables(lines: list[str]) -> Iterator[tuple[str, list[str], list[str], list[list[str]]]]:
    """guidellm 0.3's pipe tables as _gl_tables gives 0.4's: a `Benchmarks Info:` title, a ==== rule,
    a group row (`Metadata |||| Requests Made |||`: a group spans the empty cells after it), a stat
    row, a ---|--- rule, one row per benchmark, a closing ==== rule."""
    for i, ln in enumerate(lines):
        m = re.match(r"^(Benchmarks (?:Info|Stats)):\s*$", ln)
        if not m or i + 4 >= len(lines) or not re.match(r"^=+\s*$", lines[i + 1]):
            continue
        title = m.group(1)
        groups = _gl_fill([c.strip() for c in lines[i + 2].rstrip().split("|")])
        stats = [c.strip() for c in lines[i + 3].split("|")]
        if not _GL03_RULE.match(lines[i + 4]):
            raise ParseError(f"table {title!r}: its header is not followed by a ---|--- rule",
                             hint="the table is cut short; copy it whole")  # fmt: skip
        rows: list[list[str]] = []
        j = i + 5
        while j < len(lines) and not re.match(r"^=+\s*$", lines[j]):
            rows.append([c.strip() for c in lines[j].split("|")])
            j += 1
        if j >= len(lines):
            raise ParseError(f"table {title!r} is cut short: no closing ==== rule")
        if any(len(r) != len(groups) for r in [stats, *rows]):
            raise ParseError(f"table {title!r}: rows of different widths", hint="copy the table as printed")
        yield title, groups, stats, rows


def _gl_value(text: str, name: str) -> float | None:
    """A guidellm cell: `25.9 ± 1.5` is the mean (its confidence half-width aside); empty: not stated."""
    v = text.split("±")[0].strip()
    if not v:
        return None
    number: float | None = _convert("float", v.replace(",", ""), name)
    return number


@_raw_on_error
def parse_guidellm_console(text: str) -> list[ServingSummary]:
    """guidellm 0.4+'s console tables, and 0.3's pipe tables, one ServingSummary per benchmark (its
    `concurrent@4` row); 0.1's rich boxes by _guidellm01."""
    if not GUIDELLM_CONSOLE.search(text) and GUIDELLM01_CONSOLE.search(text):
        return _guidellm01(_body(text))
    lines = _body(text).splitlines()
    tables = _gl_tables(lines) if GUIDELLM_CONSOLE.search(text) else _gl03_tables(lines)
    per: dict[str, dict[str, Any]] = {}
    lat: dict[str, dict[str, dict[str, Any]]] = {}
    other: dict[str, dict[str, FigureValue]] = {}
    for title, groups, stats, rows in tables:
        for row in rows:
            bench = row[0]
            if not _GL_LOAD.match(bench):
                raise ParseError(f"table {title!r}: {_q(bench)} is not a benchmark name (concurrent@4 …)")
            fields = per.setdefault(bench, {})
            blat = lat.setdefault(bench, {})
            bother = other.setdefault(bench, {})
            for group, stat, cell in zip(groups[1:], stats[1:], row[1:], strict=True):
                name = f"{title}: {group} {stat}".strip()
                known = _GL_FIELDS.get((title, group, stat))
                latency = _gl_latency(title, group)
                if latency is not None:
                    metric, factor = latency
                    value = _gl_value(cell, name)
                    word = stat.split()[-1] if stat else ""
                    entry = blat.setdefault(metric, {"percentiles": {}})
                    scaled = None if value is None else value * factor
                    if word in ("Mean", "mean"):
                        entry["mean"] = scaled
                    elif word in ("Mdn", "median"):
                        entry["median"] = scaled
                        if scaled is not None:
                            entry["percentiles"]["p50"] = scaled
                    elif re.fullmatch(r"p\d{1,2}(?:\.\d{1,4})?", word) and scaled is not None:
                        entry["percentiles"][word] = scaled
                elif known is not None:
                    fields[known[0]] = _convert(known[1], _gl_value(cell, name), name)
                elif cell:
                    bother[name[:200]] = (
                        _gl_value(cell, name) if _NUMBER.match(cell.replace(",", "")) else cell[:200]
                    )
    if not per:
        raise ParseError("no guidellm benchmark row (| concurrent@4 | … |)",
                         hint="give guidellm's console output, its Run Summary and tables")  # fmt: skip
    out: list[ServingSummary] = []
    for index, (bench, fields) in enumerate(per.items()):
        m = _GL_LOAD.match(bench)
        assert m is not None  # checked above
        kind, at = m.group("kind"), m.group("at")
        if kind == "synchronous":
            fields["max_concurrency"] = 1
        elif kind == "concurrent" and at is not None:
            fields["max_concurrency"] = _convert("cap", at, bench)
        elif kind in ("constant", "poisson") and at is not None:
            fields["request_rate"] = _convert("rate", at, bench)
        out.append(
            ServingSummary(
                tool="guidellm", source_format="console", index=index, label=bench, **fields,
                **{k: StatedLatency(**v) for k, v in lat.get(bench, {}).items()}, other=other.get(bench, {}),
            )
        )  # fmt: skip
    return out
