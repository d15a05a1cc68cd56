"""The output-quality gate's client side (docs/quality.md): the prompt set, the task file, sending
them to an engine greedily, and the outputs kept in the run.

Prompt and task files are data from the user: each is read on the controller only as a regular
file (a FIFO or a device is refused at once), at most MAX_FILE_BYTES, UTF-8, one JSON object a line;
ids match the name pattern. Their text goes into HTTP request bodies as JSON, never into a job
script or a command line. The prompt set's sha256 (of the file's bytes, or of the built-in set's
canonical JSONL) goes into the run with the figures.

Requests go through the load generator's client (workloads/loadgen.py: its threads, deadlines and
stream parsing), with temperature 0, the gate's seed and max_tokens, and the engine's fields that
ask for token ids and logprobs (EngineSpec.output_detail). Outputs are written inside the run
folder, one JSON line each, with the run's file mode (safefs).

A gate over a run: run_arm(gate, "A", ...) while A serves, run_arm(gate, "B", ...) while B
serves (A and B need not be up together), then judge_run(gate, run_root) for the verdict.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ValidationError

from orchestrator import safefs
from orchestrator.metrics.decision import quality_verdict
from orchestrator.metrics.quality import accuracy, compare_outputs
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.names import check_name
from orchestrator.models.quality import (
    MAX_FILE_BYTES,
    MAX_ITEMS,
    Output,
    OutputFigures,
    Prompt,
    PromptSet,
    Task,
)
from orchestrator.models.quality_gate import QualityGate
from orchestrator.models.serving import Api
from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.labmodel import RECIPES
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, StreamOutput, Target

BUILTIN_PROMPTS = "lab-words"
"""The built-in prompt set: prompts of the lab model's own words (workloads/labmodel.py). A word
outside its vocabulary becomes <unk>, and then every answer looks alike."""
BUILTIN_COUNT = 32
OUTPUTS_DIR = "quality"
"""The folder of a run that holds the gate's outputs, one JSONL file per arm and pass."""


M = TypeVar("M", bound=BaseModel)


class QualityInputError(ValueError):
    """A prompt or task file that cannot be used; the message names the file and the line."""


def _canonical(prompts: Sequence[Prompt]) -> bytes:
    return b"".join(p.model_dump_json().encode() + b"\n" for p in prompts)


def builtin_prompts() -> PromptSet:
    """The built-in prompt set: BUILTIN_COUNT prompts of 3 to 12 words of the lab model's
    vocabulary, drawn from random.Random(0) (one set on every machine)."""
    words = RECIPES["lab-tiny"].words
    rng = random.Random(0)  # noqa: S311 (a fixed prompt set, not a secret)
    prompts = [
        Prompt(id=f"p{i:03d}", prompt=" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))))
        for i in range(BUILTIN_COUNT)
    ]
    return PromptSet(
        source=f"builtin:{BUILTIN_PROMPTS}",
        sha256=hashlib.sha256(_canonical(prompts)).hexdigest(),
        prompts=prompts,
    )


def _objects(path: Path, text: str) -> list[tuple[int, dict[str, object]]]:
    """The JSON objects of JSONL text with their line numbers (blank lines skipped).

    Raises QualityInputError naming the file and line when a line is not a JSON object, or the
    file holds more than MAX_ITEMS.
    """
    out: list[tuple[int, dict[str, object]]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise QualityInputError(f"{path} line {no}: not JSON: {e}") from e
        if not isinstance(obj, dict):
            raise QualityInputError(f"{path} line {no}: not a JSON object")
        out.append((no, obj))
        if len(out) > MAX_ITEMS:
            raise QualityInputError(f"{path}: more than {MAX_ITEMS} lines")
    return out


def _validated(
    path: Path, lines: Sequence[tuple[int, dict[str, object]]], model: type[M], prefix: str
) -> list[M]:
    """Each line as a model, its id `<prefix><line>` when it gives none; ids must be unique.

    Raises QualityInputError naming the file and line, or the ids given twice.
    """
    out: list[M] = []
    for no, obj in lines:
        try:
            out.append(model.model_validate({"id": f"{prefix}{no}", **obj}))
        except ValidationError as e:
            raise QualityInputError(f"{path} line {no}: {e.errors()[0]['msg']}") from e
    ids = [str(x.model_dump(include={"id"})["id"]) for x in out]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise QualityInputError(f"{path}: id(s) given twice: {', '.join(twice[:5])}")
    return out


def _user_file(path: Path, model: type[M], prefix: str) -> tuple[list[M], str]:
    """A user's JSONL file as models, and the sha256 of its bytes.

    Raises QualityInputError naming the file (and line) when it is not a regular file, is larger
    than MAX_FILE_BYTES, is not UTF-8, holds no line, or a line is not a model (_objects, _validated).
    """
    try:
        raw = safefs.read_regular(path, max_bytes=MAX_FILE_BYTES)
        text = raw.decode("utf-8")
    except OSError as e:
        raise QualityInputError(f"{path}: not read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise QualityInputError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from e
    lines = _objects(path, text)
    if not lines:
        raise QualityInputError(f"{path}: no lines")
    return _validated(path, lines, model, prefix), hashlib.sha256(raw).hexdigest()


def read_prompts(path: Path) -> PromptSet:
    """A JSONL prompt file: {"prompt": TEXT} a line, with an optional "id" (else p<line>).

    Raises QualityInputError (see _user_file).
    """
    prompts, sha = _user_file(path, Prompt, "p")
    return PromptSet(source=str(path), sha256=sha, prompts=prompts)


def read_tasks(path: Path) -> tuple[list[Task], str]:
    """A JSONL task file: {"prompt", "expected", "scoring", "choices", "id"} a line (id: t<line>
    when not given), and the file's sha256.

    Raises QualityInputError (see _user_file).
    """
    return _user_file(path, Task, "t")


def prompt_set(gate: QualityGate) -> PromptSet:
    """The gate's prompts: its file, or the built-in set. Raises QualityInputError."""
    return builtin_prompts() if gate.prompts is None else read_prompts(Path(gate.prompts))


def request_detail(detail: Sequence[tuple[str, object]], api: Api) -> dict[str, object]:
    """An engine's output_detail fields for one API: chat takes `logprobs` as a boolean."""
    out = dict(detail)
    if api == "chat" and "logprobs" in out:
        out["logprobs"] = True
    return out


def run_prompts(
    target: Target,
    model: str,
    prompts: Sequence[Prompt],
    *,
    max_tokens: int,
    seed: int,
    concurrency: int = 1,
    api: Api = "completions",
    timeout_s: float = 120.0,
    detail: Mapping[str, object] | None = None,
) -> list[Output]:
    """Send every prompt once to one engine, greedily (temperature 0, seed, max_tokens), with
    `concurrency` requests in flight, and return the outputs in prompt order. A request that failed
    is an Output with its status and error, not an exception."""
    records: dict[int, RequestRecord] = {}
    streams: dict[int, StreamOutput] = {}
    spec = LoadSpec(
        targets=[target], model=model, input_tokens=[1], output_tokens=[max_tokens],
        concurrency=max(1, min(concurrency, len(prompts))), requests=len(prompts), api=api,
        timeout_s=timeout_s, seed=seed, extra={"seed": seed, **(detail or {})},
        prompts=[p.prompt for p in prompts],
    )  # fmt: skip
    gen = LoadGenerator(spec, lambda r: records.__setitem__(r.id, r), lambda i, o: streams.__setitem__(i, o))
    gen.run()
    out: list[Output] = []
    for i, p in enumerate(prompts):
        rec, got = records.get(i), streams.get(i, StreamOutput())
        if rec is None:
            out.append(Output(id=p.id, status="aborted", error="not sent"))
            continue
        out.append(
            Output(
                id=p.id, status=rec.status, text=got.text, token_ids=got.token_ids, logprobs=got.logprobs,
                error=rec.error,
            )
        )  # fmt: skip
    return out


def outputs_path(run_root: Path, name: str) -> Path:
    """Where an arm's outputs go in a run: <run>/quality/<name>.jsonl (name: the name pattern).

    Raises ValueError for a name that is not one.
    """
    return run_root / OUTPUTS_DIR / f"{check_name(name, what='quality output')}.jsonl"


def write_outputs(run_root: Path, name: str, outputs: Sequence[Output]) -> Path:
    """Write outputs inside the run folder, atomically, with the run's modes; returns the path."""
    path = outputs_path(run_root, name)
    safefs.make_dir(path.parent)
    safefs.atomic_write(path, "".join(o.model_dump_json() + "\n" for o in outputs))
    return path


def read_outputs(run_root: Path, name: str) -> list[Output]:
    """An arm's outputs as write_outputs wrote them (a file of the run's own, safefs.read_inside).

    Raises FileNotFoundError, safefs.NotInside, or QualityInputError for a line that is not an
    Output (outputs have their ids: an id given twice is refused too).
    """
    path = outputs_path(run_root, name)
    text = safefs.read_inside(run_root, path).decode("utf-8", "replace")
    return _validated(path, _objects(path, text), Output, "o")


# --- one gate over a run: the passes of each arm, then the verdict ---------------------------------

Arm = Literal["A", "B"]


def passes(gate: QualityGate, arm: Arm) -> list[tuple[str, int]]:
    """The passes of the prompt set an arm makes, as (output name, concurrency): A three times
    (twice at N, the floor "A run twice", and once at 1, the floor "A at 1 against N"), B once at N."""
    n = gate.concurrency
    return [(f"A-c{n}-1", n), (f"A-c{n}-2", n), ("A-c1", 1)] if arm == "A" else [(f"B-c{n}", n)]


def run_arm(
    gate: QualityGate,
    arm: Arm,
    target: Target,
    model: str,
    run_root: Path,
    *,
    detail: Sequence[tuple[str, object]] = (),
    timeout_s: float = 120.0,
) -> list[Path]:
    """Send the gate's prompt set (and its tasks, at concurrency N) to one arm's engine, each pass
    of passes(), and write the outputs inside the run; returns their paths. The prompt set's source
    and sha256, and the task file's, go into quality/inputs.json.

    Raises QualityInputError when the prompt or task file cannot be used.
    """
    ps = prompt_set(gate)
    tasks, tasks_sha = read_tasks(Path(gate.tasks)) if gate.tasks is not None else ([], None)
    fields = request_detail(detail, gate.api)
    safefs.make_dir(run_root / OUTPUTS_DIR)
    inputs = {
        "prompts": ps.source,
        "prompts_sha256": ps.sha256,
        "tasks": gate.tasks,
        "tasks_sha256": tasks_sha,
    }
    safefs.atomic_write(run_root / OUTPUTS_DIR / "inputs.json", json.dumps(inputs, indent=1) + "\n")

    def send(items: Sequence[Prompt], concurrency: int) -> list[Output]:
        return run_prompts(
            target, model, items, max_tokens=gate.max_tokens, seed=gate.seed, concurrency=concurrency,
            api=gate.api, timeout_s=timeout_s, detail=fields,
        )  # fmt: skip

    written = [write_outputs(run_root, name, send(ps.prompts, c)) for name, c in passes(gate, arm)]
    if tasks:
        as_prompts = [Prompt(id=t.id, prompt=t.prompt) for t in tasks]
        written.append(write_outputs(run_root, f"{arm}-tasks", send(as_prompts, gate.concurrency)))
    return written


def floor_of(gate: QualityGate, root: Path) -> list[OutputFigures]:
    """The A-against-A noise floor of the A passes run_arm wrote under root: A's second pass at N,
    and A at 1, against its first pass at N.

    Raises FileNotFoundError, safefs.NotInside or QualityInputError (read_outputs).
    """
    (a1, _), (a2, _), (a_c1, _) = passes(gate, "A")
    first = read_outputs(root, a1)
    return [
        compare_outputs("A vs A (run twice)", first, read_outputs(root, a2)),
        compare_outputs(f"A c1 vs c{gate.concurrency}", read_outputs(root, a_c1), first),
    ]


def prompts_sha256(root: Path) -> str | None:
    """The prompt set's sha256 run_arm recorded under root (quality/inputs.json), or None.

    Raises FileNotFoundError, safefs.NotInside, or QualityInputError when it is not JSON.
    """
    inputs = root / OUTPUTS_DIR / "inputs.json"
    try:
        recorded = json.loads(safefs.read_inside(root, inputs))
    except ValueError as e:
        raise QualityInputError(f"{inputs}: not JSON: {e}") from e
    sha = recorded.get("prompts_sha256") if isinstance(recorded, dict) else None
    return sha if isinstance(sha, str) else None


def judge_run(gate: QualityGate, run_root: Path, *, b_root: Path | None = None) -> QualityJudgement:
    """The gate's verdict from the outputs run_arm wrote for A and B (decision.quality_verdict):
    B against A's first pass at N; the floor A's second pass, and A at 1, against it (floor_of).

    With b_root, B is another run's A passes (scale-test against a stored baseline: A is the
    baseline's outputs under run_root, B this run's under b_root, whose arm ran as "A"): B's first
    pass at N and its tasks. The prompt sets of both must be the same (their sha256), else the
    judgement fails naming both.

    Raises FileNotFoundError when an arm's outputs are missing, safefs.NotInside or
    QualityInputError when they are not the run's own or not outputs.
    """
    (a1, _), _, _ = passes(gate, "A")
    ((b, _),) = passes(gate, "B")
    b_name, b_tasks = (a1, "A-tasks") if b_root is not None else (b, "B-tasks")
    b_from = b_root if b_root is not None else run_root
    first = read_outputs(run_root, a1)
    floor = floor_of(gate, run_root)
    b_vs_a = compare_outputs("B vs A", first, read_outputs(b_from, b_name))
    acc_a = acc_b = None
    if gate.tasks is not None:
        tasks, _ = read_tasks(Path(gate.tasks))
        acc_a = accuracy(tasks, read_outputs(run_root, "A-tasks"))
        acc_b = accuracy(tasks, read_outputs(b_from, b_tasks))
    sha = prompts_sha256(run_root)
    judgement = quality_verdict(gate, b_vs_a, floor, accuracy_a=acc_a, accuracy_b=acc_b, prompts_sha256=sha)
    if b_root is not None and (sha_b := prompts_sha256(b_root)) != sha:
        judgement.reasons.insert(0, f"prompt sets differ: A's sha256 {sha}, B's {sha_b}")
        judgement.passed = False
    return judgement
