"""Dataset replay with prompts (load.prompts): the texts of a JSONL file sent in turn, read as the
plan's other data files are (a regular file, bounded), against the stand-in streaming server
(tests/unit/sse_server.py, a test double)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from sse_server import Behaviour, sse_server
from test_serving_run import setup

from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.models.serving import ServingWorkload
from orchestrator.models.serving_results import RequestRecord
from orchestrator.runs.scale_test import scale_test
from orchestrator.workloads.loadgen import LoadGenerator, Target, level_specs, read_prompts
from orchestrator.workloads.sessions import generator_for

PROMPTS = ["What is the capital of France?", "Name three prime numbers", "Say hello"]


def workload(path: str, **load: Any) -> ServingWorkload:
    return ServingWorkload.model_validate({
        "name": "replay", "engine": "external", "url": "http://127.0.0.1:8000", "model": {"name": "m"},
        "load": {"concurrency": [1], "input_tokens": {"kind": "fixed", "tokens": 8},
                 "output_tokens": {"kind": "fixed", "tokens": 2}, "requests": 5,
                 "prompts": {"path": path, "field": "text"}, **load},
    })  # fmt: skip


def test_read_prompts_takes_each_lines_text_and_names_a_bad_line() -> None:
    lines = [json.dumps({"text": p, "other": 1}) for p in PROMPTS]
    assert read_prompts([lines[0], "", *lines[1:]], "text", source="/d/p.jsonl") == PROMPTS
    with pytest.raises(ValueError, match=r"/d/p.jsonl line 2: no string 'text'"):
        read_prompts([lines[0], '{"prompt": "x"}'], "text", source="/d/p.jsonl")
    with pytest.raises(ValueError, match="line 1: text must be a non-empty string"):
        read_prompts(['{"text": ""}'], "text")
    with pytest.raises(ValueError, match="line 1: text must be a non-empty string"):
        read_prompts(['{"text": ["a list"]}'], "text")
    with pytest.raises(ValueError, match="no prompts"):
        read_prompts(["", " "], "text")


def test_each_request_sends_the_next_prompt_in_turn() -> None:
    b = Behaviour()
    w = workload("/data/prompts.jsonl")
    with pytest.raises(ValueError, match=r"no prompts read from /data/prompts\.jsonl"):
        level_specs(w, [Target("a", "http://127.0.0.1:8000")])
    with sse_server(b) as url:
        (spec,) = level_specs(w, [Target("a", url)], prompts=PROMPTS)
        out: list[RequestRecord] = []
        LoadGenerator(spec, out.append).run()
    sent = sorted((body["prompt"] for body in b.bodies), key=PROMPTS.index)
    assert sent == [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[2]]
    # the server's usage counts the words of the prompt actually sent
    assert sorted(r.input_tokens for r in out) == sorted(len(PROMPTS[i % 3].split()) for i in range(5))


def test_a_session_level_takes_its_user_messages_from_the_prompts() -> None:
    b = Behaviour()
    w = workload("/data/prompts.jsonl", concurrency=[], api="chat", sessions={"sessions": 1, "turns": 3})
    with sse_server(b) as url:
        (spec,) = level_specs(w, [Target("a", url)], prompts=PROMPTS)
        generator_for(spec, lambda r: None).run()
    last = max(b.bodies, key=lambda x: len(x["messages"]))["messages"]
    users = [m["content"] for m in last if m["role"] == "user"]
    assert users == [f"s0t{t} {p}" for t, p in enumerate(PROMPTS)]


PLAN = """
name: replay
collectives: []
serving:
  - name: fake
    engine: transformers
    model: {{path: /opt/orch/models/fake}}
    load:
      concurrency: [2]
      input_tokens: {{kind: dataset, path: {path}, field: n}}
      output_tokens: {{kind: fixed, tokens: 3}}
      prompts: {{path: {path}, field: text}}
      requests: 6
      request_timeout_s: 30
    health_timeout_s: 60
step_timeout_s: 300
"""


def test_a_serving_step_replays_the_prompts_file(tmp_path: Path) -> None:
    req, _ = setup(tmp_path)
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"text": p, "n": len(p.split())}) + "\n" for p in PROMPTS))
    Path(req.plan).write_text(PLAN.format(path=data))
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    lines = (result.run_dir / "steps/fake-r1/records-c2.jsonl").read_text().splitlines()
    recs = [RequestRecord.model_validate_json(x) for x in lines]
    assert sorted(r.input_tokens for r in recs) == sorted([6, 4, 2] * 2)
    assert all(r.usage_reported for r in recs)


def test_a_prompts_file_that_is_not_a_regular_file_ends_the_step(tmp_path: Path) -> None:
    req, _ = setup(tmp_path)
    real = tmp_path / "real.jsonl"
    real.write_text('{"text": "hi", "n": 1}\n')
    fifo = tmp_path / "fifo.jsonl"  # a FIFO would hang a plain read: refused at once instead
    os.mkfifo(fifo)
    plan = PLAN.format(path=real).replace(f"prompts: {{path: {real}", f"prompts: {{path: {fifo}")
    Path(req.plan).write_text(plan)
    result = scale_test(req)
    assert result.exit_code == EXIT_INFRA
    (step,) = result.serving
    assert any("prompts not read" in r for r in step.reasons), step.reasons
