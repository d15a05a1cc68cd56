"""Stop what an interrupted provisioning left installing into the venv, before it is removed.

When orch is killed while Ansible installs the venv, the controller's ansible-playbook and its ssh
are stopped (`orch runs resume`), but the node's side of the task goes on: the pip that Ansible's
module started keeps writing into the venv for a minute or more. Removing the venv under it fails
("Directory not empty") or leaves a half venv. This script, run on the node before the removal,
finds by PID the processes that install into PREFIX (a `pip` or `-m venv` whose command line names
PREFIX or whose program is PREFIX's Python) and the Ansible module wrapper above them, sends
SIGTERM, waits up to --grace seconds, then SIGKILL. Nothing else is touched: a workload running
from the venv (collbench) is not an install and is left alone.

Prints one JSON line: {"changed": bool, "stopped": [{"pid", "cmdline"}...]}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def installs(prefix: str) -> dict[int, list[str]]:
    """PID -> command line of every process that installs into prefix."""
    me = os.getpid()
    root = prefix.rstrip("/") + "/"
    found: dict[int, list[str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        argv = _cmdline(int(name))
        if not argv:
            continue
        names_prefix = any(a == prefix or a.startswith(root) for a in argv)
        installer = any(os.path.basename(a).startswith("pip") or a == "pip" for a in argv) or (
            "-m" in argv and ("venv" in argv or "pip" in argv)
        )
        if names_prefix and installer:
            found[int(name)] = argv
    # the Ansible module wrapper that started one (python3 .../AnsiballZ_pip.py): it would go on
    for pid in list(found):
        ppid = _parent(pid)
        argv = _cmdline(ppid)
        if ppid > 1 and any("AnsiballZ_" in a for a in argv):
            found.setdefault(ppid, argv)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--grace", type=float, default=10.0)
    args = ap.parse_args()
    if not os.path.isabs(args.prefix) or os.path.normpath(args.prefix) in ("/", "/opt", "/usr"):
        raise SystemExit(f"refusing prefix {args.prefix!r}")
    found = installs(os.path.normpath(args.prefix))
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.grace
    while any(_alive(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in found:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    stopped = [{"pid": p, "cmdline": " ".join(a)[:300]} for p, a in sorted(found.items())]
    print(json.dumps({"changed": bool(found), "stopped": stopped}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
