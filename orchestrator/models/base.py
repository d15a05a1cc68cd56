from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Base of all orch models: unknown fields are refused, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def first_error(e: ValidationError) -> tuple[str, str]:
    """Where (its location, dotted; "" at the top level) and why of the first error of e: what a
    refusal of a user's file or option names."""
    first = e.errors()[0]
    return ".".join(str(p) for p in first["loc"]), str(first["msg"])
