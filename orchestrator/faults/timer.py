"""The node-side timer: a detached ``sleep D; revert`` that outlives orch and the SSH link.

Before a fault is injected, its revert line is written to ``/run/orch-fault/<node>/<id>.revert``
and a timer is started with setsid (its own session, stdio on /dev/null, so neither a dropped SSH
channel nor orch's death reaches it); its PID goes to ``<id>.timer``. Arming and injecting travel
in one shell line (one round trip). Orch's own revert cancels the timer by process group, after
checking that the PID still runs a command line that names the fault id.
"""

from __future__ import annotations

from orchestrator.faults.base import ensure_dir, quiet, record_dir, sh

_KILL_TIMER = quiet('kill -TERM -"$P"')


def stop_timer(pid_file: str, fid: str) -> str:
    """Shell: stop the timer whose PID is in ``pid_file`` if that PID still runs a command line
    naming ``fid`` (both shell words, quoted by the caller), killing its process group. Used by
    orch's own revert and by the sweep."""
    return (
        f"P=; {{ read -r P < {pid_file}; }} 2>/dev/null; "
        f'if [ -n "$P" ] && grep -qF {fid} /proc/"$P"/cmdline 2>/dev/null; then {_KILL_TIMER}; fi'
    )


def paths(node: str, fid: str) -> tuple[str, str]:
    """(revert file, timer pid file) of a fault on the node."""
    d = record_dir(node)
    return f"{d}/{fid}.revert", f"{d}/{fid}.timer"


def arm_and_inject(node: str, fid: str, revert: str, fires_after_s: float, inject: str) -> str:
    """One line: write the revert file, start the timer, print its PID, then inject.

    The line's exit status is the inject command's; if the record cannot be written, nothing is
    injected. Shell built-ins where they do (``[ -d ]``, ``read``): every process the line starts
    costs the node about a millisecond, and a fan-out over many nodes pays it once per node.
    """
    rev, pid = paths(node, fid)
    timer_body = f"sleep {fires_after_s:.3f}; sh {sh(rev)}; rm -f {sh(rev)} {sh(pid)}"
    return (
        f"if {{ {ensure_dir(sh(record_dir(node)))}; }} && printf '%s\\n' {sh(revert)} > {sh(rev)}; then "
        f"setsid sh -c {sh(timer_body)} </dev/null >/dev/null 2>&1 & "
        f'echo $! > {sh(pid)}; echo "orch-timer $!"; {inject}; '
        "else false; fi"
    )


def cancel_and_revert(node: str, fid: str, revert: str) -> str:
    """One line: stop the timer (if it is still ours), revert, remove the record. Idempotent."""
    rev, pid = paths(node, fid)
    return (
        f"{stop_timer(sh(pid), sh(fid))}; "
        f"{revert}; rm -f {sh(rev)} {sh(pid)}"
    )


def parse_timer_pid(stdout: str) -> int | None:
    """The timer PID printed by arm_and_inject, if any."""
    for line in stdout.splitlines():
        if line.startswith("orch-timer "):
            word = line.split()[1]
            return int(word) if word.isdigit() else None
    return None
