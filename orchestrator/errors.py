"""The error tree of orch.

Every error a user can cause or meet carries the exit code the CLI maps it to and a short hint
saying what to do. Library code raises these; only the CLI prints them and exits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

EXIT_OK = 0
EXIT_THRESHOLDS = 1
EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = 130


class OrchError(Exception):
    """Base of every error orch raises on purpose."""

    exit_code: int = EXIT_INFRA

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(OrchError):
    """A file or flag given by the user is wrong (plan, stack, CLI value)."""

    exit_code = EXIT_USAGE


class InventoryError(ConfigError):
    """The Ansible inventory cannot be used: names the file, host and variable."""


class ParseError(ConfigError):
    """A tool output or log could not be parsed; keeps the raw text for the user."""

    def __init__(self, message: str, *, raw: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.raw = raw


class InfraError(OrchError):
    """Something outside orch failed: a node, the scheduler, a daemon."""

    exit_code = EXIT_INFRA


class LabError(InfraError):
    """The virtual lab could not be brought up, inspected or taken down."""


class RemoteError(InfraError):
    """A command on a node could not be run (connect, timeout, host key)."""


class ProvisionError(InfraError):
    """Ansible provisioning or fingerprinting failed."""


class SchedulerError(InfraError):
    """Slurm (or the local launcher) refused or lost a job."""


class FaultError(InfraError):
    """A fault could not be injected or reverted."""


class Interrupted(OrchError):
    """The user interrupted the run; faults were reverted and jobs cancelled."""

    exit_code = EXIT_INTERRUPTED


_K = TypeVar("_K", bound=str)
_T = TypeVar("_T")


def registered(table: Mapping[_K, _T], name: str, what: str, *, hint: str | None = None) -> _T:
    """table[name], for a small table of registered things (engines, report formats, fault kinds,
    keyed by str or a Literal of names); raises ConfigError "unknown <what> 'name' (known: ...)"
    naming them in the table's order."""
    for key, value in table.items():
        if key == name:
            return value
    raise ConfigError(f"unknown {what} {name!r} (known: {', '.join(table)})", hint=hint)


def one_line(e: BaseException, limit: int = 200) -> str:
    """An exception's text on one line (pydantic and json errors span several), cut to `limit`."""
    text = " ".join(str(e).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
