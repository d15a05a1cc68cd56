"""Run orch's playbooks through ansible-runner: pure builders of its inputs, one thin execute().

ansible-runner gives a fixed directory contract (inputs in the private data dir, outputs in
artifacts/<ident>/{rc,status,stdout,job_events/}) and a live event stream. orch builds every
input in a pure function (tested without Ansible), puts the private data dir under the run's
output folder, turns each event into a HostEvent for a listener (the CLI renders them), and reads
the per-host outcome from the events. Nothing here prints or exits.

Secrets: ansible-runner is told not to write env/ files (suppress_env_files), facts are cached in
memory only, `no_log` results are censored by Ansible itself, and every event is scrubbed of the
known secret values before it is written. ansible-runner seeds Ansible's environment with a copy
of orch's whole environment and writes it to artifacts/<ident>/command the moment it starts: orch
replaces that environment, before the run starts, by what Ansible needs (envpolicy.tool_env plus
what orch and ansible-runner set), so HF_TOKEN and the like are never written, even when the run
is killed. The command file and the artifacts are scrubbed again before and after, in `finally`.

Interrupts: Ctrl-C or SIGTERM during a run stops the whole ansible-playbook tree at once (its
workers run in their own sessions, so ansible-runner's kill of the playbook's process group alone
would leave them and their ssh running), SIGKILL after a short grace, then KeyboardInterrupt.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import Field

from orchestrator.envpolicy import MASK, tool_env
from orchestrator.errors import ProvisionError
from orchestrator.models.base import StrictModel
from orchestrator.remote.proctree import descendants, signal_all, stop_processes
from orchestrator.safefs import atomic_write, make_dir, runtime_dir, runtime_path

HostStatus = Literal["ok", "changed", "failed", "unreachable", "skipped"]
STOP_GRACE_S = 3.0
_EVENT_STATUS: dict[str, HostStatus] = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
    "runner_item_on_failed": "failed",
}


class HostEvent(StrictModel):
    """One task's result on one host, as it happens."""

    host: str
    task: str
    status: HostStatus
    message: str | None = None
    ignored: bool = False


class HostOutcome(StrictModel):
    """What a playbook did to one host, from the final stats and the first failure."""

    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    message: str | None = Field(default=None, description="the first failure's message")

    @property
    def status(self) -> Literal["ok", "changed", "failed", "unreachable"]:
        """The host's overall state: unreachable, failed, changed or ok, in that order."""
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"


class PlaybookRequest(StrictModel):
    """One ansible-runner invocation, as orch describes it."""

    playbook: str = Field(description="file name inside the playbooks directory")
    playbooks_dir: Path
    inventory: Path
    work_dir: Path = Field(description="the private data dir (artifacts go under it)")
    extravars: dict[str, Any] = Field(default_factory=dict)
    check: bool = False
    limit: str | None = None
    vault_password_file: Path | None = None
    become_password: str | None = Field(default=None, repr=False)
    forks: int = Field(default=16, ge=1)
    timeout_s: int = Field(default=3600, ge=1)
    ident: str = "run"


class PlaybookResult(StrictModel):
    """The outcome of one playbook run."""

    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostOutcome]
    artifacts_dir: Path
    elapsed_s: float

    @property
    def failed_hosts(self) -> list[str]:
        """Hosts that failed or were unreachable."""
        return [h for h, o in self.hosts.items() if o.status in ("failed", "unreachable")]


Listener = Callable[[HostEvent], None]


SSH_ARGS = "-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=3 -o ServerAliveCountMax=2"


# --- pure builders ---------------------------------------------------------------------------------


def build_envvars(request: PlaybookRequest) -> dict[str, str]:
    """Ansible settings for orch's runs: no colour, no retry files, facts not written to disk."""
    return {
        "PATH": search_path(),
        "ANSIBLE_ROLES_PATH": str(request.playbooks_dir / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        "ANSIBLE_PIPELINING": "1",
        "ANSIBLE_DISPLAY_ARGS_TO_STDOUT": "0",
        "ANSIBLE_NO_TARGET_SYSLOG": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "0",
        "ANSIBLE_SYSTEM_WARNINGS": "0",
        # The user's host key policy stays: orch never turns host key checking off (and
        # ansible-runner turns it off when the variable is unset: say so explicitly).
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING") or "True",
        # ControlMaster sockets: a private folder (0700, owned by this user, checked before use).
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(runtime_path("cp")),
        # Ansible's default plus keepalives: a ControlMaster whose node went away (link down, no
        # RST) otherwise keeps every later ssh multiplexed on it waiting for minutes, and
        # ConnectTimeout never applies to them. A user's own ANSIBLE_SSH_ARGS wins.
        "ANSIBLE_SSH_ARGS": os.environ.get("ANSIBLE_SSH_ARGS") or SSH_ARGS,
        "ANSIBLE_LOCAL_TEMP": str(request.work_dir / "tmp"),
    }


def build_cmdline(request: PlaybookRequest) -> list[str]:
    """ansible-playbook options: --check, --diff in check mode, the vault file, the become prompt."""
    args: list[str] = []
    if request.check:
        args += ["--check", "--diff"]
    if request.vault_password_file is not None:
        args += ["--vault-password-file", str(request.vault_password_file)]
    if request.become_password is not None:
        args += ["--ask-become-pass"]
    return args


def build_passwords(request: PlaybookRequest) -> dict[str, str]:
    """pexpect answers for Ansible's prompts (held in memory, never written: suppress_env_files)."""
    if request.become_password is None:
        return {}
    return {r"^BECOME password.*:\s*?$": request.become_password}


def secret_values(request: PlaybookRequest) -> list[str]:
    """Values that must never appear in artifacts: the become password and the vault password."""
    found: list[str] = []
    if request.become_password:
        found.append(request.become_password)
    if request.vault_password_file is not None:
        try:
            text = request.vault_password_file.read_text().strip()
        except OSError:
            text = ""
        if text:
            found.append(text)
    return found


def search_path() -> str:
    """PATH with this Python's bin dir first, so that a venv's ansible-playbook is found unactivated."""
    here = str(Path(sys.executable).parent)
    rest = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and p != here]
    return os.pathsep.join([here, *rest])


def runner_kwargs(request: PlaybookRequest) -> dict[str, Any]:
    """Every keyword ansible_runner.run() gets, except the callbacks."""
    return {
        "private_data_dir": str(request.work_dir),
        "project_dir": str(request.playbooks_dir),
        "playbook": request.playbook,
        "inventory": str(request.inventory.absolute()),
        "extravars": dict(request.extravars),
        "envvars": build_envvars(request),
        "cmdline": shlex.join(build_cmdline(request)) or None,  # runner shlex.splits it back
        "passwords": build_passwords(request) or None,
        "limit": request.limit,
        "forks": request.forks,
        "timeout": request.timeout_s,
        "ident": request.ident,
        "quiet": True,
        "suppress_env_files": True,
        "fact_cache_type": "memory",
        "rotate_artifacts": 0,
        # How often ansible-runner's loop wakes to look at the cancel flag (default 5 s).
        "settings": {"pexpect_timeout": 1},
    }


def ansible_env(prepared: Mapping[str, str], parent: Mapping[str, str]) -> dict[str, str]:
    """The environment ansible-playbook gets, from the one ansible-runner prepared.

    ansible-runner starts from a copy of `parent` (orch's os.environ) and adds its own and orch's
    settings. Every variable it copied unchanged from `parent` that is not on the tool allow-list
    (envpolicy.tool_env) is dropped; what orch or ansible-runner set stays.
    """
    allowed = tool_env(parent)
    return {k: v for k, v in prepared.items() if k in allowed or parent.get(k) != v}


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """A copy of a JSON-like value with every secret string replaced by a mask."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return value
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, MASK)
        return value
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    return value


def scrub_tree(root: Path, secrets: Iterable[str]) -> list[Path]:
    """Replace every secret in the files under root (text files only); returns the files changed."""
    secrets = [s for s in secrets if s]
    changed: list[Path] = []
    if not secrets or not root.exists():
        return changed
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        new = scrub(text, secrets)
        if new != text:
            atomic_write(path, new)
            changed.append(path)
    return changed


def strip_command_env(command_file: Path) -> None:
    """Drop the process environment ansible-runner records in artifacts/<ident>/command."""
    try:
        doc = json.loads(command_file.read_text())
    except (OSError, ValueError):
        return
    if isinstance(doc, dict) and isinstance(doc.get("env"), dict):
        doc["env"] = sorted(doc["env"])  # names only: enough to debug, nothing to leak
        atomic_write(command_file, json.dumps(doc))


def scrub_artifacts(work_dir: Path, secrets: Iterable[str]) -> None:
    """Names only in every artifacts/*/command under work_dir, and no secret in any file there.

    Run before a playbook (a run killed earlier left its files as they were) and after it."""
    for command_file in sorted((work_dir / "artifacts").glob("*/command")):
        strip_command_env(command_file)
    scrub_tree(work_dir, secrets)


def _failure_message(res: Mapping[str, Any]) -> str:
    msg = str(res.get("msg") or "").strip()
    stderr = str(res.get("stderr") or "").strip()
    if stderr and stderr not in msg:
        msg = f"{msg}: {stderr.splitlines()[-1]}" if msg else stderr.splitlines()[-1]
    return " ".join(msg.split()) or "failed (no message)"


def host_event(event: Mapping[str, Any]) -> HostEvent | None:
    """The HostEvent of one ansible-runner event, or None for events that are not a task result."""
    status = _EVENT_STATUS.get(str(event.get("event", "")))
    data = event.get("event_data") or {}
    if status is None or not isinstance(data, Mapping) or "host" not in data:
        return None
    res = data.get("res") if isinstance(data.get("res"), Mapping) else {}
    assert isinstance(res, Mapping)
    if status == "ok" and res.get("changed"):
        status = "changed"
    message = _failure_message(res) if status in ("failed", "unreachable") else None
    return HostEvent(
        host=str(data["host"]),
        task=str(data.get("task") or ""),
        status=status,
        message=message,
        ignored=bool(data.get("ignore_errors")),
    )


def outcomes(events: Iterable[Mapping[str, Any]]) -> dict[str, HostOutcome]:
    """Per-host outcome: counts from playbook_on_stats, the message of each host's first failure."""
    first_failure: dict[str, str] = {}
    stats: Mapping[str, Any] = {}
    seen: list[str] = []
    for ev in events:
        he = host_event(ev)
        if he is not None:
            if he.host not in seen:
                seen.append(he.host)
            if he.status in ("failed", "unreachable") and not he.ignored and he.message:
                first_failure.setdefault(he.host, he.message)
        if ev.get("event") == "playbook_on_stats":
            stats = ev.get("event_data") or {}
    out: dict[str, HostOutcome] = {}
    fields = {
        "ok": "ok",
        "changed": "changed",
        "failures": "failed",
        "dark": "unreachable",
        "skipped": "skipped",
    }
    hosts = list(seen)
    for key in fields:
        for h in stats.get(key) or {}:
            if h not in hosts:
                hosts.append(h)
    for h in hosts:
        counts = {fields[k]: int((stats.get(k) or {}).get(h, 0)) for k in fields}
        out[h] = HostOutcome(host=h, message=first_failure.get(h), **counts)
    return out


# --- the one impure function -----------------------------------------------------------------------


class _Interrupt:
    """Orch's SIGINT/SIGTERM handler while a playbook runs: flag the cancel, stop the tree now.

    ansible-runner polls the flag (cancel_callback) and then SIGKILLs the playbook's process
    group; the handler has already sent SIGTERM to every process below orch that the run
    started, and leaving the block makes sure none of them is left (SIGKILL after STOP_GRACE_S).
    """

    def __init__(self) -> None:
        self.flag = threading.Event()
        self.before = {p.pid for p in psutil.Process().children()}
        self.tree: list[psutil.Process] = []
        self.saved: dict[int, Any] = {}

    def started(self) -> list[psutil.Process]:
        """The run's processes: orch's children that were not there before, and below them."""
        try:
            new = [p for p in psutil.Process().children() if p.pid not in self.before]
        except psutil.Error:
            new = []
        return descendants(new)

    def handle(self, signum: int, frame: object) -> None:
        self.flag.set()
        # Taken before the playbook dies and its workers lose their parent; a second Ctrl-C adds
        # to what the first one found.
        known = {p.pid for p in self.tree}
        self.tree += [p for p in self.started() if p.pid not in known]
        signal_all(self.tree)

    def __enter__(self) -> _Interrupt:
        # Only the main thread may set handlers; elsewhere the caller's own handling stays.
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self.saved[s] = signal.getsignal(s)
                signal.signal(s, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)
        if self.flag.is_set():
            stop_processes(descendants([*self.tree, *self.started()]), grace=STOP_GRACE_S)


def execute(request: PlaybookRequest, listener: Listener | None = None) -> PlaybookResult:
    """Run the playbook with ansible-runner; hosts that fail are reported, the others go on.

    Raises ProvisionError when ansible-runner itself cannot start (not when a host fails), and
    KeyboardInterrupt when SIGINT or SIGTERM stopped the run (nothing of it is left running).
    """
    try:
        from ansible_runner.interface import init_runner
    except ImportError as e:  # pragma: no cover - a dependency
        raise ProvisionError("ansible-runner is not installed", hint="pip install ansible-runner") from e

    make_dir(request.work_dir)
    make_dir(request.work_dir / "tmp")
    runtime_dir("cp")  # ANSIBLE_SSH_CONTROL_PATH_DIR; raises ConfigError when others can reach it
    secrets = secret_values(request)
    events: list[dict[str, Any]] = []

    def on_event(event: dict[str, Any]) -> bool:
        if secrets:
            clean = scrub(dict(event), secrets)
            event.clear()
            event.update(clean)  # ansible-runner writes the dict it passed in: write the scrubbed one
        events.append(event)
        he = host_event(event)
        if he is not None and listener is not None:
            with contextlib.suppress(Exception):  # a broken listener must not stop provisioning
                listener(he)
        return True

    start = time.monotonic()
    scrub_artifacts(request.work_dir, secrets)
    # Passing our own cancel_callback keeps ansible-runner from installing its SIGINT/SIGTERM
    # handlers (it never puts the old ones back); _Interrupt restores the caller's on the way out.
    try:
        with _Interrupt() as interrupt:
            try:
                r = init_runner(
                    **runner_kwargs(request), event_handler=on_event, cancel_callback=interrupt.flag.is_set
                )
                r.config.env = ansible_env(r.config.env, os.environ)
                if not interrupt.flag.is_set():
                    r.run()
            except Exception as e:
                raise ProvisionError(f"ansible-runner could not run {request.playbook}: {e}") from e
    finally:
        scrub_artifacts(request.work_dir, secrets)
    if interrupt.flag.is_set() or r.status == "canceled":
        raise KeyboardInterrupt
    artifacts = request.work_dir / "artifacts" / request.ident
    hosts = outcomes(events)
    if not hosts and r.rc not in (0, None):
        tail = (
            (artifacts / "stdout").read_text(errors="replace").strip().splitlines()
            if (artifacts / "stdout").exists()
            else []
        )
        raise ProvisionError(
            f"{request.playbook} did not run (rc {r.rc}): {tail[-1] if tail else r.status}",
            hint=f"see {artifacts}",
        )
    return PlaybookResult(
        playbook=request.playbook,
        status=str(r.status),
        rc=int(r.rc if r.rc is not None else -1),
        hosts=hosts,
        artifacts_dir=artifacts,
        elapsed_s=time.monotonic() - start,
    )
