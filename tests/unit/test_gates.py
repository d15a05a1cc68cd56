"""The published busbw gates: the figures the issue names, each with a source naming its file."""

from __future__ import annotations

from orchestrator.metrics.gates import GATES, gate_for
from orchestrator.models.plan import parse_size


def test_the_four_gates_and_their_sources() -> None:
    got = {(g.gpu, g.size_bytes, g.min_busbw_gbs) for g in GATES}
    assert got == {
        ("A100", parse_size("8G"), 228.0),
        ("H100", parse_size("16G"), 460.0),
        ("H200", parse_size("16G"), 431.0),
        ("MI300X", parse_size("16G"), 314.0),
    }
    for g in GATES:
        # the source quotes the check line, whose figure and size must be the gate's own
        assert f"{g.min_busbw_gbs:g}" in g.source and g.source.startswith("https://github.com/Azure/")
        assert ("8G" if g.size_bytes == 8 << 30 else "16G") in g.source
    assert gate_for("mi300x") is not None and gate_for("mi300x").library == "RCCL"  # type: ignore[union-attr]
    assert gate_for("B200") is None
    assert gate_for("H100").line() == "H100: all_reduce >= 460 GB/s at 16G (8 GPUs, NCCL)"  # type: ignore[union-attr]
