"""busbw maths against the nccl-tests definitions."""

from __future__ import annotations

import pytest

from orchestrator.metrics.busbw import (
    algbw_gbs,
    busbw_factor,
    busbw_gbs,
    busbw_tolerance,
    decimals,
    scaling_efficiency,
)


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("all_reduce", 8, 2 * 7 / 8),
        ("all_reduce", 1, 0.0),
        ("all_gather", 4, 3 / 4),
        ("reduce_scatter", 2, 1 / 2),
        ("alltoall", 8, 7 / 8),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 2, 1.0),
    ],
)
def test_factor(collective: str, n: int, factor: float) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)  # type: ignore[arg-type]


def test_factor_refuses_zero_ranks() -> None:
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)


def test_algbw_units() -> None:
    # 1 GB in 1 s (1e6 us) is 1 GB/s: GB = 1e9 bytes, as nccl-tests counts
    assert algbw_gbs(1_000_000_000, 1e6) == pytest.approx(1.0)
    assert algbw_gbs(8, 0.0) == 0.0


def test_busbw_all_reduce_row() -> None:
    # a row of the superbenchmark A100x8 fixture: 8589934592 B in 63896 us -> busbw 235.26
    assert busbw_gbs("all_reduce", 8589934592, 63896, 8) == pytest.approx(235.26, abs=0.01)


def test_scaling_efficiency() -> None:
    assert scaling_efficiency(90.0, 100.0) == pytest.approx(0.9)
    assert scaling_efficiency(90.0, 0.0) is None


def test_decimals_and_tolerance() -> None:
    assert decimals("12.34") == 2
    assert decimals("12463") == 0
    assert busbw_tolerance("all_reduce", 8, "12463", "0.00", 2) >= 0.005
