"""The output-quality gate's data: prompts, tasks, what is recorded per output, and the figures of
one arm's outputs against another's (docs/quality.md).

A plan's QualityGate (models/quality_gate.py) names the prompt set (the built-in one, or a JSONL
file whose sha256 the run keeps), the greedy decoding (temperature 0 always, a seed, fixed
max_tokens), an optional accuracy task file, and the thresholds. metrics/quality.py computes
OutputFigures and Accuracy; metrics/decision.py judges them into a QualityJudgement
(models/decision.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.names import Name
from orchestrator.models.results import Percentiles

MAX_FILE_BYTES = 8 << 20
"""A prompt or task file larger than this is refused before it is read (8 MiB)."""
MAX_ITEMS = 10_000
"""At most this many prompts or tasks in one file."""
MAX_TEXT_CHARS = 32_768
"""At most this many characters in one prompt, expected answer or choice."""

Scoring = Literal["exact", "contains", "choice"]
"""How a task's answer is scored: exact (the stripped answer equals the expected text), contains
(the answer holds it), choice (the first of the task's choices that the answer names is the expected
one)."""
Unit = Literal["tokens", "words"]
"""What divergence is counted in: token ids where both sides returned them, else words."""


class Prompt(StrictModel):
    """One prompt of a prompt set."""

    id: Name
    prompt: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)


class PromptSet(StrictModel):
    """The prompts a gate sends, where they came from, and the sha256 of what was read."""

    source: str = Field(description="`builtin:NAME`, or the file's absolute path")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    prompts: list[Prompt] = Field(min_length=1, max_length=MAX_ITEMS)


class Task(StrictModel):
    """One accuracy task: a prompt and its expected answer, scored one way."""

    id: Name
    prompt: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    expected: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    scoring: Scoring = "exact"
    choices: list[str] = Field(default_factory=list, max_length=64)

    @model_validator(mode="after")
    def _choices(self) -> Task:
        if self.scoring == "choice" and self.expected not in self.choices:
            raise ValueError(f"task {self.id}: scoring choice needs choices that hold the expected answer")
        if any(not c or len(c) > MAX_TEXT_CHARS for c in self.choices):
            raise ValueError(f"task {self.id}: a choice is empty or longer than {MAX_TEXT_CHARS} characters")
        return self


class Output(StrictModel):
    """One answer as an engine gave it, greedy: its text, and token ids and logprobs where given."""

    id: Name = Field(description="the prompt's or task's id")
    status: Literal["ok", "error", "aborted"]  # RequestStatus (a test holds them equal)
    text: str = ""
    token_ids: list[int] | None = Field(default=None, description="None: the engine returned none")
    logprobs: list[float] | None = Field(
        default=None, description="each generated token's logprob; None: the engine gave none"
    )
    error: str | None = None


class OutputFigures(StrictModel):
    """One arm's outputs against another's, prompt by prompt (B against A, or A against A)."""

    name: str = Field(description="e.g. `B vs A`, `A vs A (run twice)`, `A c1 vs c4`")
    n: int = Field(ge=0, description="prompts answered on both sides")
    unit: Unit
    exact_match: float | None = Field(description="share of prompts whose outputs are equal (None: n=0)")
    agreed: Percentiles = Field(description="units agreed before the first divergence, per prompt")
    agreed_p5: float | None = Field(default=None, description="5th percentile of agreed")
    first_divergence: Percentiles = Field(description="where the first divergence falls (diverging prompts)")
    logprob_pairs: int = Field(
        default=0, ge=0, description="shared-prefix tokens with a logprob on both sides"
    )
    max_logprob_delta: float | None = Field(default=None, description="largest |logprob B - logprob A|")
    p99_logprob_delta: float | None = Field(default=None, description="None below 100 pairs")
    missing: int = Field(default=0, ge=0, description="prompts without an ok answer on a side")


class Accuracy(StrictModel):
    """An arm's score on the accuracy tasks, with its Wilson interval."""

    n: int = Field(ge=0)
    correct: int = Field(ge=0)
    accuracy: float | None
    low: float | None = Field(description="Wilson interval, lower bound")
    high: float | None = Field(description="Wilson interval, upper bound")
    confidence: float = 0.95
