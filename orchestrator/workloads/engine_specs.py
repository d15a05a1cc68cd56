"""The engine registry: one EngineSpec per inference engine a serving step can name.

Each spec says how orch starts the engine (its argv before the plan's engine_args), the path that
answers 200 once it serves, whether it needs GPUs, the Python package whose version the
fingerprint compares with the stack's pin, and the spellings of the arguments orch manages.
engine_spec refuses an unknown name with the known ones; nothing falls back to another engine's
command line. models.serving's Engine holds the names for plan validation (models/ imports no
workloads/); the check below ties the two. This module imports only models/, so that the
fingerprint (provision/) can read it without the serving machinery of workloads.engines.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from orchestrator.errors import registered
from orchestrator.models.serving import GPU_ENGINES, ORCH_SET_ARGS, PACKAGE_ENGINES, Engine, ServingWorkload

HEALTH_PATH = "/health"
EXTERNAL_HEALTH_PATH = "/v1/models"

ArgvBuilder = Callable[[ServingWorkload, Path, str, int, str], list[str]]
"""(workload, bindir, host, port, gpu_vendor) -> the engine's own argv, before engine_args."""


@dataclass(frozen=True)
class EngineSpec:
    """One inference engine: how orch starts it and what it knows about it.

    ``argv`` None: orch starts nothing (external). ``package``: the Python distribution whose
    version the fingerprint compares with the stack's pin (None: not read from the node's packages,
    e.g. transformers, which python.packages pins). ``managed_args``: the spellings of the settings
    orch sets itself from the plan's fields, which a plan's engine_args may not repeat.
    """

    name: Engine
    argv: ArgvBuilder | None
    health_path: str = HEALTH_PATH
    served_name: bool = True
    """takes --served-model-name NAME and --revision REV (transformers serve answers to the path)."""
    managed_args: frozenset[str] = ORCH_SET_ARGS
    output_detail: tuple[tuple[str, object], ...] = ()
    """request fields that ask the engine to stream each token's id and logprob (the quality gate,
    workloads/quality.py); () where it gives neither (`transformers serve` ignores `logprobs`)."""
    prefix_cache_counters: tuple[str, str] | None = None
    """(hits, queries): the Prometheus counters of its prefix cache on GET /metrics (agentic sessions'
    hit rate, workloads/sessions.py); None where it exposes none."""

    @property
    def needs_gpu(self) -> bool:
        """Refused on nodes of gpu_vendor none (models.serving.GPU_ENGINES, which stacks use too)."""
        return self.name in GPU_ENGINES

    @property
    def package(self) -> str | None:
        """The Python package the fingerprint reads (models.serving.PACKAGE_ENGINES), or None."""
        return self.name if self.name in PACKAGE_ENGINES else None

    @property
    def starts(self) -> bool:
        """Whether orch starts this engine (every engine but external)."""
        return self.argv is not None


def _transformers(w: ServingWorkload, b: Path, host: str, port: int, gpu_vendor: str) -> list[str]:
    assert w.model.path is not None
    argv = [
        str(b / "transformers"),
        "serve",
        w.model.path,
        "--device",
        "cpu" if gpu_vendor == "none" else "auto",
    ]
    if w.dtype != "auto":
        argv += ["--dtype", w.dtype]
    return [*argv, "--host", host, "--port", str(port)]


def _vllm(w: ServingWorkload, b: Path, host: str, port: int, gpu_vendor: str) -> list[str]:
    assert w.model.path is not None
    return [str(b / "vllm"), "serve", w.model.path, "--host", host, "--port", str(port),
            "--dtype", w.dtype, "--tensor-parallel-size", str(w.tensor_parallel)]  # fmt: skip


def _sglang(w: ServingWorkload, b: Path, host: str, port: int, gpu_vendor: str) -> list[str]:
    assert w.model.path is not None
    return [str(b / "python"), "-m", "sglang.launch_server", "--model-path", w.model.path,
            "--host", host, "--port", str(port), "--dtype", w.dtype,
            "--tp-size", str(w.tensor_parallel)]  # fmt: skip


ENGINES: dict[str, EngineSpec] = {
    e.name: e
    for e in (
        # vLLM: OpenAI's `logprobs` (a completions integer, a chat boolean: the quality client sends
        # the completions form) and vLLM's own `return_token_ids`; SGLang: `logprobs` only.
        # vLLM V1's counters (docs.vllm.ai, usage/metrics, "Production Metrics"), in tokens; the
        # Prometheus client writes their samples as vllm:prefix_cache_hits_total and _queries_total.
        EngineSpec(
            "vllm",
            _vllm,
            output_detail=(("logprobs", 1), ("return_token_ids", True)),
            prefix_cache_counters=("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
        ),
        EngineSpec("sglang", _sglang, output_detail=(("logprobs", 1),)),
        EngineSpec("transformers", _transformers, served_name=False),
        EngineSpec("external", None, health_path=EXTERNAL_HEALTH_PATH),
    )
}
if set(ENGINES) != set(get_args(Engine)):
    raise RuntimeError(
        f"engines {sorted(ENGINES)} differ from models.serving's Engine {sorted(get_args(Engine))}"
    )


def engine_spec(name: str) -> EngineSpec:
    """The registered engine ``name``; raises ConfigError naming the known engines."""
    return registered(ENGINES, name, "engine")
