"""The virtual lab: a real multi-node cluster (namespaces, sshd, munge, Slurm) on one Linux machine."""

from orchestrator.lab.config import LabConfig, make_config
from orchestrator.lab.lab import DownResult, LabStatus, UpResult, down, slurm_env, status, up

__all__ = [
    "DownResult",
    "LabConfig",
    "LabStatus",
    "UpResult",
    "down",
    "make_config",
    "slurm_env",
    "status",
    "up",
]
