"""Find, load and validate stack manifests (orchestrator/playbooks/stacks/*.yaml)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.models.names import is_name
from orchestrator.models.plan import Plan
from orchestrator.models.stack import Stack

# The playbooks, roles and stacks ship inside the package (package data): a wheel install has them.
PLAYBOOKS_DIR = Path(__file__).resolve().parent / "playbooks"
STACKS_DIR = PLAYBOOKS_DIR / "stacks"


def list_stacks(stacks_dir: Path = STACKS_DIR) -> list[str]:
    """Names of the stack manifests in `stacks_dir`, sorted."""
    if not stacks_dir.is_dir():
        return []
    return sorted(p.stem for p in stacks_dir.glob("*.yaml"))


def stack_path(ref: str | Path, stacks_dir: Path = STACKS_DIR) -> Path:
    """The manifest file of a stack name or a path; raises ConfigError when there is none."""
    p = Path(ref)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = stacks_dir / f"{ref}.yaml"
    if candidate.exists():
        return candidate
    raise ConfigError(
        f"no stack named {str(ref)!r}",
        hint=f"stacks are: {', '.join(list_stacks(stacks_dir)) or '(none)'} (see `orch stack list`)",
    )


def packaged_stack(name: str, stacks_dir: Path = STACKS_DIR) -> Stack:
    """The stack `name` from the package's own stacks (stacks_dir), never a path: what a
    certificate or another file from others names is loaded only this way.

    Raises ConfigError when name is not a plain name or no such stack ships.
    """
    if not is_name(name):
        raise ConfigError(
            f"stack {name[:80]!r} is not a stack name (a path is never loaded from a certificate)"
        )
    path = stacks_dir / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"no stack named {name!r}", hint=f"stacks are: {', '.join(list_stacks(stacks_dir))}"
        )
    return load_stack(path, stacks_dir)


def manifest_sha256(name: str, stacks_dir: Path = STACKS_DIR) -> str | None:
    """sha256 of the packaged stack `name`'s manifest file; None when name is no packaged stack."""
    path = stacks_dir / f"{name}.yaml"
    if not is_name(name) or not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_stack(ref: str | Path, stacks_dir: Path = STACKS_DIR) -> Stack:
    """Load and validate one stack; raises ConfigError naming the file and the first bad field."""
    path = stack_path(ref, stacks_dir)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot read the stack: {e}") from e
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: a stack file must be a mapping")
    try:
        stack = Stack.model_validate(doc)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top)"
        raise ConfigError(f"{path}: {where}: {first['msg']}", hint="see docs/stacks.md") from e
    if stack.name != path.stem:
        raise ConfigError(f"{path}: name {stack.name!r} differs from the file name {path.stem!r}")
    return stack


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema of a stack or plan file; raises ConfigError for another kind."""
    models: dict[str, type[Stack] | type[Plan]] = {"stack": Stack, "plan": Plan}
    if kind not in models:
        raise ConfigError(f"no schema for {kind!r}", hint="one of: stack, plan")
    schema = models[kind].model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    if kind == "plan":
        # load_plan names a plan after its file when it has no `name`: the file may leave it out.
        schema["required"] = [f for f in schema.get("required", []) if f != "name"]
    return schema


def schema_text(kind: str) -> str:
    """json_schema(kind) as indented JSON text."""
    return json.dumps(json_schema(kind), indent=2) + "\n"
