"""Typed values that cross orch's boundaries (pydantic, extra='forbid')."""

from orchestrator.models.base import StrictModel

__all__ = ["StrictModel"]
