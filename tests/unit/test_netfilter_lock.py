"""orch's iptables edits on a node are check-then-change steps; each runs under one node lock."""

from __future__ import annotations

import subprocess

from orchestrator.faults.kinds import netfilter
from orchestrator.faults.sweep import sweep_script


def _parses(script: str) -> bool:
    return subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0


def test_inject_and_revert_hold_the_lock_and_parse() -> None:
    for action in (netfilter.roce_drop("fab0", "roce-drop-1"), netfilter.packet_loss("fab0", "pl-1", 0.1)):
        for script in (action.inject, action.revert):
            assert "flock -w 10 9" in script and f"9>>{netfilter.IPT_LOCK}" in script
            assert _parses(script), script


def test_inject_lists_once_and_declares_only_what_is_missing() -> None:
    inject = netfilter.roce_drop("fab0", "roce-drop-1").inject
    # One listing, no separate "does the chain exist" probe that another session could race.
    assert inject.count("iptables -w 5 -S") == 1 and "-S ORCH-FAULT" not in inject
    assert inject.count("case ") == 3  # chain, INPUT jump, OUTPUT jump


def test_sweep_decides_dangling_jumps_from_one_listing() -> None:
    script = sweep_script("node2")
    chain_part = script[script.index("flock") :]
    assert chain_part.count("iptables -w 5 -S") == 1 and "-S ORCH-FAULT" not in chain_part
    assert _parses(script)
