"""What each node really has, compared with what its stack pins: verdicts, matrix, drift, diff.

A Fingerprint is built from the raw JSON that orchestrator/playbooks/files/fingerprint_probe.py prints on a
node (parsed here with orchestrator.provision.smi). compare() gives each pinned field one of four
verdicts (docs/stacks.md defines them):

- unchanged: the node has exactly what the stack pins (a local build label such as +cpu aside).
- needs config change: the same release line is there but not the pinned point (same
  major.minor, another patch; another commit or image digest; a different GPU count); running
  `orch provision` again, or a configuration fix, brings it back.
- needs porting: another release line (major or minor differs, an OS the stack does not list):
  results are not comparable and the stack, the workload or the node must be ported.
- unavailable: the stack pins it and the node does not have it at all (not installed, tool
  absent, no GPU).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.errors import ConfigError, ParseError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.fingerprint import COMPATS as COMPATS  # re-exported
from orchestrator.models.fingerprint import Compat as Compat
from orchestrator.models.fingerprint import DriftReport as DriftReport
from orchestrator.models.fingerprint import FieldDrift as FieldDrift
from orchestrator.models.fingerprint import Fingerprint as Fingerprint
from orchestrator.models.fingerprint import FingerprintSet as FingerprintSet
from orchestrator.models.serving import PACKAGE_ENGINES
from orchestrator.models.stack import Stack
from orchestrator.provision import smi
from orchestrator.safefs import atomic_write

log = logging.getLogger(__name__)

_RANK = {v: i for i, v in enumerate(COMPATS)}


class FieldCheck(StrictModel):
    """One pinned field on one node: expected, found, verdict."""

    field: str
    expected: str
    found: str | None
    verdict: Compat


class NodeReport(StrictModel):
    node: str
    checks: list[FieldCheck]

    @property
    def verdict(self) -> Compat:
        """The worst verdict of the node's fields."""
        return worst(c.verdict for c in self.checks)


class Compatibility(StrictModel):
    """The cluster-level matrix: field -> node -> verdict, and the per-node reports behind it."""

    stack: str
    nodes: list[NodeReport]

    @property
    def fields(self) -> list[str]:
        out: list[str] = []
        for n in self.nodes:
            out += [c.field for c in n.checks if c.field not in out]
        return out

    def matrix(self) -> dict[str, dict[str, Compat]]:
        """field -> node -> verdict."""
        return {
            f: {n.node: c.verdict for n in self.nodes for c in n.checks if c.field == f} for f in self.fields
        }

    @property
    def compatible(self) -> bool:
        """True when every field of every node is unchanged."""
        return all(n.verdict == "unchanged" for n in self.nodes)


class Change(StrictModel):
    node: str
    field: str
    before: str | None
    after: str | None


def worst(verdicts: Any) -> Compat:
    """The worst of some verdicts (unchanged when there are none)."""
    vs = list(verdicts)
    return max(vs, key=lambda v: _RANK[v]) if vs else "unchanged"


# --- from the probe's raw JSON ---------------------------------------------------------------------


def _first_line(text: str | None) -> str | None:
    if not text:
        return None
    return text.strip().splitlines()[0].strip() or None


def norm_name(name: str) -> str:
    """A project name as pip compares them (PEP 503: case and runs of -_. folded)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def normalise_packages(packages: Any) -> list[str]:
    """`name==version` lines with PEP 503 names, sorted and deduplicated; other items dropped."""
    out: set[str] = set()
    for item in packages if isinstance(packages, list) else []:
        if isinstance(item, str) and "==" in item:
            name, _, version = item.partition("==")
            if name.strip() and version.strip():
                out.add(f"{norm_name(name.strip())}=={version.strip()}")
    return sorted(out)


def packages_hash(packages: list[str]) -> str:
    """sha256 of a venv's package set (normalised, one `name==version` per line)."""
    text = "".join(line + "\n" for line in normalise_packages(packages))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def env_hash(env: Mapping[str, str]) -> str:
    """sha256 of a stack's environment variables, `NAME=value` per line in name order."""
    text = "".join(f"{k}={env[k]}\n" for k in sorted(env))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _stack_record(raw: Any, problems: list[str]) -> tuple[str | None, dict[str, str] | None]:
    if raw is None:
        return None, None
    env = raw.get("env") if isinstance(raw, Mapping) else None
    name = raw.get("stack") if isinstance(raw, Mapping) else None
    valid = isinstance(env, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    )
    if not isinstance(name, str) or not valid or env is None:
        problems.append("orch-stack.json: not {stack: name, env: {NAME: value}}")
        return None, None
    return name, dict(env)


_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


def _lab_model(raw: Any, problems: list[str]) -> dict[str, str | None]:
    """The lab model's record (name, path, recorded hash) and the hash the probe found, from the
    probe's `lab_model`; what does not read goes to problems. Nothing when there is no record."""
    out: dict[str, str | None] = {}
    if raw is None:
        return out
    rec = raw.get("record") if isinstance(raw, Mapping) else None
    if isinstance(rec, Mapping):
        name, path, sha = rec.get("name"), rec.get("path"), rec.get("sha256")
        if isinstance(name, str) and isinstance(path, str) and isinstance(sha, str) and _SHA256.match(sha):
            out = {"lab_model": name, "lab_model_path": path, "lab_model_hash": sha}
        else:
            problems.append("orch-model.json: not {name, path, sha256: sha256:<64 hex>, ...}")
    found = raw.get("sha256") if isinstance(raw, Mapping) else None
    if isinstance(found, str) and _SHA256.match(found):
        out["lab_model_found_hash"] = found
    error = raw.get("error") if isinstance(raw, Mapping) else None
    if isinstance(error, str) and error:
        problems.append(f"lab model: {error[:200]}")
    return out


def from_probe(node: str, raw: Mapping[str, Any]) -> Fingerprint:
    """Build a node's Fingerprint from fingerprint_probe.py's JSON; unparsable parts go to problems."""
    problems: list[str] = []
    fp: dict[str, Any] = {"node": node, "os": raw.get("os"), "kernel": raw.get("kernel")}
    fp["system_python"] = raw.get("system_python")
    venv = raw.get("venv") or {}
    if isinstance(venv, Mapping):
        fp["venv_python"], fp["torch"], fp["orch"] = venv.get("python"), venv.get("torch"), venv.get("orch")
        if venv.get("packages") is not None:
            fp["packages"] = normalise_packages(venv.get("packages"))
            fp["packages_hash"] = packages_hash(fp["packages"])
    fp["stack_record"], fp["stack_env"] = _stack_record(raw.get("stack_record"), problems)
    if fp["stack_env"] is not None:
        fp["env_hash"] = env_hash(fp["stack_env"])
    fp.update(_lab_model(raw.get("lab_model"), problems))
    fp["amdgpu_driver"] = raw.get("amdgpu_version")
    fp["rocm"] = raw.get("rocm_version")
    m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d[\w.]*)", raw.get("nvidia_driver_proc") or "")
    fp["nvidia_driver"] = m.group(1) if m else None
    if raw.get("cuda_version_json"):
        try:
            fp["cuda"] = json.loads(raw["cuda_version_json"])["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            problems.append("cuda version.json: not the expected JSON")
    for line in (raw.get("dpkg") or "").splitlines():
        name, _, version = line.partition("\t")
        if name == "rccl" and version:
            fp["rccl"] = ".".join(re.findall(r"\d+", version)[:3])
        elif name == "libnccl2" and version:
            fp["nccl"] = version.strip()
    fp["rccl_tests"] = raw.get("rccl_tests_revision")
    fp["nccl_tests"] = raw.get("nccl_tests_revision")
    images = raw.get("images") or {}
    fp["images"] = (
        sorted({i for refs in images.values() for i in refs}) if isinstance(images, Mapping) else []
    )
    gpus: list[smi.Gpu] = []
    for key, parser in (
        ("amd_smi_static", smi.parse_amd_smi_static),
        ("rocm_smi_product", smi.parse_rocm_smi),
        ("nvidia_smi_csv", smi.parse_nvidia_smi_csv),
    ):
        if raw.get(key) and not gpus:
            try:
                gpus = parser(raw[key]).gpus
            except ParseError as e:
                problems.append(f"{key}: {e.message}")
    fp["gpus"] = gpus
    fp["stack_image"] = raw.get("stack_image_id")
    if raw.get("ibv_devinfo"):
        try:
            fp["rdma"] = smi.parse_ibv_devinfo(raw["ibv_devinfo"])
        except ParseError as e:
            problems.append(f"ibv_devinfo: {e.message}")
    if raw.get("rdma_link"):
        try:
            links = json.loads(raw["rdma_link"])
            fp["rdma_links"] = [ln for ln in links if isinstance(ln, dict)] if isinstance(links, list) else []
        except ValueError:
            problems.append("rdma link: not JSON")
    fp["problems"] = problems
    return Fingerprint.model_validate(fp)


def from_probe_output(node: str, text: str) -> Fingerprint:
    """The node's Fingerprint from fingerprint_probe.py's printed output.

    The probe prints its facts as one JSON object on one line and nothing else, but what reaches
    orch can carry more: the node's login shell runs its rc files first (here root's .bashrc runs
    `pyenv init`, whose rehash races with the other nodes' logins and complains), and Ansible's
    script module runs under a pty, which merges stderr into stdout. So the facts are the whole
    text when it is a JSON object, else its last line that is one; the other lines go into the
    fingerprint's problems (their first 200 characters), where a reader sees them.

    Raises:
        ValueError: no JSON object in the text (the message says what the text was).
    """
    try:
        whole: Any = json.loads(text)
        error: ValueError | None = None
    except ValueError as e:
        whole, error = None, e
    if isinstance(whole, dict):
        return from_probe(node, whole)
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if not lines[i].lstrip().startswith("{"):
            continue
        try:
            raw = json.loads(lines[i])
        except ValueError:
            continue
        if isinstance(raw, dict):
            fp = from_probe(node, raw)
            other = "\n".join(lines[:i] + lines[i + 1 :]).strip()
            fp.problems.append(f"the probe's output had other lines around its JSON: {other[:200]!r}")
            return fp
    if error is not None:
        raise error
    raise ValueError(f"a JSON {type(whole).__name__}, not an object")


def read_probe_dir(directory: Path, nodes: list[str]) -> dict[str, Fingerprint]:
    """Fingerprints from <directory>/<node>.json for the nodes that have one.

    A node whose file holds no JSON object gets a fingerprint with nothing found and the reason
    (with the start of the raw text) in its problems: every pinned field then compares as
    "unavailable", so that node drifts, and the other nodes' fingerprints still count.
    """
    out: dict[str, Fingerprint] = {}
    for node in nodes:
        path = directory / f"{node}.json"
        if not path.exists():
            continue
        text = ""
        try:
            text = path.read_text(errors="replace")
            out[node] = from_probe_output(node, text)
        except (OSError, ValueError) as e:
            why = f"{path}: the probe's output is not a JSON object ({e}); it began {text[:200]!r}"
            log.warning("%s", why)
            out[node] = Fingerprint(node=node, problems=[why])
    return out


# --- comparison ------------------------------------------------------------------------------------


def _release(v: str) -> tuple[int, ...]:
    head = re.split(r"[+~-]", v.strip(), maxsplit=1)[0]
    return tuple(int(x) for x in re.findall(r"\d+", head))


def version_verdict(expected: str, found: str | None) -> Compat:
    """unchanged (equal release), needs config change (same major.minor), needs porting, unavailable."""
    if not found:
        return "unavailable"
    if found.strip() == expected.strip():
        return "unchanged"
    e, f = _release(expected), _release(found)
    if e == f:
        return "unchanged"  # a local label such as 2.13.0+cpu is the same release
    if e[:2] == f[:2]:
        return "needs config change"
    return "needs porting"


def pin_verdict(expected: str, found: str | None) -> Compat:
    """For commits and digests: unchanged, needs config change (another pin), unavailable."""
    if not found:
        return "unavailable"
    return "unchanged" if found.strip() == expected.strip() else "needs config change"


def os_verdict(supported: list[str], found: str | None) -> Compat:
    """unchanged when found is one of the supported OSes (or any is: an empty list), needs porting
    when it is another, unavailable when the node's OS is unknown."""
    if not found:
        return "unavailable"
    return "unchanged" if not supported or found in supported else "needs porting"


def _check(field: str, expected: str, found: str | None, verdict: Compat) -> FieldCheck:
    return FieldCheck(field=field, expected=expected, found=found, verdict=verdict)


def _version_check(field: str, expected: str, found: str | None) -> FieldCheck:
    """A pinned version against the node's, judged by version_verdict."""
    return _check(field, expected, found, version_verdict(expected, found))


def _pin_check(field: str, expected: str, found: str | None) -> FieldCheck:
    """A pin (commit, digest, hash) against the node's, judged by pin_verdict."""
    return _check(field, expected, found, pin_verdict(expected, found))


def _venv_checks(stack: Stack, fp: Fingerprint) -> list[FieldCheck]:
    """The stack's extra pinned packages, its recorded name and its environment, where the node's
    probe read them (a node provisioned before orch recorded them has none: not held against it
    here; certify() requires them)."""
    checks: list[FieldCheck] = []
    if fp.packages and stack.python is not None:
        have = dict(line.split("==", 1) for line in fp.packages)
        for req in stack.python.packages:
            name, _, version = req.partition("==")
            found = have.get(norm_name(name))
            checks.append(_version_check(f"package {norm_name(name)}", version, found))
    if fp.stack_env is not None:
        rec: Compat = "unchanged" if fp.stack_record == stack.name else "needs config change"
        checks.append(_check("stack record", stack.name, fp.stack_record, rec))
        want = env_hash(stack.env)
        ev: Compat = "unchanged" if fp.env_hash == want else "needs config change"
        checks.append(_check("env", want, fp.env_hash, ev))
    return checks


def _lab_model_checks(stack: Stack, fp: Fingerprint) -> list[FieldCheck]:
    """The stack's lab model on the node: the record names it (name at path), and the files there
    hash to the stack's pinned sha256 or, without a pin, to the hash recorded when it was built."""
    lm = stack.lab_model
    if lm is None:
        return []
    want = f"{lm.name} at {lm.path}"
    have = f"{fp.lab_model} at {fp.lab_model_path}" if fp.lab_model is not None else None
    rec: Compat = "unavailable" if have is None else "unchanged" if have == want else "needs config change"
    checks = [_check("lab model", want, have, rec)]
    if have is not None:
        expected = lm.sha256 or fp.lab_model_hash or ""
        checks.append(_pin_check("lab model files", expected, fp.lab_model_found_hash))
    return checks


def _engine_checks(stack: Stack, fp: Fingerprint) -> list[FieldCheck]:
    """The stack's pinned inference engines where the node has them: a vllm or sglang package in
    the probed venv at another version, a pulled image of the pinned repository at another digest.
    A node without the engine is not held against the stack here (GPU engines come with their
    image or the operator's install, docs/stacks.md "Serving engines"; a serving step whose engine
    is missing ends as an infrastructure failure naming the node). transformers is checked with
    the venv's packages (python.packages pins it)."""
    if stack.serving is None:
        return []
    have = dict(line.split("==", 1) for line in fp.packages)
    checks: list[FieldCheck] = []
    for e in stack.serving.engines:
        found = have.get(norm_name(e.engine))
        if e.engine in PACKAGE_ENGINES and found is not None:
            checks.append(_version_check(f"engine {e.engine}", e.version, found))
        img = e.image
        if img is not None and img.digest is not None:
            ref = img.reference
            pulled = [i for i in fp.images if i.startswith(img.repository + "@")]
            if pulled:
                got = ref if ref in pulled else pulled[0]
                checks.append(_pin_check(f"engine {e.engine} image", ref, got))
    return checks


def compare(stack: Stack, fp: Fingerprint, *, gpus_expected: int | None = None) -> NodeReport:
    """Every pinned field of `stack` against what node `fp` has."""
    checks: list[FieldCheck] = []
    if stack.os:
        checks.append(_check("os", ", ".join(stack.os), fp.os, os_verdict(stack.os, fp.os)))
    if stack.python is not None:
        py = stack.python
        minor = ".".join((fp.venv_python or "").split(".")[:2]) or None
        checks.append(
            _check("python", py.python_version, fp.venv_python, version_verdict(py.python_version, minor))
        )
        checks.append(_version_check("torch", py.torch, fp.torch))
        from orchestrator import __version__

        checks.append(_version_check(py.workload, __version__, fp.orch))
        checks += _venv_checks(stack, fp)
        checks += _lab_model_checks(stack, fp)
    if stack.rocm is not None:
        r = stack.rocm
        checks += [
            _version_check("amdgpu driver", r.amdgpu_driver, fp.amdgpu_driver),
            _version_check("rocm", r.version, fp.rocm),
            _version_check("rccl", r.rccl, fp.rccl),
            _pin_check("rccl-tests", r.rccl_tests.commit, fp.rccl_tests),
        ]
    if stack.cuda is not None:
        c = stack.cuda
        drv = fp.nvidia_driver
        if not drv:
            dv: Compat = "unavailable"
        elif c.driver is not None:
            dv = (
                "unchanged"
                if drv == c.driver
                else "needs config change"
                if drv.split(".")[0] == c.driver_branch
                else "needs porting"
            )
        else:
            dv = "unchanged" if drv.split(".")[0] == c.driver_branch else "needs porting"
        checks.append(_check("nvidia driver", c.driver or f"R{c.driver_branch}", drv, dv))
        checks += [
            _version_check("cuda", c.toolkit, fp.cuda),
            _version_check("nccl", c.nccl, fp.nccl),
            _pin_check("nccl-tests", c.nccl_tests.commit, fp.nccl_tests),
        ]
    if stack.kind in ("rocm", "cuda") and gpus_expected is not None:
        n = len(fp.gpus)
        gv: Compat = "unavailable" if n == 0 else "unchanged" if n == gpus_expected else "needs config change"
        checks.append(_check("gpus", str(gpus_expected), str(n) if n else None, gv))
    if stack.image is not None:
        ref = stack.image.reference
        found = (
            ref
            if ref in fp.images
            else next((i for i in fp.images if i.startswith(stack.image.repository + "@")), None)
        )
        checks.append(_pin_check("image", ref, found))
    checks += _engine_checks(stack, fp)
    return NodeReport(node=fp.node, checks=checks)


def compatibility(stack: Stack, cluster: Cluster, fingerprints: Mapping[str, Fingerprint]) -> Compatibility:
    """Per-node reports for every node of the cluster; a node without a fingerprint is unavailable."""
    reports = []
    for node in cluster.nodes:
        fp = fingerprints.get(node.name)
        if fp is None:
            reports.append(
                NodeReport(node=node.name, checks=[_check("fingerprint", "present", None, "unavailable")])
            )
            continue
        expected = node.gpus_per_node if node.gpu_vendor != "none" else None
        reports.append(compare(stack, fp, gpus_expected=expected))
    return Compatibility(stack=stack.name, nodes=reports)


def check_drift(cluster: Cluster, stack_name: str, fingerprints: Mapping[str, Fingerprint]) -> DriftReport:
    """Which nodes of `cluster` differ from stack `stack_name`, and in which fields.

    Nodes whose fields are all unchanged are left out; nodes without a fingerprint are listed in
    `missing`. Raises ConfigError when the stack cannot be loaded.
    """
    from orchestrator.stacks import load_stack

    stack = load_stack(stack_name)
    report = DriftReport(stack=stack.name)
    comp = compatibility(stack, cluster, fingerprints)
    for nr in comp.nodes:
        if nr.node not in fingerprints:
            report.missing.append(nr.node)
            continue
        drifts = [
            FieldDrift(field=c.field, expected=c.expected, found=c.found, verdict=c.verdict)
            for c in nr.checks
            if c.verdict != "unchanged"
        ]
        if drifts:
            report.nodes[nr.node] = drifts
    return report


# --- saved fingerprints ------------------------------------------------------------------------------

_DIFF_FIELDS = (
    "os", "kernel", "system_python", "venv_python", "torch", "orch", "amdgpu_driver", "rocm", "rccl",
    "rccl_tests", "nvidia_driver", "cuda", "nccl", "nccl_tests", "stack_image", "stack_record",
    "packages_hash", "env_hash", "lab_model", "lab_model_path", "lab_model_hash", "lab_model_found_hash",
)  # fmt: skip


def package_changes(before: list[str], after: list[str]) -> str | None:
    """`-numpy==2.2.6 +numpy==2.3.0` for two package sets; None when they are the same."""
    a, b = set(before), set(after)
    parts = [f"-{p}" for p in sorted(a - b)] + [f"+{p}" for p in sorted(b - a)]
    return " ".join(parts) or None


def _gpu_summary(fp: Fingerprint) -> str:
    return ", ".join(f"{g.index}:{g.name or '?'}" for g in fp.gpus)


def _rdma_summary(fp: Fingerprint) -> str:
    return ", ".join(f"{d.name}({'/'.join(p.state for p in d.ports)})" for d in fp.rdma)


def diff(a: FingerprintSet, b: FingerprintSet) -> list[Change]:
    """Every field that differs between two saved fingerprints, node by node (nodes in either)."""
    changes: list[Change] = []
    for node in list(a.nodes) + [n for n in b.nodes if n not in a.nodes]:
        fa, fb = a.nodes.get(node), b.nodes.get(node)
        if fa is None or fb is None:
            changes.append(Change(node=node, field="node", before="present" if fa else None,
                                  after="present" if fb else None))  # fmt: skip
            continue
        for f in _DIFF_FIELDS:
            va, vb = getattr(fa, f), getattr(fb, f)
            if va != vb:
                changes.append(Change(node=node, field=f, before=va, after=vb))
        pkgs = package_changes(fa.packages, fb.packages)
        if pkgs:
            changes.append(Change(node=node, field="packages", before=None, after=pkgs))
        for name, fn in (
            ("env", lambda x: ", ".join(f"{k}={v}" for k, v in sorted((x.stack_env or {}).items()))),
            ("images", lambda x: ", ".join(x.images)),
            ("gpus", _gpu_summary),
            ("rdma", _rdma_summary),
        ):
            va, vb = fn(fa), fn(fb)
            if va != vb:
                changes.append(Change(node=node, field=name, before=va or None, after=vb or None))
    return changes


def save(fps: FingerprintSet, path: Path) -> None:
    """Write a FingerprintSet as JSON (atomically)."""
    atomic_write(path, fps.model_dump_json(indent=2) + "\n")


def load(path: Path) -> FingerprintSet:
    """Read a saved FingerprintSet; raises ConfigError naming the file."""
    try:
        return FingerprintSet.model_validate_json(path.read_text())
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the fingerprint: {e.strerror}") from e
    except ValidationError as e:
        raise ConfigError(f"{path}: not a saved orch fingerprint: {e.errors()[0]['msg']}") from e
