"""`orch migrate plan`: the compatibility matrix between two stack manifests, per component.

Each component of stack A is set against the same component of stack B with the fingerprint's
own rules (provision/fingerprint.py: version_verdict for releases, pin_verdict for commits and
digests, os_verdict for OS lists), read as "what it takes to go from A's pin to B's":

- both pin the same product: the rule of that field (2.20.5 → 2.22.3 is needs porting,
  2.20.5 → 2.20.7 needs config change, another commit or digest needs config change);
- another product (ROCm → CUDA, gloo → nccl): needs porting;
- only A has it: unavailable (B offers nothing in its place); only B: needs porting (new in B);
- environment variables and extra Python packages added, removed or changed: needs config change
  (a changed package version follows version_verdict).

With saved fingerprints (a run folder of `orch fingerprint`, or its `--save` file), each row also
gets what every node has, judged against A's pin and B's pin with the same rules.

What orch cannot judge from manifests and fingerprints is not guessed: it is listed as questions
for the team (operators, quantization, attention implementations, tokenizers, adapters,
monitoring, and any component neither manifest names).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.errors import ConfigError
from orchestrator.models.fingerprint import Fingerprint, FingerprintSet
from orchestrator.models.migrate import (
    COMPONENTS,
    Compat,
    Component,
    MatrixRow,
    MigrationMatrix,
    NodeValue,
    Question,
)
from orchestrator.models.stack import Stack
from orchestrator.provision import fingerprint as fpmod
from orchestrator.provision.fingerprint import os_verdict, pin_verdict, version_verdict

Rule = Literal["version", "pin", "os", "python", "config", "port"]
Probe = Callable[[Fingerprint], str | None]

_VERDICT_OF_RULE: dict[Rule, Callable[[str, str | None], Compat]] = {
    "version": version_verdict,
    "pin": pin_verdict,
}


@dataclass(frozen=True)
class _Pin:
    """One component as a stack pins it: the product, the pinned value, the rule, the node probe."""

    component: Component
    product: str
    value: str
    rule: Rule
    probe: Probe | None = None
    note: str = ""
    os_list: tuple[str, ...] = ()  # the os pin: the supported OSes (empty = any)


def _minor(v: str | None) -> str | None:
    return ".".join(v.split(".")[:2]) if v else None


def _image_found(repository: str) -> Probe:
    def probe(fp: Fingerprint) -> str | None:
        return next((i for i in fp.images if i.startswith(repository + "@")), None)

    return probe


def _package_found(name: str) -> Probe:
    """The version of one package of the node's venv (the fingerprint's normalised package set)."""

    def probe(fp: Fingerprint) -> str | None:
        want = fpmod.norm_name(name) + "=="
        return next((p[len(want) :] for p in fp.packages if p.startswith(want)), None)

    return probe


def _pins(s: Stack) -> dict[Component, list[_Pin]]:
    """The components stack s pins (env and extra packages apart), each with its product."""
    pins: list[_Pin] = []
    pins.append(_Pin("os", "os", ", ".join(s.os) or "any", "os", lambda fp: fp.os, os_list=tuple(s.os)))
    if s.rocm is not None:
        r = s.rocm
        pins += [
            _Pin("driver", "amdgpu driver", r.amdgpu_driver, "version", lambda fp: fp.amdgpu_driver),
            _Pin("runtime", "ROCm", r.version, "version", lambda fp: fp.rocm),
            _Pin("communication library", "RCCL", r.rccl, "version", lambda fp: fp.rccl),
            _Pin("kernels/backends", "torch.distributed backend", "nccl (RCCL)", "port"),
            _Pin("tests", "rccl-tests", r.rccl_tests.commit, "pin", lambda fp: fp.rccl_tests,
                 note=r.rccl_tests.tag or ""),
        ]  # fmt: skip
    if s.cuda is not None:
        c = s.cuda
        pins += [
            _Pin("driver", "nvidia driver", c.driver or f"R{c.driver_branch}", "version",
                 lambda fp: fp.nvidia_driver),
            _Pin("runtime", "CUDA", c.toolkit, "version", lambda fp: fp.cuda),
            _Pin("communication library", "NCCL", c.nccl, "version", lambda fp: fp.nccl),
            _Pin("kernels/backends", "torch.distributed backend", "nccl", "port"),
            _Pin("tests", "nccl-tests", c.nccl_tests.commit, "pin", lambda fp: fp.nccl_tests,
                 note=c.nccl_tests.tag or ""),
        ]  # fmt: skip
    if s.python is not None:
        py = s.python
        pins += [
            _Pin("framework", "torch", py.torch, "version", lambda fp: fp.torch),
            _Pin("python", "python", py.python_version, "python", lambda fp: fp.venv_python),
            _Pin("tests", py.workload, f"{py.workload} (orch)", "port", lambda fp: fp.orch),
        ]
        if s.kind == "cpu":
            pins += [
                _Pin("communication library", "gloo", f"in torch {py.torch}", "port",
                     note="gloo ships inside torch, at the same version"),
                _Pin("kernels/backends", "torch.distributed backend", "gloo", "port"),
            ]  # fmt: skip
    if s.serving is not None:
        sv = s.serving
        for e in sv.engines:
            variants = f"variants: {', '.join(e.variants)}" if e.variants else ""
            pins.append(_Pin("serving engine", e.engine, e.version, "version", _package_found(e.engine),
                             note=variants))  # fmt: skip
            if e.image is not None:
                img = e.image
                pins.append(
                    _Pin("serving engine", f"{e.engine} image", img.reference,
                         "pin" if img.digest else "config",
                         _image_found(img.repository) if img.digest else None,
                         note="" if img.digest else "by tag: the digest is taken at provisioning")
                )  # fmt: skip
        lm = sv.lab_model
        if lm is not None:
            pins.append(
                _Pin("serving engine", "lab model", lm.sha256 or f"{lm.name} at {lm.path}",
                     "pin" if lm.sha256 else "config",
                     (lambda fp: fp.lab_model_found_hash) if lm.sha256 else
                     (lambda fp: f"{fp.lab_model} at {fp.lab_model_path}" if fp.lab_model else None),
                     note=f"{lm.name} at {lm.path}, built on each node")
            )  # fmt: skip
    if s.container_runtime is not None:
        pins.append(_Pin("container image", "container runtime", s.container_runtime, "config"))
    if s.image is not None:
        pins.append(
            _Pin("container image", "image", s.image.reference, "pin", _image_found(s.image.repository),
                 note=f"tag {s.image.tag}" if s.image.tag else "")
        )  # fmt: skip
    out: dict[Component, list[_Pin]] = {}
    for p in pins:
        out.setdefault(p.component, []).append(p)
    return out


def _slot(p: _Pin) -> str:
    """What a pin is matched on across stacks: its product for several per component, else the
    component (amdgpu driver and nvidia driver are the same slot, another product)."""
    if p.component in ("container image", "tests", "kernels/backends", "serving engine"):
        return {"rccl-tests": "bench", "nccl-tests": "bench"}.get(p.product, p.product)
    return p.component


def _verdict(rule: Rule, expected: str, found: str | None) -> Compat:
    """One pin against one value with the fingerprint's rules."""
    if rule == "python":
        return version_verdict(expected, _minor(found))
    if rule in _VERDICT_OF_RULE:
        return _VERDICT_OF_RULE[rule](expected, found)
    if not found:
        return "unavailable"
    if found == expected:
        return "unchanged"
    return "needs config change" if rule == "config" else "needs porting"


def _os_row(a: _Pin, b: _Pin) -> tuple[Compat, str]:
    sa, sb = set(a.os_list), set(b.os_list)
    if sa == sb or not sb:
        return "unchanged", "" if sa == sb else "B runs on any OS"
    dropped = sorted(sa - sb) if sa else ["(A: any)"]
    if not dropped:
        return "unchanged", f"B adds {', '.join(sorted(sb - sa))}"
    return "needs porting", f"B drops {', '.join(dropped)}: nodes on it must move to another OS"


def _pair_row(a: _Pin | None, b: _Pin | None) -> MatrixRow:
    p = b or a
    assert p is not None
    verdict: Compat
    if a is not None and b is not None and a.product == b.product:
        item = a.product
        if a.rule == "os":
            verdict, note = _os_row(a, b)
        else:
            verdict = _verdict(a.rule, b.value, a.value)
            note = a.note if a.note == b.note else " → ".join(n for n in (a.note, b.note) if n)
    elif a is not None and b is not None:
        item, verdict = f"{a.product} → {b.product}", "needs porting"
        note = f"another product: {a.product} on A, {b.product} on B"
    elif a is not None:
        item, verdict, note = a.product, "unavailable", "only A has it: B offers nothing in its place"
    else:
        assert b is not None
        item, verdict, note = b.product, "needs porting", "new in B"
    return MatrixRow(
        component=p.component,
        item=item,
        from_value=a.value if a else None,
        to_value=b.value if b else None,
        verdict=verdict,
        note=note,
    )


def _judge(p: _Pin | None, fp: Fingerprint) -> Compat | None:
    """The node against one stack's pin; None where the rule is not one a node can be held to."""
    if p is None or p.probe is None or p.rule in ("config", "port"):
        return None
    if p.rule == "os":
        return os_verdict(list(p.os_list), p.probe(fp))
    return _verdict(p.rule, p.value, p.probe(fp))


def _node_values(a: _Pin | None, b: _Pin | None, fps: Mapping[str, Fingerprint]) -> list[NodeValue]:
    probes = [p for p in (a, b) if p is not None and p.probe is not None]
    if not probes:
        return []
    out: list[NodeValue] = []
    for node, fp in fps.items():
        found = [p.probe(fp) if p.probe else None for p in (a, b) if p is not None]
        shown = next((f for f in found if f), None)
        out.append(NodeValue(node=node, found=shown, vs_from=_judge(a, fp), vs_to=_judge(b, fp)))
    return out


_PKG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(.+)$")


def _packages(s: Stack) -> dict[str, str]:
    """The stack's extra pinned packages, by normalised name (PEP 503)."""
    out: dict[str, str] = {}
    for req in s.python.packages if s.python else []:
        m = _PKG.match(req)
        if m:
            out[fpmod.norm_name(m.group(1))] = m.group(2)
    return out


def _keyed_rows(component: Component, a: Mapping[str, str], b: Mapping[str, str]) -> list[MatrixRow]:
    rows: list[MatrixRow] = []
    for key in sorted(set(a) | set(b)):
        verdict: Compat
        va, vb = a.get(key), b.get(key)
        if va == vb:
            verdict, note = "unchanged", ""
        elif va is None:
            verdict, note = "needs config change", "added by B"
        elif vb is None:
            verdict, note = "needs config change", "A sets it, B does not"
        elif component == "python packages":
            verdict, note = version_verdict(vb, va), ""
        else:
            verdict, note = "needs config change", "another value"
        rows.append(
            MatrixRow(component=component, item=key, from_value=va, to_value=vb, verdict=verdict, note=note)
        )
    return rows


_TEAM = (
    ("operators", "Which custom operators does the service load, and are they built and tested for {b}?"),
    ("quantization", "Which quantization methods (FP8, INT8, AWQ, GPTQ …) are in use, and does {b} "
                     "support them with the same accuracy?"),
    ("attention", "Which attention implementation runs today on {a} (FlashAttention, SDPA, paged, "
                  "AITER …), and which will run on {b}?"),
    ("tokenizers", "Do the tokenizers (and their versions) stay the same on {b}?"),
    ("adapters", "Are LoRA or other adapters served, and does {b} load them unchanged?"),
    ("monitoring", "Do the exporters and dashboards read the metrics of {b} (names, units) as they "
                   "read those of {a}?"),
)  # fmt: skip


def _questions(a: Stack, b: Stack, rows: Sequence[MatrixRow]) -> list[Question]:
    qs = [Question(topic=t, question=q.format(a=a.name, b=b.name)) for t, q in _TEAM]
    named = {r.component for r in rows}
    if "serving engine" not in named:
        qs.append(
            Question(
                topic="serving engine",
                question=f"Neither {a.name} nor {b.name} names a serving engine: which engine and "
                "version serves on each, and with which settings?",
            )
        )
    qs.append(
        Question(
            topic="kernels/backends",
            question="Compute kernels and libraries beyond the collective backend (GEMM, attention, "
            f"fused MoE …) are not pinned in the manifests: which ones change from {a.name} to {b.name}?",
        )
    )
    return qs


def build_matrix(
    a: Stack, b: Stack, fingerprints: Mapping[str, Fingerprint] | None = None
) -> MigrationMatrix:
    """The compatibility matrix from stack a to stack b; with fingerprints, every node's values.

    Pure: the nodes are the keys of `fingerprints`, in their order. Raises nothing.
    """
    fps = dict(fingerprints or {})
    pa, pb = _pins(a), _pins(b)
    rows: list[MatrixRow] = []
    for component in COMPONENTS:
        sa = {_slot(p): p for p in pa.get(component, [])}
        sb = {_slot(p): p for p in pb.get(component, [])}
        for slot in list(sa) + [s for s in sb if s not in sa]:
            row = _pair_row(sa.get(slot), sb.get(slot))
            row.nodes = _node_values(sa.get(slot), sb.get(slot), fps)
            rows.append(row)
    rows += _keyed_rows("environment", a.env, b.env)
    rows += _keyed_rows("python packages", _packages(a), _packages(b))
    rows.sort(key=lambda r: COMPONENTS.index(r.component))
    return MigrationMatrix(
        from_stack=a.name, to_stack=b.name, rows=rows, questions=_questions(a, b, rows), nodes=list(fps)
    )


def read_fingerprints(path: Path) -> tuple[FingerprintSet, str]:
    """The saved fingerprints of a run folder (its fingerprint.json) or of a `--save` file.

    Raises ConfigError naming the path when there is none, it leads out of the folder or is invalid.
    """
    from orchestrator.store.load import require_model

    if path.is_dir():
        target = path / "fingerprint.json"
        if not target.exists():
            raise ConfigError(
                f"{path}: no fingerprint.json in this folder",
                hint="pass the run folder that `orch fingerprint -i INV --stack A` printed",
            )
        return require_model(FingerprintSet, path, target), str(path)
    return fpmod.load(path), str(path)


def migration_plan(
    from_stack: str | Path,
    to_stack: str | Path,
    *,
    inventory: Path | None = None,
    fingerprints: Path | None = None,
) -> MigrationMatrix:
    """`orch migrate plan`: load both stacks (and the fingerprints, for the inventory's nodes).

    Raises ConfigError for an unknown stack, a bad fingerprint file, or an inventory given
    without fingerprints; InventoryError for a bad inventory.
    """
    from orchestrator.inventory import load_inventory
    from orchestrator.stacks import load_stack

    a, b = load_stack(from_stack), load_stack(to_stack)
    if fingerprints is None:
        if inventory is not None:
            raise ConfigError(
                "--inventory needs --fingerprints RUN_DIR: orch reads the nodes' versions from a saved "
                "fingerprint",
                hint=f"run `orch fingerprint -i {inventory} --stack {a.name}` and pass its run folder",
            )
        return build_matrix(a, b)
    saved, where = read_fingerprints(fingerprints)
    fps = dict(saved.nodes)
    missing: list[str] = []
    if inventory is not None:
        names = [n.name for n in load_inventory(inventory).nodes]
        missing = [n for n in names if n not in fps]
        fps = {n: fps[n] for n in names if n in fps}
    m = build_matrix(a, b, fps)
    m.missing, m.fingerprints_from = missing, where
    return m
