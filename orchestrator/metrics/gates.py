"""Published single-node all_reduce busbw gates: data, each with where it was published.

A gate is the least busbw (GB/s, nccl-tests' bus bandwidth) that one whole node of a GPU model
must reach in all_reduce at one message size, as a health-check suite ships it. They seed the
built-in thresholds of a plan; they are not wired into any plan yet. A gate at 16 GiB needs a plan
that runs 16 GiB (thresholds match sizes exactly, and the acceptance plan stops at 1 GiB): with a
smaller largest size it would read "no measurement". See docs/isolation.md.

All four figures below were found in Azure's HPC node health checks (AzNHC,
github.com/Azure/azurehpc-health-checks), whose `check_nccl_allreduce` / `check_rccl_allreduce`
run all_reduce_perf on one VM with one rank per GPU (`mpirun -np <gpus> --map-by
ppr:<gpus>:node`, `-b SIZE -e SIZE -f 2 -g 1 -c 1`) and compare the reported average bus bandwidth
with the figure. The NVIDIA, AMD (CVS) and Google (cluster-health-scanner) documents searched did
not state these numbers.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.plan import format_size

AZNHC = "https://github.com/Azure/azurehpc-health-checks/blob/main/conf/"


class BusbwGate(StrictModel):
    """One published gate."""

    gpu: str = Field(description="GPU model, as the vendor names it")
    vendor: str = Field(description="gpu_vendor of the inventory: nvidia | amd")
    gpus_per_node: int = Field(ge=1)
    collective: str = "all_reduce"
    size_bytes: int = Field(ge=1)
    min_busbw_gbs: float = Field(gt=0)
    library: str = Field(description="NCCL or RCCL")
    source: str = Field(description="where the figure is published: a file and the line that holds it")

    def line(self) -> str:
        """'H100: all_reduce >= 460 GB/s at 16G (8 GPUs, NCCL)'."""
        return (
            f"{self.gpu}: {self.collective} >= {self.min_busbw_gbs:g} GB/s at {format_size(self.size_bytes)} "
            f"({self.gpus_per_node} GPUs, {self.library})"
        )


def _aznhc(
    gpu: str, vendor: str, size_bytes: int, min_busbw_gbs: float, library: str, line: str
) -> BusbwGate:
    """A gate of 8 GPUs per node that AzNHC's conf/ holds; `line` names the file and the line."""
    return BusbwGate(
        gpu=gpu, vendor=vendor, gpus_per_node=8, size_bytes=size_bytes, min_busbw_gbs=min_busbw_gbs,
        library=library, source=AZNHC + line,
    )  # fmt: skip


GATES: tuple[BusbwGate, ...] = (
    _aznhc("A100", "nvidia", 8 << 30, 228.0, "NCCL",
           "nd96asr_v4.conf: `check_nccl_allreduce 228.0 10 /opt/microsoft/ndv4-topo.xml 8G`"
           " (ND96asr v4, 8x A100 40GB)"),
    _aznhc("H100", "nvidia", 16 << 30, 460.0, "NCCL",
           "nd96isr_h100_v5.conf: `check_nccl_allreduce 460.0 1 /opt/microsoft/ndv5-topo.xml 16G`"
           " (ND96isr H100 v5, 8x H100)"),
    _aznhc("H200", "nvidia", 16 << 30, 431.0, "NCCL",
           "nd96isr_h200_v5.conf: `check_nccl_allreduce 431.0 1 16G "
           "$AZ_NHC_ROOT/topofiles/ndv5-topo.xml` (ND96isr H200 v5, 8x H200)"),
    _aznhc("MI300X", "amd", 16 << 30, 314.0, "RCCL",
           "nd96isr_mi300x_v5.conf: `check_rccl_allreduce 314 1 16G` (ND96isr MI300X v5, 8x MI300X)"),
)  # fmt: skip


def gate_for(gpu: str) -> BusbwGate | None:
    """The published gate of a GPU model (case-insensitive, e.g. 'h100'), or None."""
    return next((g for g in GATES if g.gpu.lower() == gpu.lower()), None)
