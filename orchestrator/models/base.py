from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of all orch models: unknown fields are refused, values are checked on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)
