#!/usr/bin/env bash
# bench/gpu_check.sh — the one device check for a machine with an NVIDIA GPU and NCCL.
#
# Method: build nccl-tests (source from $NCCL_TESTS_SRC, or a git clone when the machine can reach
# it) against the installed CUDA + NCCL, run all_reduce_perf on 1 GPU, parse its output with
# `orch parse` (checking every row's busbw recomputes), then run orch's collbench with backend nccl
# on the same GPU, and print both figures at the largest size. On one GPU busbw of all_reduce is 0
# by definition (factor 2(n-1)/n), so algbw is printed too; sendrecv (factor 1) is the comparable
# busbw figure and is run by both.
#
# Usage: bash bench/gpu_check.sh [MAX_SIZE]   (default 256M). Exit 0 only if every check passed.
set -euo pipefail
cd "$(dirname "$0")/.."
MAX=${1:-256M}
WORK=${WORK:-$(mktemp -d)}
PY=${PY:-python3}
command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: not an NVIDIA GPU machine"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# orch and torch (the CUDA build must already be on the machine; nothing is downloaded here).
if [ ! -x .venv/bin/orch ]; then
  $PY -m venv --system-site-packages .venv
  .venv/bin/pip install -q --no-deps -e . || .venv/bin/pip install -q -e .
fi
.venv/bin/python -c 'import torch; assert torch.cuda.is_available(), "torch has no CUDA"; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'

SRC=${NCCL_TESTS_SRC:-$WORK/nccl-tests}
if [ ! -f "$SRC/Makefile" ]; then
  git clone -q https://github.com/NVIDIA/nccl-tests "$SRC"
fi
NCCL_HOME=${NCCL_HOME:-$(dirname "$(dirname "$(ldconfig -p | awk '/libnccl.so /{print $NF; exit}')")")}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
make -s -C "$SRC" -j"$(nproc)" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$NCCL_HOME" >"$WORK/build.log" 2>&1 \
  || { tail -20 "$WORK/build.log"; exit 3; }

for coll in all_reduce sendrecv; do
  "$SRC/build/${coll}_perf" -b 8 -e "$MAX" -f 2 -g 1 | tee "$WORK/$coll.txt"
  .venv/bin/orch parse --kind nccl-tests --json "$WORK/$coll.txt" >"$WORK/$coll.json"
done

MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
  .venv/bin/python -m orchestrator.workloads.collbench --backend nccl --collectives all_reduce,sendrecv \
  --sizes "8:$MAX:x2" --warmup 5 --iters 20 --check | tee "$WORK/collbench.txt"
.venv/bin/orch parse --kind collbench --json "$WORK/collbench.txt" >"$WORK/collbench.json"

.venv/bin/python - "$WORK" <<'PY'
import json, sys
from pathlib import Path
work = Path(sys.argv[1])
def largest(path, coll):
    data = json.loads(path.read_text())
    files = data if isinstance(data, list) else [data]
    rows = [r for f in files for r in f["run"]["rows"] if r["collective"] == coll]
    top = max(rows, key=lambda r: r["size_bytes"])
    return top["size_bytes"], top["out_of_place"]["algbw_gbs"], top["out_of_place"]["busbw_gbs"]
for coll in ("all_reduce", "sendrecv"):
    s1, a1, b1 = largest(work / f"{coll}.json", coll)
    s2, a2, b2 = largest(work / "collbench.json", coll)
    print(f"{coll:10s} nccl-tests {s1} B algbw {a1:.2f} busbw {b1:.2f} GB/s | "
          f"collbench {s2} B algbw {a2:.2f} busbw {b2:.2f} GB/s | ratio algbw {a2 / a1 if a1 else 0:.2f}")
PY
echo "gpu_check: ok ($WORK)"
