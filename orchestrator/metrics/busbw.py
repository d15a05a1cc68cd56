"""Bandwidth maths as nccl-tests defines it (ARCHITECTURE.md, "Metric definitions").

algbw = S / t, with S the size column nccl-tests prints (bytes) and t the time column (µs);
GB/s means 1e9 bytes per second. For all_gather, reduce_scatter and alltoall the printed size is
the whole buffer (per-rank count x nranks), which is what nccl-tests divides by the time.
busbw = algbw x factor(collective, n), the figure comparable across collectives and rank counts.

nccl-tests before June 2020 (commit ec1b5e2) computed algbw of all_gather and reduce_scatter with
(n-1) instead of n; busbw was the same before and after, so recomputed busbw holds for every
version while recomputed algbw of those two collectives differs on old output.
"""

from __future__ import annotations

from orchestrator.models.results import Collective

GB = 1.0e9
_US = 1.0e-6


def busbw_factor(collective: Collective, nranks: int) -> float:
    """The factor turning algbw into busbw for `collective` over `nranks` ranks.

    Raises ValueError for nranks < 1.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    n = float(nranks)
    if collective == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1.0) / n
    return 1.0  # broadcast, reduce, sendrecv


def algbw_gbs(size_bytes: int, time_us: float) -> float:
    """Algorithm bandwidth in GB/s from the printed size (bytes) and time (µs).

    A zero time gives 0.0 rather than infinity: nccl-tests never prints one for a real row.
    """
    if time_us <= 0:
        return 0.0
    return size_bytes / (time_us * _US) / GB


def busbw_gbs(collective: Collective, size_bytes: int, time_us: float, nranks: int) -> float:
    """Bus bandwidth in GB/s, as nccl-tests prints it in the busbw column."""
    return algbw_gbs(size_bytes, time_us) * busbw_factor(collective, nranks)


def scaling_efficiency(busbw: float, reference_busbw: float) -> float | None:
    """busbw of a step divided by busbw of the reference step; None when the reference is 0."""
    if reference_busbw <= 0:
        return None
    return busbw / reference_busbw


def decimals(token: str) -> int:
    """How many decimals a printed number carries ("12.34" -> 2, "12463" -> 0)."""
    mantissa = token.lower().split("e", 1)[0]
    return len(mantissa.split(".", 1)[1]) if "." in mantissa else 0


def busbw_tolerance(
    collective: Collective, size_bytes: int, time_token: str, busbw_token: str, nranks: int
) -> float:
    """How far a busbw recomputed from printed (rounded) columns may lie from the printed busbw.

    Half a unit of the busbw's last printed digit, plus the effect of the time column's own
    rounding (half a unit of its last digit) on S/t.
    """
    time_us = float(time_token)
    half_bw = 0.5 * 10.0 ** -decimals(busbw_token)
    half_t = 0.5 * 10.0 ** -decimals(time_token)
    if time_us <= half_t:
        return float("inf")
    bw = busbw_gbs(collective, size_bytes, time_us, nranks)
    return half_bw + bw * half_t / (time_us - half_t) + 1e-9
