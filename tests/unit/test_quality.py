"""The output-quality gate (docs/quality.md): figures of outputs against outputs, the Wilson interval
and scoring, the verdict of the decision module, the prompt and task files as untrusted data, the
runner against the stand-in engine (tests/unit/sse_server.py), and the report section."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError
from sse_server import Behaviour, sse_server

from orchestrator import safefs
from orchestrator.metrics import decision
from orchestrator.metrics.quality import accuracy, agreed_prefix, compare_outputs, score, wilson
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.plan import Plan
from orchestrator.models.quality import MAX_FILE_BYTES, Output, OutputFigures, Task
from orchestrator.models.quality_gate import QualityGate
from orchestrator.report.quality import quality_section
from orchestrator.report.sections import sections_html, sections_markdown
from orchestrator.stacks import json_schema
from orchestrator.workloads.engine_specs import engine_spec
from orchestrator.workloads.labmodel import RECIPES
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, Target
from orchestrator.workloads.quality import (
    QualityInputError,
    builtin_prompts,
    outputs_path,
    read_outputs,
    read_prompts,
    read_tasks,
    request_detail,
    run_prompts,
    write_outputs,
)


def out(id: str, text: str, ids: list[int] | None = None, lps: list[float] | None = None) -> Output:
    return Output(id=id, status="ok", text=text, token_ids=ids, logprobs=lps)


# --- figures -------------------------------------------------------------------------------------


def test_agreed_prefix_counts_up_to_the_first_difference() -> None:
    assert agreed_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert agreed_prefix([1, 2], [1, 2, 3]) == 2
    assert agreed_prefix([], [1]) == 0


def test_identical_outputs_match_exactly() -> None:
    a = [out(f"p{i}", "alpha bravo charlie") for i in range(5)]
    f = compare_outputs("A vs A", a, a)
    assert f.n == 5 and f.exact_match == 1.0 and f.unit == "words"
    assert f.agreed.mean == 3 and f.first_divergence.n == 0 and f.missing == 0


def test_divergence_in_words_when_no_token_ids() -> None:
    a = [out("p1", "alpha bravo charlie delta"), out("p2", "echo golf")]
    b = [out("p1", "alpha bravo hotel delta"), out("p2", "echo golf")]
    f = compare_outputs("B vs A", a, b)
    assert f.unit == "words" and f.exact_match == 0.5
    assert f.agreed.mean == (2 + 2) / 2
    assert f.first_divergence.n == 1 and f.first_divergence.p50 == 2


def test_divergence_in_tokens_and_logprob_deltas_on_the_shared_prefix() -> None:
    a = [out("p1", "x", [1, 2, 3, 4], [-0.1, -0.2, -0.3, -0.4])]
    b = [out("p1", "y", [1, 2, 9, 4], [-0.1, -0.25, -0.9, -0.4])]
    f = compare_outputs("B vs A", a, b)
    assert f.unit == "tokens" and f.exact_match == 0.0
    assert f.first_divergence.p50 == 2
    assert f.logprob_pairs == 2  # tokens 0 and 1 only: the divergent token's logprob is not compared
    assert f.max_logprob_delta == pytest.approx(0.05)
    assert f.p99_logprob_delta is None  # p99 needs 100 pairs


def test_an_unanswered_prompt_is_missing_not_compared() -> None:
    a = [out("p1", "alpha"), out("p2", "bravo")]
    b = [out("p1", "alpha"), Output(id="p2", status="error", error="HTTP 500")]
    f = compare_outputs("B vs A", a, b)
    assert f.n == 1 and f.missing == 1 and f.exact_match == 1.0


def test_wilson_interval() -> None:
    low, high = wilson(8, 10) or (0, 0)
    # the textbook case (Wilson 1927; Newcombe 1998, table I): 8/10 -> 0.490 to 0.943
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)
    lo0, hi0 = wilson(0, 20) or (1, 1)
    assert lo0 == 0.0 and 0 < hi0 < 0.2
    assert wilson(0, 0) is None
    narrow, wide = wilson(500, 1000), wilson(5, 10)
    assert narrow and wide and narrow[1] - narrow[0] < wide[1] - wide[0]
    with pytest.raises(ValueError, match=r"0\.\.n"):
        wilson(11, 10)


@pytest.mark.parametrize(
    ("scoring", "expected", "choices", "answer", "right"),
    [
        ("exact", "alpha", [], "  alpha ", True),
        ("exact", "alpha", [], "alpha bravo", False),
        ("contains", "bravo", [], "alpha bravo charlie", True),
        ("contains", "delta", [], "alpha bravo", False),
        ("choice", "B", ["A", "B", "C"], "The answer is B.", True),
        ("choice", "B", ["A", "B", "C"], "A, not B", False),
        ("choice", "B", ["A", "B", "C"], "none of them", False),
    ],
)
def test_scoring(scoring: str, expected: str, choices: list[str], answer: str, right: bool) -> None:
    task = Task.model_validate({"id": "t1", "prompt": "q", "expected": expected, "scoring": scoring,
                                "choices": choices})  # fmt: skip
    assert score(task, answer) is right


def test_choice_task_needs_its_answer_among_the_choices() -> None:
    with pytest.raises(ValidationError, match="choices"):
        Task.model_validate(
            {"id": "t1", "prompt": "q", "expected": "D", "scoring": "choice", "choices": ["A"]}
        )


def test_accuracy_counts_missing_and_failed_answers_wrong() -> None:
    tasks = [Task(id=f"t{i}", prompt="q", expected="alpha") for i in range(4)]
    outs = [out("t0", "alpha"), out("t1", "bravo"), Output(id="t2", status="error")]
    acc = accuracy(tasks, outs)
    assert (acc.n, acc.correct, acc.accuracy) == (4, 1, 0.25)
    assert acc.low is not None and acc.high is not None and acc.low < 0.25 < acc.high


# --- the verdict ---------------------------------------------------------------------------------


def figures(name: str, matching: int, n: int = 10) -> OutputFigures:
    a = [out(f"p{i}", "alpha bravo") for i in range(n)]
    b = [out(f"p{i}", "alpha bravo" if i < matching else "alpha golf") for i in range(n)]
    return compare_outputs(name, a, b)


def test_verdict_min_exact_match() -> None:
    gate = QualityGate(min_exact_match=0.9)
    ok = decision.quality_verdict(gate, figures("B vs A", 10))
    assert ok.passed and ok.reasons == []
    bad = decision.quality_verdict(gate, figures("B vs A", 6))
    assert not bad.passed
    assert "exact match 60.0% (n=10) below min_exact_match 90.0%" in bad.reasons[0]


def test_verdict_relative_to_the_a_against_a_floor() -> None:
    gate = QualityGate(min_exact_match_of_floor=0.9)
    floor = [figures("A vs A (run twice)", 10), figures("A c1 vs c4", 8)]
    # the floor is the lower of the two (80%); 0.9 x 80% = 72%
    passed = decision.quality_verdict(gate, figures("B vs A", 8), floor)
    assert passed.passed
    failed = decision.quality_verdict(gate, figures("B vs A", 7), floor)
    assert not failed.passed
    assert "floor 80.0%" in failed.reasons[0] and "A c1 vs c4 80.0% (n=10)" in failed.reasons[0]


def test_verdict_without_a_floor_is_blind_and_fails() -> None:
    gate = QualityGate(min_exact_match_of_floor=0.9)
    j = decision.quality_verdict(gate, figures("B vs A", 10))
    assert not j.passed and "blind" in j.reasons[0]


def test_verdict_with_no_answer_on_both_sides_fails() -> None:
    gate = QualityGate(min_exact_match=0.0)
    f = compare_outputs("B vs A", [out("p1", "a")], [Output(id="p1", status="error")])
    j = decision.quality_verdict(gate, f)
    assert not j.passed and any("no prompt answered" in r for r in j.reasons)


def test_verdict_accuracy_below_a_beyond_the_interval() -> None:
    gate = QualityGate(tasks="/data/tasks.jsonl")
    tasks = [Task(id=f"t{i}", prompt="q", expected="alpha") for i in range(100)]
    acc_a = accuracy(tasks, [out(f"t{i}", "alpha") for i in range(90)])
    near = accuracy(tasks, [out(f"t{i}", "alpha") for i in range(85)])
    far = accuracy(tasks, [out(f"t{i}", "alpha") for i in range(60)])
    same = figures("B vs A", 10)
    ok = decision.quality_verdict(gate, same, accuracy_a=acc_a, accuracy_b=near)
    assert ok.passed  # 85% of 100: its interval reaches above 90%
    bad = decision.quality_verdict(gate, same, accuracy_a=acc_a, accuracy_b=far)
    assert not bad.passed and "accuracy 60.0%" in bad.reasons[0] and "below A's 90.0%" in bad.reasons[0]
    loose = QualityGate(tasks="/data/tasks.jsonl", max_accuracy_drop=0.35)
    assert decision.quality_verdict(loose, same, accuracy_a=acc_a, accuracy_b=far).passed
    unmeasured = decision.quality_verdict(gate, same)
    assert not unmeasured.passed and "accuracy not measured" in unmeasured.reasons[0]


# --- the plan ------------------------------------------------------------------------------------


def test_a_gate_without_a_threshold_is_refused() -> None:
    with pytest.raises(ValidationError, match="judges nothing"):
        QualityGate()
    with pytest.raises(ValidationError, match="needs tasks"):
        QualityGate(min_exact_match=0.9, max_accuracy_drop=0.1)
    with pytest.raises(ValidationError):
        QualityGate(prompts="relative/prompts.jsonl", min_exact_match=0.9)


def _serving_plan(quality: dict[str, object]) -> dict[str, object]:
    return {
        "name": "q",
        "collectives": [],
        "serving": [
            {
                "name": "lab",
                "engine": "transformers",
                "model": {"path": "/opt/orch/models/lab-tiny"},
                "load": {
                    "concurrency": [1],
                    "input_tokens": {"kind": "fixed", "tokens": 8},
                    "output_tokens": {"kind": "fixed", "tokens": 8},
                    "requests": 4,
                },
            }
        ],
        "quality": quality,
    }


def test_plan_quality_and_the_published_schema_agree() -> None:
    validator = jsonschema.Draft202012Validator(json_schema("plan"))
    good = _serving_plan({"min_exact_match_of_floor": 0.95, "max_tokens": 12, "seed": 7})
    plan = Plan.model_validate(good)
    assert plan.quality is not None and plan.quality.max_tokens == 12 and plan.quality.seed == 7
    assert list(validator.iter_errors(good)) == []
    bads: list[dict[str, object]] = [
        {},
        {"min_exact_match": 0.9, "max_accuracy_drop": 0.1},
        {"min_exact_match": 2},
    ]
    for bad in bads:
        doc = _serving_plan(bad)
        with pytest.raises(ValidationError):
            Plan.model_validate(doc)
        assert list(validator.iter_errors(doc)), bad


def test_plan_show_summary_names_prompts_decoding_and_thresholds() -> None:
    from orchestrator.cli.plan import quality_summary

    text = quality_summary(QualityGate(min_exact_match=0.9, min_exact_match_of_floor=0.95, seed=3))
    assert "built-in (lab-words)" in text and "temperature 0" in text and "seed 3" in text
    assert "exact match >= 90.0%" in text and "0.95 x the A-against-A floor" in text
    assert "concurrency 1 against 4" in text


# --- prompt and task files -----------------------------------------------------------------------


def test_builtin_prompts_use_only_the_lab_models_words() -> None:
    one, two = builtin_prompts(), builtin_prompts()
    words = set(RECIPES["lab-tiny"].words)
    assert one == two and len(one.prompts) >= 16
    assert all(set(p.prompt.split()) <= words for p in one.prompts)
    assert len({p.prompt for p in one.prompts}) == len(one.prompts)
    assert one.source == "builtin:lab-words" and len(one.sha256) == 64


def test_prompt_file_sha256_and_default_ids(tmp_path: Path) -> None:
    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "alpha bravo"}\n\n{"id": "q-2", "prompt": "echo"}\n')
    ps = read_prompts(f)
    assert [(p.id, p.prompt) for p in ps.prompts] == [("p1", "alpha bravo"), ("q-2", "echo")]
    assert ps.sha256 == hashlib.sha256(f.read_bytes()).hexdigest() and ps.source == str(f)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"prompt": "a"}\nnot json\n', "line 2: not JSON"),
        ('["prompt"]\n', "line 1: not a JSON object"),
        ('{"prompt": "a", "id": "$(reboot)"}\n', "line 1"),
        ('{"prompt": "a", "id": "x"}\n{"prompt": "b", "id": "x"}\n', "given twice: x"),
        ('{"prompt": "a", "extra": 1}\n', "line 1"),
        ("\n", "no lines"),
    ],
)
def test_bad_prompt_files_are_refused_with_the_line(tmp_path: Path, content: str, match: str) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(content)
    with pytest.raises(QualityInputError, match=match):
        read_prompts(f)


def test_prompt_file_must_be_a_small_regular_utf8_file(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(QualityInputError, match="not a regular file"):
        read_prompts(fifo)  # refused at once, not waited on
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(QualityInputError, match="larger than"):
        read_prompts(big)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(QualityInputError, match="not UTF-8"):
        read_prompts(latin)


def test_task_file(tmp_path: Path) -> None:
    f = tmp_path / "tasks.jsonl"
    f.write_text(
        json.dumps({"prompt": "q", "expected": "B", "scoring": "choice", "choices": ["A", "B"]})
        + "\n"
        + json.dumps({"id": "t-x", "prompt": "q", "expected": "alpha", "scoring": "contains"})
        + "\n"
    )
    tasks, sha = read_tasks(f)
    assert [t.id for t in tasks] == ["t1", "t-x"] and sha == hashlib.sha256(f.read_bytes()).hexdigest()
    f.write_text(json.dumps({"prompt": "q", "expected": "B", "scoring": "vote"}) + "\n")
    with pytest.raises(QualityInputError, match="line 1"):
        read_tasks(f)


def test_read_regular_size_limit(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert safefs.read_regular(f, max_bytes=10) == b"x" * 10
    with pytest.raises(OSError, match="larger than 9 bytes"):
        safefs.read_regular(f, max_bytes=9)


# --- outputs in the run --------------------------------------------------------------------------


def test_outputs_are_written_inside_the_run_with_its_mode(tmp_path: Path) -> None:
    outs = [out("p1", "alpha", [1], [-0.5]), Output(id="p2", status="error", error="HTTP 500")]
    path = write_outputs(tmp_path, "A-run1", outs)
    assert path == tmp_path / "quality" / "A-run1.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == safefs.file_mode()
    assert read_outputs(tmp_path, "A-run1") == outs
    with pytest.raises(ValueError):
        outputs_path(tmp_path, "../escape")
    victim = tmp_path / "elsewhere.jsonl"
    victim.write_text("")
    (tmp_path / "quality" / "B.jsonl").symlink_to(victim)
    with pytest.raises(safefs.NotInside):
        read_outputs(tmp_path, "B")


# --- the runner against the stand-in engine ------------------------------------------------------


def test_run_prompts_records_text_token_ids_and_logprobs() -> None:
    ps = builtin_prompts().prompts[:6]
    b = Behaviour(echo=True)
    detail = request_detail(engine_spec("vllm").output_detail, "completions")
    with sse_server(b) as url:
        outs = run_prompts(Target("n1", url), "m", ps, max_tokens=5, seed=11, concurrency=3, detail=detail)
    assert [o.id for o in outs] == [p.id for p in ps] and all(o.status == "ok" for o in outs)
    for o, p in zip(outs, ps, strict=True):
        words = p.prompt.split()
        assert o.text.split() == [words[i % len(words)] for i in range(5)]
        assert o.token_ids is not None and len(o.token_ids) == 5
        assert o.logprobs == pytest.approx([-0.01 * (i + 1) for i in range(5)])
    assert len(b.bodies) == len(ps)
    assert all(x["temperature"] == 0 and x["seed"] == 11 and x["max_tokens"] == 5 for x in b.bodies)
    assert all(x["logprobs"] == 1 and x["return_token_ids"] is True for x in b.bodies)


def test_run_prompts_without_detail_is_counted_in_words_as_for_transformers_serve() -> None:
    ps = builtin_prompts().prompts[:4]
    detail = request_detail(engine_spec("transformers").output_detail, "chat")
    assert detail == {}
    with sse_server(Behaviour(echo=True)) as url:
        a = run_prompts(Target("n1", url), "m", ps, max_tokens=4, seed=0, api="chat", detail=detail)
    with sse_server(Behaviour(echo=True, diverge_at=2)) as url:
        b = run_prompts(Target("n1", url), "m", ps, max_tokens=4, seed=0, api="chat", detail=detail)
    assert all(o.token_ids is None and o.logprobs is None for o in a + b)
    f = compare_outputs("B vs A", a, b)
    assert f.unit == "words" and f.exact_match == 0.0 and f.first_divergence.p50 == 2
    assert f.agreed.mean == 2


def test_a_against_a_at_concurrency_1_and_n_is_the_floor_and_b_is_judged_against_it() -> None:
    ps = builtin_prompts().prompts[:8]
    detail = request_detail(engine_spec("vllm").output_detail, "completions")
    with sse_server(Behaviour(echo=True)) as url:
        a1 = run_prompts(Target("n1", url), "m", ps, max_tokens=6, seed=0, concurrency=1, detail=detail)
        an = run_prompts(Target("n1", url), "m", ps, max_tokens=6, seed=0, concurrency=4, detail=detail)
    with sse_server(Behaviour(echo=True, diverge_at=3, logprob_shift=-0.5)) as url:
        b = run_prompts(Target("n1", url), "m", ps, max_tokens=6, seed=0, concurrency=4, detail=detail)
    floor = [compare_outputs("A c1 vs c4", a1, an)]
    assert floor[0].exact_match == 1.0 and floor[0].unit == "tokens"
    f = compare_outputs("B vs A", an, b)
    assert f.max_logprob_delta == pytest.approx(0.5)
    j = decision.quality_verdict(QualityGate(min_exact_match_of_floor=0.95), f, floor)
    assert not j.passed and "exact match 0.0%" in j.reasons[0]


def test_every_load_generator_request_sends_temperature_0_warmup_included() -> None:
    b = Behaviour()
    with sse_server(b) as url:
        spec = LoadSpec(
            targets=[Target("n1", url)], model="m", input_tokens=[3], output_tokens=[2], concurrency=2,
            requests=4, warmup=2, extra={"temperature": 0.7},
        )  # fmt: skip
        LoadGenerator(spec, lambda r: None).run()
    assert len(b.bodies) == 6 and all(x["temperature"] == 0 for x in b.bodies)


def test_report_section_says_why_with_the_figures() -> None:
    gate = QualityGate(min_exact_match=0.9)
    j = decision.quality_verdict(gate, figures("B vs A", 5), [figures("A vs A", 10)])
    (section,) = [quality_section(j)]
    md = "\n".join(sections_markdown([section]))
    assert "- **FAIL**: exact match 50.0% (n=10) below min_exact_match 90.0%" in md
    assert "| B vs A | 10 | 50.0% |" in md and "| A vs A | 10 | 100.0% |" in md
    html = sections_html([section], ident="quality")
    assert "<b>FAIL</b>" in html and "50.0%" in html
    hostile = QualityGate(min_exact_match=0.9)
    j2 = decision.quality_verdict(hostile, compare_outputs("<script>", [out("p1", "a")], [out("p1", "a")]))
    assert "<script>" not in sections_html([quality_section(j2)], ident="q")


def _gate_over_a_run(tmp_path: Path, b: Behaviour, gate: QualityGate) -> object:
    from orchestrator.workloads.quality import judge_run, run_arm

    detail = engine_spec("vllm").output_detail
    with sse_server(Behaviour(echo=True)) as url:
        run_arm(gate, "A", Target("a", url), "m", tmp_path, detail=detail)
    with sse_server(b) as url:
        run_arm(gate, "B", Target("b", url), "m", tmp_path, detail=detail)
    return judge_run(gate, tmp_path)


def test_a_gate_over_a_run_b_changes_numerics_fails_with_its_figures(tmp_path: Path) -> None:
    gate = QualityGate(min_exact_match_of_floor=0.95, max_tokens=6, concurrency=3)
    j = _gate_over_a_run(tmp_path, Behaviour(echo=True, diverge_at=4), gate)
    assert isinstance(j, QualityJudgement) and not j.passed
    assert [f.name for f in j.floor] == ["A vs A (run twice)", "A c1 vs c3"]
    assert all(f.exact_match == 1.0 and f.n == 32 for f in j.floor)
    assert j.b_vs_a.exact_match == 0.0 and j.b_vs_a.first_divergence.p50 == 4 and j.b_vs_a.unit == "tokens"
    assert j.prompts_sha256 == builtin_prompts().sha256
    names = sorted(p.name for p in (tmp_path / "quality").iterdir())
    assert names == ["A-c1.jsonl", "A-c3-1.jsonl", "A-c3-2.jsonl", "B-c3.jsonl", "inputs.json"]
    assert all(stat.S_IMODE(p.stat().st_mode) == safefs.file_mode() for p in (tmp_path / "quality").iterdir())


def test_a_gate_over_a_run_a_against_a_passes_and_scores_tasks(tmp_path: Path) -> None:
    words = RECIPES["lab-tiny"].words
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"prompt": f"{w} {words[0]}", "expected": w, "scoring": "contains"}) + "\n"
            for w in words
        )
    )
    run = tmp_path / "run"
    run.mkdir()
    gate = QualityGate(min_exact_match_of_floor=0.95, tasks=str(tasks), max_tokens=2, concurrency=2)
    j = _gate_over_a_run(run, Behaviour(echo=True), gate)
    assert isinstance(j, QualityJudgement) and j.passed, j.reasons
    assert j.accuracy_a is not None and j.accuracy_a.accuracy == 1.0 and j.accuracy_a.n == len(words)
    assert j.accuracy_b == j.accuracy_a


def test_an_outputs_status_words_are_the_load_generators() -> None:
    # models/quality.py cannot import serving_results (it leads back through models/decision.py)
    from typing import get_args

    from orchestrator.models.serving_results import RequestStatus

    assert get_args(Output.model_fields["status"].annotation) == get_args(RequestStatus)
