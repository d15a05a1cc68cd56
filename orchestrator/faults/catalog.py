"""The fault catalog: every fault kind, collected from the family modules of faults.kinds.

Each family module registers its kinds in ``KINDS`` (FaultInfo: what it does, what it can reach,
how it is undone, how it is built); this module imports every module of the package, so that a new
family is one new module there. Everything that iterates or looks up fault kinds (the engine, the
CLI, plan validation, serving faults, recovery-test) goes through ``CATALOG`` / ``fault_info``.
"""

from __future__ import annotations

import importlib
import pkgutil

from orchestrator.errors import registered
from orchestrator.faults import kinds
from orchestrator.faults.base import FaultInfo as FaultInfo
from orchestrator.models.fault import FAULT_KINDS, FaultKind, Transport


def _collect() -> dict[FaultKind, FaultInfo]:
    found: list[FaultInfo] = []
    for mod in sorted(m.name for m in pkgutil.iter_modules(kinds.__path__)):
        found += getattr(importlib.import_module(f"{kinds.__name__}.{mod}"), "KINDS", ())
    names = [i.kind for i in found]
    if sorted(names) != sorted(FAULT_KINDS):
        raise RuntimeError(
            f"fault kinds registered in faults.kinds {sorted(names)} differ from models.fault's "
            f"FaultKind {sorted(FAULT_KINDS)}"
        )
    return {i.kind: i for i in sorted(found, key=lambda i: i.order)}


CATALOG: dict[FaultKind, FaultInfo] = _collect()


def kind_names() -> tuple[str, ...]:
    """The known kinds, in catalog order."""
    return tuple(CATALOG)


def fault_info(kind: str) -> FaultInfo:
    """The registered kind ``kind``; raises ConfigError naming the known kinds."""
    return registered(CATALOG, kind, "fault kind", hint="see `orch fault list`")


def unreachable_warning(kind: FaultKind, transport: Transport) -> str | None:
    """A warning when ``kind`` cannot touch ``transport`` (e.g. roce-drop vs a hardware RoCE NIC)."""
    info = fault_info(kind)
    if transport in info.transports:
        return None
    return (
        f"fault {kind} cannot affect transport {transport} (it reaches {', '.join(info.transports)}); "
        "its recovery numbers will show no interruption"
    )
