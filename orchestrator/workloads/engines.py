"""The command line of each inference engine a serving step starts, and where it says it is ready.

Every value comes from the plan, checked when it was read (models/serving.py: the model path
absolute and plain, engine arguments one plain word each, names to the identifier pattern), and
goes into an argv list: the scheduler's job script quotes each item with its one `sh` filter
(scheduler/templates), the local backend passes the list to exec without a shell.

- transformers: `<prefix>/bin/transformers serve PATH --device cpu|auto --dtype DTYPE --host H
  --port P` (docs/serving.md, "Lab notes"; `--continuous-batching` is the plan's engine_args, so
  that a plan can switch it off). The model is answered to by its path.
- vllm: `<prefix>/bin/vllm serve PATH --host H --port P --dtype DTYPE --tensor-parallel-size TP
  [--served-model-name NAME] [--revision REV]` (vLLM's `vllm serve` CLI).
- sglang: `<prefix>/bin/python -m sglang.launch_server --model-path PATH --host H --port P
  --dtype DTYPE --tp-size TP [--served-model-name NAME] [--revision REV]` (SGLang's server
  arguments).
- external: orch starts nothing.

The plan's engine_args follow, as given. The health endpoint is GET /health for the three
(each answers 200 once the model is loaded); for an external engine GET /v1/models.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.models.serving import ServingWorkload

HEALTH_PATH = "/health"
EXTERNAL_HEALTH_PATH = "/v1/models"


def engine_argv(w: ServingWorkload, *, bindir: str, host: str, port: int, gpu_vendor: str) -> list[str]:
    """The argv of w's engine, its programs under bindir (the stack's <prefix>/bin), listening on
    host:port. Raises ValueError for engine external (nothing to start)."""
    path = w.model.path
    if w.engine == "external" or path is None:
        raise ValueError(f"serving {w.name}: engine {w.engine} is not started by orch")
    b = Path(bindir)
    if w.engine == "transformers":
        argv = [str(b / "transformers"), "serve", path,
                "--device", "cpu" if gpu_vendor == "none" else "auto"]  # fmt: skip
        if w.dtype != "auto":
            argv += ["--dtype", w.dtype]
        argv += ["--host", host, "--port", str(port)]
    elif w.engine == "vllm":
        argv = [str(b / "vllm"), "serve", path, "--host", host, "--port", str(port),
                "--dtype", w.dtype, "--tensor-parallel-size", str(w.tensor_parallel)]  # fmt: skip
    else:  # sglang
        argv = [str(b / "python"), "-m", "sglang.launch_server", "--model-path", path,
                "--host", host, "--port", str(port), "--dtype", w.dtype,
                "--tp-size", str(w.tensor_parallel)]  # fmt: skip
    if w.engine != "transformers":
        if w.model.name is not None:
            argv += ["--served-model-name", w.model.name]
        if w.model.revision is not None:
            argv += ["--revision", w.model.revision]
    return argv + list(w.engine_args)


def health_path(w: ServingWorkload) -> str:
    """The path that answers 200 once the engine serves: /health, or /v1/models for external."""
    return EXTERNAL_HEALTH_PATH if w.engine == "external" else HEALTH_PATH
