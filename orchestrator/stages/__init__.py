"""Stages of `orch scale-test` that sit around the ladder: the stack check and the plan's faults."""
