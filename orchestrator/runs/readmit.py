"""`orch cert readmit`: drain, test again, re-admit, as one loop (docs/isolation.md, "Re-admit").

One pass looks at every node of the inventory that Slurm shows drained:
- a node drained by someone other than orch (its reason does not start with "orch ") is left alone;
- a node drained by orch less than `delay` ago waits (a node that was just drained is not tested
  again at once: the fault that drained it may still be there);
- any other is tested again with the short isolation plan (`orch cert resume`: alone, then with a
  known-good partner) and returned to service on pass; on fail it stays drained, the re-test's run
  id in its reason, and the evidence is in the re-test's run folder.

A failure budget stops the pass before it empties a partition: the inventory's
`orch_max_unavailable`, the most of its nodes orch leaves out of service (the same budget bounds
`orch health --drain`). When more nodes than that are unavailable (drained, down, not responding:
something else took them out too), no node is re-tested (a re-test takes healthy partners off a
partition that is already thin) and the pass says so; a person decides. `orch cron` can run one
pass a night, or `--every` loops in the foreground.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.inventory import load_inventory
from orchestrator.models.base import StrictModel
from orchestrator.runs.node_resume import ResumeOutcome, resume_node
from orchestrator.scheduler.slurm import SlurmScheduler

Action = Literal["returned", "kept drained", "waiting", "left alone", "budget reached"]

ORCH_REASON = "orch "
"""How the reason of a node orch drained starts (runs/drain.drain_reason)."""


class ReadmitPolicy(StrictModel):
    """When a drained node is tested again, and how many nodes may be out of service."""

    delay_s: float = Field(default=600.0, ge=0, description="wait this long after the drain first")
    max_unavailable: int = Field(
        ge=0, description="with more unavailable nodes in the inventory than this, the pass re-tests none"
    )


class ReadmitEntry(StrictModel):
    node: str
    state: str = Field(description="the node's Slurm state before the pass")
    reason: str = Field(description="its drain reason before the pass")
    drained_at: datetime | None = Field(description="when the reason was set (Slurm's clock)")
    action: Action
    detail: str = Field(description="why this action, or the re-test's outcome")
    retest: str | None = Field(default=None, description="the re-test's run id")
    retest_dir: Path | None = Field(default=None, description="its run folder: the evidence")


class ReadmitPass(StrictModel):
    """One pass of the loop over an inventory."""

    inventory: Path
    policy: ReadmitPolicy
    unavailable: dict[str, str] = Field(description="node -> its state, before the pass")
    entries: list[ReadmitEntry]

    @property
    def kept(self) -> list[str]:
        return [e.node for e in self.entries if e.action == "kept drained"]


Resume = Callable[..., ResumeOutcome]


def readmit_pass(
    inventory: Path,
    out_dir: Path,
    policy: ReadmitPolicy,
    *,
    sched: SlurmScheduler | None = None,
    now: datetime | None = None,
    resume: Resume = resume_node,
) -> ReadmitPass:
    """One pass (module doc). Raises ConfigError for an unreadable inventory, SchedulerError when
    scontrol or sinfo fail; a re-test that raises is reported as the node kept drained."""
    cluster = load_inventory(inventory)
    sched = sched or SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    now = now or datetime.now()
    unavailable = sched.unavailable_nodes(cluster.names)
    entries: list[ReadmitEntry] = []
    over = len(unavailable) > policy.max_unavailable
    for node in cluster.names:
        if node not in unavailable:
            continue
        state, reason, since = sched.node_status(node)
        if "DRAIN" not in state.upper():
            continue  # down or not responding: Slurm's to return, not orch's

        seen: dict[str, object] = {"node": node, "state": state, "reason": reason, "drained_at": since}

        def entry(action: Action, detail: str, seen: dict[str, object] = seen, **kw: object) -> ReadmitEntry:
            return ReadmitEntry.model_validate({**seen, "action": action, "detail": detail, **kw})

        if not reason.startswith(ORCH_REASON):
            entries.append(entry("left alone", "drained by someone else, not by orch"))
        elif since is not None and now - since < timedelta(seconds=policy.delay_s):
            ready = since + timedelta(seconds=policy.delay_s)
            entries.append(entry("waiting", f"drained at {since:%H:%M:%S}; re-tested from {ready:%H:%M:%S}"))
        elif over:
            entries.append(entry(
                "budget reached",
                f"{len(unavailable)} of {len(cluster.names)} nodes unavailable, more than max_unavailable "
                f"{policy.max_unavailable}: no re-test (a person decides)",
            ))  # fmt: skip
        else:
            try:
                res = resume(node, inventory, out_dir)
            except Exception as e:  # one node's re-test must not end the pass
                entries.append(entry("kept drained", f"re-test could not run: {type(e).__name__}: {e}"))
                continue
            r = res.retest
            if res.resumed:
                entries.append(entry("returned", "re-test passed", retest=r.run_id, retest_dir=r.run_dir))
            else:
                why = "; ".join(f"{c.kind} {'+'.join(c.nodes)}: {c.why}" for c in r.isolation.culprits)
                entries.append(entry("kept drained", f"re-test did not pass: {why or 'undecided'}",
                                     retest=r.run_id, retest_dir=r.run_dir))  # fmt: skip
    return ReadmitPass(inventory=inventory, policy=policy, unavailable=unavailable, entries=entries)
