"""A plan's `quality:` (docs/quality.md): the prompt set, the greedy decoding and the thresholds.

Apart from models/quality.py, whose figures models/decision.py holds, because models/serving.py
(AbsPath, Api) leads to models/decision.py.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from orchestrator.models.base import StrictModel
from orchestrator.models.serving import AbsPath, Api

Share = Annotated[float, Field(ge=0, le=1)]
"""A share, 0 to 1."""

# What the loader refuses across fields, said in the published JSON Schema too (`orch schema plan`).
_GATE_SCHEMA_RULES: JsonDict = {
    "anyOf": [{"required": [k]} for k in ("min_exact_match", "min_exact_match_of_floor", "tasks")],
    "dependentRequired": {"max_accuracy_drop": ["tasks"]},
}


class QualityGate(StrictModel):
    """A plan's `quality:`: B's answers against A's, greedy, on one prompt set (docs/quality.md)."""

    model_config = ConfigDict(json_schema_extra=_GATE_SCHEMA_RULES)

    prompts: AbsPath | None = Field(
        default=None,
        description='absolute path of a JSONL prompt file ({"prompt": ...} a line, optional "id"), '
        "read on the controller, its sha256 kept in the run; None = the built-in prompt set",
    )
    tasks: AbsPath | None = Field(
        default=None,
        description='absolute path of a JSONL accuracy task file ({"prompt", "expected", '
        '"scoring": exact|contains|choice, "choices"} a line); None = no accuracy eval',
    )
    max_tokens: int = Field(default=16, ge=1, le=4096, description="fixed max_tokens of every request")
    seed: int = Field(default=0, ge=0, le=2**31 - 1, description="sent as `seed` with every request")
    concurrency: int = Field(
        default=4, ge=2, le=1024, description="N of the A-at-concurrency-1-against-N noise floor"
    )
    api: Api = Field(default="completions", description="/v1/completions or /v1/chat/completions")
    min_exact_match: Share | None = Field(
        default=None, description="B's outputs equal to A's: at least this share"
    )
    min_exact_match_of_floor: Share | None = Field(
        default=None,
        description="relative form: B's exact-match share at least this fraction of the A-against-A "
        "floor's (the lower of A run twice and A at concurrency 1 against N)",
    )
    max_accuracy_drop: Share | None = Field(
        default=None,
        description="with tasks: B fails when its accuracy's Wilson upper bound is below A's accuracy "
        "minus this (0 when not given)",
    )

    @model_validator(mode="after")
    def _judges_something(self) -> QualityGate:
        if self.min_exact_match is None and self.min_exact_match_of_floor is None and self.tasks is None:
            raise ValueError(
                "quality: give min_exact_match, min_exact_match_of_floor, or tasks (an accuracy eval): "
                "a gate with no threshold judges nothing"
            )
        if self.max_accuracy_drop is not None and self.tasks is None:
            raise ValueError("quality: max_accuracy_drop needs tasks (an accuracy task file)")
        return self
