"""The words and the result type of every A/B judgement (orchestrator/metrics/decision.py decides).

One direction literal, the words derived from it, one `FigureChange` for a figure of B against A
(collective compare, serving compare, a result from elsewhere, a migration's A/B), and one set of
recovery status words. Stored JSON written by older versions is still read: a migration's
FigureChange had `log_ratio`, a log-scale `band` and `direction`; the recovery words had three
spellings (`no_interruption`, `no-interruption`, `no-impact`) and underscores in a record's outcome.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.quality import Accuracy, OutputFigures

Direction = Literal["better", "same", "worse"]
"""Where B stands against A, beyond the noise band or within it ("same")."""
Change = Literal[Direction, "n/a"]
"""A figure's change; n/a: not judged (a side lacks the figure, or its p99 rests on n < 100)."""
InteractiveVerdict = Literal[Direction, "worse for interactive", "n/a"]
"""A serving level by the interactive rule: more throughput does not buy back a worse p99."""
WORSE: tuple[InteractiveVerdict, ...] = ("worse", "worse for interactive")
"""The verdicts that mean B is worse (an exit code 1 in compare)."""


class FigureChange(StrictModel):
    """One figure of B against A: each side's value, B/A, the noise band and the call."""

    figure: str | None = Field(default=None, description="e.g. output tokens/s, TTFT p99, busbw")
    a: float | None = Field(description="A's figure: the median over A's runs, or the one stated")
    b: float | None = Field(description="B's figure")
    ratio: float | None = Field(description="B / A")
    band: float | None = Field(description="relative half-width of 'same', e.g. 0.12 = +-12%")
    change: Change
    n_a: int | None = Field(
        default=None,
        description="samples behind A's figure (requests, or runs for throughput); None: not stated",
    )
    n_b: int | None = None
    note: str | None = Field(default=None, description="why n/a")

    @model_validator(mode="before")
    @classmethod
    def _read_migrate_v1(cls, data: Any) -> Any:
        """A migration's FigureChange as older versions wrote it (migrate.json): `log_ratio`, `band`
        on the log scale and `direction`."""
        if isinstance(data, dict) and "direction" in data and "change" not in data:
            data = dict(data)
            log_ratio, band = data.pop("log_ratio", None), data.get("band")
            data["change"] = data.pop("direction")
            data["ratio"] = None if log_ratio is None else math.exp(log_ratio)
            data["band"] = None if band is None else math.expm1(band)
        return data

    @property
    def log_ratio(self) -> float | None:
        """ln(B / A)."""
        return None if self.ratio is None or self.ratio <= 0 else math.log(self.ratio)

    @property
    def log_band(self) -> float | None:
        """The band's half-width on the log scale, ln(1 + band)."""
        return None if self.band is None else math.log1p(self.band)


# --- recovery ------------------------------------------------------------------------------------

_OLD_RECOVERY_WORDS = {
    "no_interruption": "no-interruption",
    "no-impact": "no-interruption",
    "not_recovered": "not-recovered",
    "not_detected": "not-detected",
}
"""Spellings of older versions (a record's outcome; a serving fault's status) -> the one spelling."""


def recovery_word(value: Any) -> Any:
    """The one spelling of a recovery status word written by an older version (others as given)."""
    return _OLD_RECOVERY_WORDS.get(value, value) if isinstance(value, str) else value


RecoveryStatus = Annotated[
    Literal["recovered", "no-interruption", "not-recovered", "no-data"], BeforeValidator(recovery_word)
]
"""How one fault's recovery went: recovered; no-interruption (nothing to recover from: no error,
no restart, no stall; for a service, nothing failed and it stayed steady); not-recovered (not within
the window); no-data (nothing could show a recovery)."""
RecoveryOutcome = Annotated[
    Literal["recovered", "no-interruption", "not-recovered", "not-detected", "aborted"],
    BeforeValidator(recovery_word),
]
"""A recovery record's outcome: the status words, and not-detected / aborted of the fault stage."""


# --- output quality ------------------------------------------------------------------------------


class QualityJudgement(StrictModel):
    """The output-quality gate's verdict (metrics/decision.quality_verdict): pass or fail, each
    reason with its figures, and the figures it was judged on (docs/quality.md)."""

    passed: bool
    reasons: list[str] = Field(default_factory=list, description="why it failed, each with its figures")
    notes: list[str] = Field(default_factory=list, description="what was not judged, and why")
    b_vs_a: OutputFigures
    floor: list[OutputFigures] = Field(default_factory=list, description="A against A: the noise floor")
    accuracy_a: Accuracy | None = None
    accuracy_b: Accuracy | None = None
    prompts_sha256: str | None = Field(default=None, description="the prompt set's sha256")
