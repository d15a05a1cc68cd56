"""The scheduler of a backend name: the one place that maps a name to its class."""

from __future__ import annotations

from typing import Literal

from orchestrator.models.cluster import Cluster
from orchestrator.models.plan import Plan
from orchestrator.scheduler.allocation import AllocationScheduler
from orchestrator.scheduler.base import JobScheduler, backend_traits
from orchestrator.scheduler.local import LocalScheduler
from orchestrator.scheduler.salloc import SallocScheduler
from orchestrator.scheduler.slurm import SlurmScheduler


def make_scheduler(
    backend: Literal["slurm", "local"], cluster: Cluster, plan: Plan | None = None
) -> JobScheduler:
    """The backend's scheduler; on Slurm, the plan's slurm_mode picks one allocation for the
    ladder (its sruns started by orch, or by an sbatch'd driver: allocation-batch) or one job per
    step (concurrent steps always get a job each)."""
    if backend_traits(backend).on_this_machine:
        return LocalScheduler()
    if plan is not None and plan.slurm_mode == "allocation" and not plan.concurrent_steps:
        return SallocScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    if plan is not None and plan.slurm_mode == "allocation-batch" and not plan.concurrent_steps:
        return AllocationScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
    return SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
