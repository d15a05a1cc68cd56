"""A stack: one tested, pinned combination of driver, runtime, collective library and benchmark.

Stacks are YAML files in orchestrator/playbooks/stacks/. There are three kinds: ``rocm`` (ROCm + RCCL +
rccl-tests), ``cuda`` (driver branch + CUDA + NCCL + nccl-tests) and ``cpu`` (the virtual lab and the
local default: a Python environment in /opt with torch and orch's collbench, backend gloo). Every
value that reaches a node (a package version, a git commit, an image digest) is checked here, so
that a manifest cannot pass a shell word or a floating reference ("latest", a branch) to Ansible.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.names import check_name
from orchestrator.models.serving import GPU_ENGINES, VENV_ENGINES, Engine, EngineArg, ServingDtype

StackKind = Literal["rocm", "cuda", "cpu"]
ContainerRuntimeChoice = Literal["podman", "docker"]

_NAME = re.compile(r"^[a-z][a-z0-9.-]{0,62}$")
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+~_-]{0,63}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_IMAGE_REPO = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_ENV_NAME = re.compile(r"^(NCCL|RCCL|GLOO|TORCH|HSA|HIP|CUDA|UCX|OMP)_[A-Z0-9_]+$")
_PIP_REQ = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[0-9][0-9A-Za-z.+!_-]*$")
_ABS_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")


def _matching(pattern: re.Pattern[str], says: str) -> AfterValidator:
    """A validator of a string that must match pattern; else ValueError: the value, then `says`."""

    def check(v: str) -> str:
        if not pattern.match(v):
            raise ValueError(f"{v!r} {says}")
        return v

    return AfterValidator(check)


def _plain_abs(v: str) -> str:
    if not _ABS_PATH.match(v) or ".." in v.split("/"):
        raise ValueError(f"{v!r} is not a plain absolute path")
    return v


Version = Annotated[str, _matching(_VERSION, "is not a pinned version (digits, letters and . + ~ _ - only)")]
Commit = Annotated[str, _matching(_COMMIT, "is not a full 40-hex git commit (a tag or branch can move)")]
ImageRepository = Annotated[str, _matching(_IMAGE_REPO, "is not an image repository name")]
Digest = Annotated[str, _matching(_DIGEST, "is not a sha256 digest (sha256:<64 hex>)")]
PlainAbsPath = Annotated[str, AfterValidator(_plain_abs)]


class GitPin(StrictModel):
    """A benchmark source tree at one commit."""

    repo: str = Field(description="https URL of the git repository")
    commit: Commit = Field(description="full 40-hex commit hash")
    tag: str | None = Field(default=None, description="the release tag at that commit, for people")

    @field_validator("repo")
    @classmethod
    def _https(cls, v: str) -> str:
        if not re.match(r"^https://[A-Za-z0-9.-]+/[A-Za-z0-9._/-]+$", v):
            raise ValueError(f"{v!r} is not an https git URL")
        return v


class Image(StrictModel):
    """A container image pinned by digest (a tag alone can be re-pushed)."""

    repository: ImageRepository = Field(description="e.g. docker.io/rocm/pytorch")
    digest: Digest = Field(description="sha256:<64 hex>")
    tag: str | None = Field(default=None, description="the tag the digest was taken from, for people")

    @property
    def reference(self) -> str:
        """repository@digest, what `podman pull` takes."""
        return f"{self.repository}@{self.digest}"


_REL_GLOB = re.compile(r"^[A-Za-z0-9._*?-][A-Za-z0-9._*?/-]{0,200}$")
PROVISIONED_TAG = "provisioned"


class StackImage(StrictModel):
    """A container image built on each node at provisioning from the stack's own tree: no registry.

    ``build: import`` streams a tar of the tree (``python.prefix``), the interpreter it runs on, its
    standard library and the shared libraries they load into ``RUNTIME import``
    (playbooks/roles/stack_image). Each node's image is tagged ``REPOSITORY:<tree hash>`` and
    ``REPOSITORY:provisioned``; runs use the latter, with the node's runtime (its
    ``container_runtime``).
    """

    build: Literal["import"] = Field(description="import: RUNTIME import of the tree, Python and libraries")
    repository: str = Field(description="a local name under localhost/, e.g. localhost/orch-stack/cpu-gloo")
    storage: PlainAbsPath | None = Field(
        default=None,
        description="orch's own image store on the node (podman --root STORAGE/root --runroot STORAGE/run);"
        " unset: the runtime's default store",
    )
    exclude: list[str] = Field(
        default_factory=list, description="paths under the prefix left out of the image (globs)"
    )

    @field_validator("repository")
    @classmethod
    def _local(cls, v: str) -> str:
        if not _IMAGE_REPO.match(v) or not v.startswith("localhost/"):
            raise ValueError(f"{v!r} is not a local image name (localhost/NAME)")
        return v

    @field_validator("exclude")
    @classmethod
    def _globs(cls, v: list[str]) -> list[str]:
        for g in v:
            if not _REL_GLOB.match(g) or ".." in g.split("/"):
                raise ValueError(f"{g!r} is not a relative path or glob under the prefix")
        return v

    @property
    def reference(self) -> str:
        """What runs use: the image provisioning last built (or found) on the node."""
        return f"{self.repository}:{PROVISIONED_TAG}"


class Rocm(StrictModel):
    """ROCm release, its amdgpu kernel driver and RCCL."""

    version: Version = Field(description="ROCm release, e.g. 6.2.0")
    amdgpu_driver: Version = Field(description="amdgpu kernel driver version shipped with it")
    rccl: Version = Field(description="RCCL version, e.g. 2.20.5")
    rccl_tests: GitPin


class Cuda(StrictModel):
    """NVIDIA driver branch, CUDA toolkit and NCCL."""

    driver_branch: Version = Field(description="driver branch, e.g. 550")
    driver: Version | None = Field(default=None, description="exact driver version, when pinned")
    toolkit: Version = Field(description="CUDA toolkit, e.g. 12.4.1")
    nccl: Version = Field(description="NCCL package version, e.g. 2.21.5-1+cuda12.4")
    nccl_tests: GitPin


class PythonEnv(StrictModel):
    """A Python virtual environment on each node, with pinned packages and orch's workload."""

    prefix: PlainAbsPath = Field(default="/opt/orch/venv", description="where the venv lives on the node")
    python: PlainAbsPath = Field(default="/usr/bin/python3", description="the interpreter that creates it")
    python_version: Version = Field(description="major.minor the venv must run, e.g. 3.11")
    torch: Version = Field(description="torch version, e.g. 2.13.0")
    packages: list[str] = Field(default_factory=list, description="more pinned requirements: name==version")
    workload: Literal["collbench"] = "collbench"

    @field_validator("packages")
    @classmethod
    def _pinned(cls, v: list[str]) -> list[str]:
        for req in v:
            if not _PIP_REQ.match(req):
                raise ValueError(f"{req!r} is not a pinned requirement (name==version)")
        return v


LabModelName = Literal["lab-tiny"]
"""The models orchestrator/workloads/labmodel.py can build (its RECIPES; a test holds them equal)."""
LAB_MODEL_RECORD = "orch-model.json"
"""The record the builder writes beside the venv (python.prefix): name, path, sha256, files."""
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


class LabModel(StrictModel):
    """A small model built on each node at provisioning, with no model hub (the virtual lab).

    Random weights from a fixed seed and a tokenizer trained on the node: it exercises the service
    path (HTTP, batching, streaming), not model quality (docs/serving.md, "The lab model").
    """

    name: LabModelName = Field(description="the builder's recipe, e.g. lab-tiny")
    path: str = Field(description="the model's folder on the node, e.g. /opt/orch/models/lab-tiny")
    sha256: str | None = Field(
        default=None,
        description="sha256 over the model's files (sorted paths and contents) that a build with the"
        " stack's pinned packages gives; when set, the fingerprint holds each node's model to it",
    )

    @field_validator("path")
    @classmethod
    def _abs(cls, v: str) -> str:
        if not _ABS_PATH.match(v) or "" in v.split("/")[1:] or {".", ".."} & set(v.split("/")):
            raise ValueError(f"{v!r} is not a plain absolute path")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not _SHA256.match(v):
            raise ValueError(f"{v!r} is not a sha256 (sha256:<64 hex>)")
        return v


def _pinnable(name: str) -> str:
    if name == "external":
        raise ValueError("engine external is not started by orch: a stack cannot pin it")
    return name


ServingEngineName = Annotated[Engine, AfterValidator(_pinnable)]
"""The engines a stack can pin: models.serving's Engine but external (no part of a stack)."""
_ENGINE_ENV_NAME = re.compile(
    r"^(NCCL|RCCL|GLOO|TORCH|HSA|HIP|CUDA|UCX|OMP|VLLM|SGLANG|AITER|ATOM)_[A-Z0-9_]+$"
)
"""An engine variant's variables: a stack's env prefixes and the engines' own (no HF_*: orch sets
HF_HUB_OFFLINE for every engine, and a variant must not turn it off)."""
_IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_FLOATING_TAGS = frozenset({"latest", "nightly", "main", "master", "dev", "stable", "edge"})


def check_env(
    env: dict[str, str],
    name_re: re.Pattern[str] = _ENV_NAME,
    *,
    what: str = "a workload variable (NCCL_*, RCCL_*, GLOO_*, ...)",
) -> dict[str, str]:
    """env when every name matches name_re and no value holds a newline or NUL (the rule of a
    stack's `env:`); raises ValueError naming the variable otherwise."""
    for key, value in env.items():
        if not name_re.match(key):
            raise ValueError(f"{key!r} is not {what}")
        if "\n" in value or "\0" in value:
            raise ValueError(f"{key}: the value has a newline or NUL")
    return env


class EngineImage(StrictModel):
    """A registry image that holds an engine: by digest, or by a release tag until the digest is
    taken at provisioning (a tag can be re-pushed; `latest` and other moving tags are refused)."""

    repository: ImageRepository = Field(description="e.g. docker.io/rocm/vllm")
    tag: str | None = Field(default=None, description="a release tag, e.g. rocm6.4.1_vllm_0.10.1_20250909")
    digest: Digest | None = Field(
        default=None, description="sha256:<64 hex>; when set, runs and checks use it"
    )

    @field_validator("tag")
    @classmethod
    def _tag(cls, v: str | None) -> str | None:
        if v is not None and (not _IMAGE_TAG.match(v) or v.lower() in _FLOATING_TAGS):
            raise ValueError(
                f"{v!r} is not a release tag (letters, digits, _ . -; not a moving tag such as latest)"
            )
        return v

    @model_validator(mode="after")
    def _pinned(self) -> EngineImage:
        if self.tag is None and self.digest is None:
            raise ValueError(f"image {self.repository}: give its digest, its release tag, or both")
        return self

    @property
    def reference(self) -> str:
        """repository@digest when the digest is pinned, else repository:tag."""
        return f"{self.repository}@{self.digest}" if self.digest else f"{self.repository}:{self.tag}"


class EngineVariant(StrictModel):
    """A named setting of an engine that a plan can choose (`variant: NAME` in a serving workload),
    e.g. an optimized backend switched on or off: environment variables and engine arguments that
    the engine gets after the plan's own, and the dtype it computes in (orch renders --dtype)."""

    description: str = ""
    env: dict[str, str] = Field(
        default_factory=dict,
        description="variables set for the engine: a stack's env prefixes (NCCL_*, HIP_* ...) and VLLM_*,"
        " SGLANG_*, AITER_*, ATOM_*",
    )
    engine_args: list[EngineArg] = Field(
        default_factory=list, description="engine arguments after the plan's engine_args, one per item"
    )
    dtype: ServingDtype | None = Field(
        default=None,
        description="the engine's dtype (--dtype, which orch renders: engine_args may not set it); "
        "none: the plan's. A plan whose workload sets another dtype than auto is refused",
    )

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        what = "an engine variable (a stack's env prefixes NCCL_*, HIP_* ..., and VLLM_*, SGLANG_*, AITER_*,"
        what += " ATOM_*)"
        return check_env(v, _ENGINE_ENV_NAME, what=what)


class EnginePin(StrictModel):
    """One inference engine of a stack: its version, where it comes from, and its variants."""

    engine: ServingEngineName
    version: Version = Field(description="the engine's release, e.g. 0.10.1")
    image: EngineImage | None = Field(
        default=None,
        description="the registry image that holds it (GPU stacks); none: installed on the nodes",
    )
    variants: dict[str, EngineVariant] = Field(
        default_factory=dict, description="named settings a plan can choose with `variant:`"
    )

    @field_validator("variants")
    @classmethod
    def _names(cls, v: dict[str, EngineVariant]) -> dict[str, EngineVariant]:
        for name in v:
            check_name(name, what="variant")
        return v


class ServingEnv(StrictModel):
    """The inference engines a stack pins, and the lab model provisioning builds.

    ``engines`` lists one entry per engine. The short form of one engine without variants,
    ``{engine: transformers, version: 5.24.0}``, is read as ``{engines: [{...}]}``.
    """

    engines: list[EnginePin] = Field(min_length=1, description="one entry per engine")
    lab_model: LabModel | None = Field(default=None, description="a model built on each node (no hub)")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: object) -> object:
        if isinstance(data, dict) and "engines" not in data and "engine" in data:
            pin = {k: data[k] for k in ("engine", "version", "image", "variants") if k in data}
            rest = {k: v for k, v in data.items() if k not in pin}
            return {**rest, "engines": [pin]}
        return data

    @field_validator("engines")
    @classmethod
    def _distinct(cls, v: list[EnginePin]) -> list[EnginePin]:
        names = [e.engine for e in v]
        if len(set(names)) != len(names):
            raise ValueError(f"an engine is listed twice: {names}")
        return v

    def engine(self, name: str) -> EnginePin | None:
        """The pin of engine `name`, or None when the stack has none."""
        return next((e for e in self.engines if e.engine == name), None)


class Stack(StrictModel):
    """One stack manifest (orchestrator/playbooks/stacks/NAME.yaml)."""

    name: str = Field(description="the file's name without .yaml, e.g. rocm-6.2")
    kind: StackKind
    description: str = ""
    os: list[str] = Field(
        default_factory=list,
        description="supported distributions as ID-VERSION_ID from /etc/os-release, e.g. ubuntu-22.04;"
        " empty = any",
    )
    rocm: Rocm | None = None
    cuda: Cuda | None = None
    python: PythonEnv | None = None
    container_runtime: ContainerRuntimeChoice | None = None
    image: Image | None = Field(default=None, description="a registry image, by digest (GPU stacks)")
    container: StackImage | None = Field(
        default=None, description="an image built on each node from the stack's tree (the cpu stack)"
    )
    env: dict[str, str] = Field(default_factory=dict, description="environment set for the workloads")
    serving: ServingEnv | None = Field(
        default=None,
        description="the inference engines it pins (with their variants) and a lab model to build",
    )
    node_disk_gb: float | None = Field(
        default=None,
        gt=0,
        description="what the stack takes on each node's disk, its image included, in GB (10^9 bytes), "
        "as measured on the lab: `orch lab up` and `orch provision` on the lab refuse to start when the "
        "free disk cannot hold it on every node; None: not measured, not checked",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError(f"{v!r} is not a stack name (lower-case letters, digits, '.', '-')")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        return check_env(v)

    @model_validator(mode="after")
    def _sections(self) -> Stack:
        need = {"rocm": "rocm", "cuda": "cuda", "cpu": "python"}[self.kind]
        if getattr(self, need) is None:
            raise ValueError(f"a {self.kind} stack needs a '{need}' section")
        for other in ("rocm", "cuda"):
            if other != need and getattr(self, other) is not None:
                raise ValueError(f"a {self.kind} stack must not have a '{other}' section")
        if self.image is not None and self.container_runtime is None:
            raise ValueError("an image needs container_runtime (podman or docker)")
        if self.container is not None and self.image is not None:
            raise ValueError("name either an image (by digest) or a container build, not both")
        if self.container is not None and self.python is None:
            raise ValueError("a container build needs a 'python' section (the tree it holds)")
        if self.serving is not None:
            self._check_engines(self.serving)
        return self

    def _check_engines(self, serving: ServingEnv) -> None:
        """transformers runs from the venv: python.packages must pin it at the engine's version.
        vLLM and SGLang come from their image or the operator's install; where python.packages
        pins one as well, the versions must agree."""
        pins = (
            {r.partition("==")[0].lower(): r.partition("==")[2] for r in self.python.packages}
            if self.python is not None
            else {}
        )
        for e in serving.engines:
            if e.engine in GPU_ENGINES and self.kind == "cpu":
                raise ValueError(f"serving: {e.engine} needs GPUs: pin it in a rocm or cuda stack")
            if e.engine in VENV_ENGINES and self.python is None:
                raise ValueError(f"serving: {e.engine} needs a 'python' section (the venv of the engine)")
            if (e.engine in VENV_ENGINES or e.engine in pins) and pins.get(e.engine) != e.version:
                raise ValueError(
                    f"serving: {e.engine} {e.version} needs python.packages to pin"
                    f" {e.engine}=={e.version} (found {pins.get(e.engine) or 'none'})"
                )

    @property
    def lab_model(self) -> LabModel | None:
        """The model provisioning builds on each node, if the stack names one."""
        return self.serving.lab_model if self.serving is not None else None

    @property
    def workload_image(self) -> str | None:
        """The image the workloads run in (a registry reference by digest, or the built one), if any."""
        if self.image is not None:
            return self.image.reference
        if self.container is not None:
            return self.container.reference
        return None

    @property
    def benchmark(self) -> GitPin | None:
        """The pinned rccl-tests/nccl-tests tree, or None for the cpu stack."""
        if self.rocm is not None:
            return self.rocm.rccl_tests
        if self.cuda is not None:
            return self.cuda.nccl_tests
        return None
