"""The provision and fingerprint services the CLI (and scale-test) call.

provision(): build the wheelhouse a cpu stack needs (on the controller), then run provision.yml
through ansible-runner. fingerprint(): run fingerprint.yml, read each host's probe JSON back and
compare it with the stack. Artifacts go to <out>/<id>/ansible/. Nothing here prints or exits.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from orchestrator import __version__
from orchestrator.errors import ProvisionError
from orchestrator.inventory import load_inventory
from orchestrator.lab.disk import check_disk, disk_need
from orchestrator.models.base import StrictModel
from orchestrator.models.requests import ProvisionRequest
from orchestrator.models.stack import Stack
from orchestrator.provision import fingerprint as fpmod
from orchestrator.provision import orchwheel
from orchestrator.provision.orchwheel import OrchSource, file_sha256
from orchestrator.provision.runner import Listener, PlaybookRequest, PlaybookResult, execute
from orchestrator.remote.base import CommandRunner
from orchestrator.remote.local import LocalRunner
from orchestrator.safefs import atomic_write, dir_mode, make_dir
from orchestrator.stacks import PLAYBOOKS_DIR, load_stack

WHEELHOUSE_TIMEOUT_S = 1800


class ProvisionReport(StrictModel):
    stack: str
    run_dir: Path
    result: PlaybookResult
    wheelhouse: Path | None = None
    wheelhouse_s: float = 0.0


class FingerprintReport(StrictModel):
    stack: str
    run_dir: Path
    result: PlaybookResult
    fingerprints: fpmod.FingerprintSet
    compatibility: fpmod.Compatibility


def playbook_run_dir(out_dir: Path, kind: str) -> Path:
    ident = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + kind + "-" + secrets.token_hex(3)
    return make_dir(out_dir / ident)


def playbook_request(
    kind: str,
    inventory: Path,
    run_dir: Path,
    extravars: dict[str, object],
    *,
    check: bool = False,
    limit: str | None = None,
    vault_password_file: Path | None = None,
    become_password: str | None = None,
) -> PlaybookRequest:
    """The run of orch's playbook `<kind>.yml` whose artifacts go to <run_dir>/ansible/."""
    return PlaybookRequest(
        playbook=f"{kind}.yml",
        playbooks_dir=PLAYBOOKS_DIR,
        inventory=inventory,
        work_dir=run_dir / "ansible",
        extravars=extravars,
        check=check,
        limit=limit,
        vault_password_file=vault_password_file,
        become_password=become_password,
        ident=kind,
    )


def requirements(stack: Stack) -> list[str]:
    """What the venv of a cpu stack holds: torch, orch (the workload) and the stack's packages."""
    assert stack.python is not None
    return [f"torch=={stack.python.torch}", f"orch=={__version__}", *stack.python.packages]


def wheelhouse_argv(stack: Stack, dest: Path, orch: OrchSource, python: str = sys.executable) -> list[str]:
    """`pip wheel` for the stack's requirements and orch (its source tree or its wheel file)."""
    return [
        python,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--wheel-dir",
        str(dest),
        *[r for r in requirements(stack) if not r.startswith("orch==")],
        str(orch.path),
    ]


def sha256sums(dest: Path) -> str:
    """SHA256SUMS of the wheels in dest, sorted by name (what the hosts compare with)."""
    lines = []
    for whl in sorted(dest.glob("*.whl")):
        lines.append(f"{file_sha256(whl)}  {whl.name}")
    return "\n".join(lines) + "\n"


def _wheel_project_version(whl: Path) -> tuple[str, str]:
    """(project, version) from a wheel's file name (PEP 427: name-version[-build]-py-abi-plat.whl)."""
    name, version = whl.name.split("-")[:2]
    return fpmod.norm_name(name), version


def _several_versions(dest: Path) -> list[str]:
    """The projects of which dest holds more than one version (a wheelhouse filled by several builds)."""
    seen: dict[str, set[str]] = {}
    for whl in dest.glob("*.whl"):
        project, version = _wheel_project_version(whl)
        seen.setdefault(project, set()).add(version)
    return sorted(p for p, versions in seen.items() if len(versions) > 1)


def pinned_requirements(stack: Stack, wheelhouse: Path) -> list[str]:
    """The stack's requirements, then every other wheel of the wheelhouse as ``project==version``.

    The stack pins its top-level packages only; what they pull in (cryptography under paramiko,
    say) is whatever `pip wheel` resolved when the wheelhouse was built. Installed with these pins,
    a venv that already exists moves to the wheelhouse's versions and a fresh one (a rollback, a
    new node) gets the same: seen on the lab, a rollback that installed afresh got cryptography
    51.0.1, released that day, while the frozen reference had 50.0.2, and certify refused it.
    """
    named = requirements(stack)
    have = {fpmod.norm_name(m.group(0)) for r in named if (m := re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r))}
    pins = []
    for whl in sorted(wheelhouse.glob("*.whl")):
        project, version = _wheel_project_version(whl)
        if project not in have:
            have.add(project)
            pins.append(f"{project}=={version}")
    return [*named, *pins]


def prepare_wheelhouse(stack: Stack, dest: Path, runner: CommandRunner, orch: OrchSource) -> Path:
    """Build (once) the wheelhouse of a cpu stack: every wheel the venv needs, for offline installs.

    Rebuilt only when the requirements or orch's source or wheel change (a stamp file records
    them), or when it holds two versions of a project (filled by several builds, as orch did
    before). A rebuild goes to a fresh folder beside dest, which then replaces dest: the
    wheelhouse holds one build, one version of each project (pinned_requirements installs them).
    Raises ProvisionError when pip cannot build it.
    """
    stamp = dest / "REQUIREMENTS"
    wanted = "\n".join(requirements(stack)) + "\n" + orch.stamp
    if (
        stamp.exists()
        and stamp.read_text() == wanted
        and (dest / "SHA256SUMS").exists()
        and not _several_versions(dest)
    ):
        return dest
    make_dir(dest.parent)
    build = Path(tempfile.mkdtemp(prefix=f".{dest.name}.build-", dir=dest.parent))
    try:
        os.chmod(build, dir_mode())  # mkdtemp made it 0700; make_dir gave dest this mode
        res = runner.run(wheelhouse_argv(stack, build, orch), timeout=WHEELHOUSE_TIMEOUT_S)
        if not res.ok:
            raise ProvisionError(
                f"cannot build the wheelhouse for {stack.name}: {res.brief()}",
                hint="check that pip reaches an index or a local wheel for each requirement",
            )
        atomic_write(build / "SHA256SUMS", sha256sums(build), 0o644)
        atomic_write(build / "REQUIREMENTS", wanted, 0o644)
        old = dest.with_name(f".{dest.name}.old-{secrets.token_hex(4)}")
        if dest.exists():
            dest.rename(old)
        build.rename(dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(build, ignore_errors=True)  # gone already when it became dest
    return dest


def default_wheelhouse(stack: Stack) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "orch" / "wheelhouse" / stack.name


def shared_wheelhouse(stack: Stack) -> Path | None:
    """The wheelhouse already built for another stack with the same requirements (cpu-gloo-slow
    differs from cpu-gloo-next in its environment only: the same wheels serve both), or None."""
    from orchestrator.stacks import list_stacks

    if stack.python is None:
        return None
    wanted = requirements(stack)
    for name in list_stacks():
        other = load_stack(name)
        if name != stack.name and other.python is not None and requirements(other) == wanted:
            path = default_wheelhouse(other)
            if (path / "SHA256SUMS").exists():
                return path
    return None


def _extravars(stack: Stack, **more: object) -> dict[str, object]:
    return {"orch_stack": stack.model_dump(mode="json"), **more}


def provision(
    req: ProvisionRequest, listener: Listener | None = None, runner: CommandRunner | None = None
) -> ProvisionReport:
    """Install `req.stack` on the inventory's hosts; a failing host is reported, the others go on.

    Raises ConfigError/InventoryError for bad input, ProvisionError when ansible-runner cannot run,
    LabError when the inventory is the virtual lab's and its disk cannot hold the stack on the nodes.
    """
    stack = load_stack(req.stack)
    cluster = load_inventory(req.inventory)
    targets = cluster.select(req.limit) if req.limit else cluster.nodes  # unknown names refused here
    if cluster.vars.orch_lab_state is not None and not req.check:
        # the lab's nodes keep their /opt on this machine's disk: refuse before an image import fails
        check_disk(disk_need(stack, cluster.vars.orch_lab_state, [n.name for n in targets]))
    orch_source = orchwheel.resolve(req.orch_wheel) if stack.python is not None else None
    run_dir = playbook_run_dir(req.out_dir, "provision")
    extra: dict[str, object] = {"orch_become": req.become, "orch_clean_venv": req.clean}
    wheelhouse, wh_s = None, 0.0
    if orch_source is not None:
        t0 = time.monotonic()
        wheelhouse = prepare_wheelhouse(
            stack,
            req.wheelhouse or shared_wheelhouse(stack) or default_wheelhouse(stack),
            runner or LocalRunner(),
            orch_source,
        )
        wh_s = time.monotonic() - t0
        extra |= {
            "orch_wheelhouse": str(wheelhouse.absolute()),
            "orch_requirements": pinned_requirements(stack, wheelhouse),
        }
    result = execute(
        playbook_request(
            "provision",
            req.inventory,
            run_dir,
            _extravars(stack, **extra),
            check=req.check,
            limit=req.limit,
            vault_password_file=req.vault_password_file,
            become_password=req.become_password,
        ),
        listener,
    )
    return ProvisionReport(
        stack=stack.name, run_dir=run_dir, result=result, wheelhouse=wheelhouse, wheelhouse_s=wh_s
    )


def fingerprint(
    inventory: Path,
    stack_name: str,
    *,
    out_dir: Path = Path("runs"),
    limit: str | None = None,
    listener: Listener | None = None,
    become: bool = False,
) -> FingerprintReport:
    """Read every host's fingerprint and compare it with the stack.

    Raises ConfigError/InventoryError for bad input, ProvisionError when ansible-runner cannot run.
    """
    stack = load_stack(stack_name)
    cluster = load_inventory(inventory)
    nodes = cluster.select(limit) if limit else cluster.nodes
    run_dir = playbook_run_dir(out_dir, "fingerprint")
    facts = run_dir / "facts"
    make_dir(facts, exist_ok=False)
    extravars = _extravars(stack, orch_fingerprint_dir=str(facts.absolute()), orch_become=become)
    result = execute(playbook_request("fingerprint", inventory, run_dir, extravars, limit=limit), listener)
    fps = fpmod.read_probe_dir(facts, [n.name for n in nodes])
    fset = fpmod.FingerprintSet(stack=stack.name, nodes=fps)
    fpmod.save(fset, run_dir / "fingerprint.json")
    sub = cluster.model_copy(update={"nodes": list(nodes)})
    return FingerprintReport(
        stack=stack.name,
        run_dir=run_dir,
        result=result,
        fingerprints=fset,
        compatibility=fpmod.compatibility(stack, sub, fps),
    )
