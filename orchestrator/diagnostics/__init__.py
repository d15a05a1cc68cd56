"""GPU and NIC diagnostics as steps: each tool run through Slurm once on every node, its output read
into per-node figures and judged against thresholds (docs/diagnostics.md)."""
