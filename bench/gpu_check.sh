#!/usr/bin/env bash
# bench/gpu_check.sh — the one device check for a machine with an NVIDIA GPU, run as it is on the
# GPU machine of shared/LAB-NOTES.md ("The GPU machine"): offline (no git host, no package index),
# the image's own Python (python3, itself a venv with torch for CUDA), NCCL inside the
# nvidia-nccl-cu* wheel (not known to ldconfig), no vLLM.
#
# Parts, each ending in one line `gpu_check: PASS|FAIL|SKIP <part>: ...`; exit 1 when any part
# failed, 2 when this is not an NVIDIA machine (and no CPU override was asked for), else 0.
#  1. install: a venv made with --system-site-packages that also sees the packages of $PY's own
#     venv (a .pth file; --system-site-packages alone shows the base interpreter's, not the
#     image venv's torch), and orch plus the serving packages installed from the wheelhouse with
#     `pip install --no-index` (bench/build_wheelhouse.py builds it where an index is reached:
#     `make wheelhouse`; carry bench/wheelhouse). Nothing is downloaded here.
#  2. torch: torch sees the GPU and names its NCCL.
#  3. nccl: libnccl.so.2 found inside the nvidia-nccl wheel (nvidia.nccl's folder, else a glob of
#     site-packages); NCCL_HOME overrides.
#  4. nccl-tests: built against that NCCL only when NCCL_TESTS_SRC names its source (e.g. exported
#     with `git archive` from a local mirror into a git-ignored folder and carried); nothing is
#     cloned. Otherwise SKIP, saying why; part 5 measures NCCL through torch instead.
#  5. collbench: orch's torch.distributed benchmark, backend nccl, all_reduce and sendrecv on one
#     GPU, parsed by `orch parse` (every row's busbw recomputed); with part 4, both figures at the
#     largest size side by side. On one GPU all_reduce's busbw is 0 by definition (2(n-1)/n), so
#     algbw is printed too; sendrecv's busbw (factor 1) is the comparable figure.
#  6. serving: vLLM when `import vllm` works, else `transformers serve --continuous-batching` with
#     the lab model built here (orchestrator/workloads/labmodel.py: random weights, a tokenizer
#     trained on the spot; it measures the service path, not model quality), on the GPU; driven by
#     orch's load generator (orchestrator/workloads/loadgen.py) at each concurrency level, warm-up
#     requests first and not counted; TTFT/ITL/TPOT/E2E p50/p95/p99 with n from orch's metrics.
#     The engine runs in its own process group and is stopped by its PID when the script ends,
#     whatever ends it (trap); the part checks that the PID is gone.
#
# Usage: bash bench/gpu_check.sh [MAX_SIZE]   (collbench/nccl-tests sizes up to MAX_SIZE, default 256M)
# Environment (all optional):
#   PY=python3                      the image's Python (the venv's base)
#   WORK=$(mktemp -d)               scratch folder: venv, logs, model, records
#   WHEELHOUSE=bench/wheelhouse     the wheels to install from (see bench/build_wheelhouse.py)
#   NCCL_TESTS_SRC, NCCL_HOME, CUDA_HOME=/usr/local/cuda   part 4
#   ORCH_GPU_CHECK_DEVICE=cuda      cpu: skip parts 2-5 and serve on the CPU (proves the script's
#                                   install and serving logic on a machine with no GPU)
#   ORCH_GPU_CHECK_ENGINE=auto      auto | vllm | transformers
#   ORCH_GPU_CHECK_LEVELS="1 8"     concurrency levels; ORCH_GPU_CHECK_REQUESTS=100 counted requests
#                                   per level (p99 needs 100), ORCH_GPU_CHECK_WARMUP=4 warm-up requests
#   ORCH_GPU_CHECK_HEALTH_S=600     bound on the engine's start (until /health answers 200)
#   ORCH_GPU_CHECK_VENV_WITHOUT_PIP=1  make the venv without pip and install with $PY's pip (taken anyway
#                                   when the base Python lacks ensurepip)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO=$(pwd)
MAX=${1:-256M}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
PY=${PY:-python3}
WHEELHOUSE=${WHEELHOUSE:-$REPO/bench/wheelhouse}
DEVICE=${ORCH_GPU_CHECK_DEVICE:-cuda}
ENGINE=${ORCH_GPU_CHECK_ENGINE:-auto}
LEVELS=${ORCH_GPU_CHECK_LEVELS:-1 8}
REQUESTS=${ORCH_GPU_CHECK_REQUESTS:-100}
WARMUP=${ORCH_GPU_CHECK_WARMUP:-4}
HEALTH_S=${ORCH_GPU_CHECK_HEALTH_S:-600}
VENV=$WORK/venv
VPY=$VENV/bin/python
FAILS=0
ENGINE_PID=
CHILD_PID=

pass() { echo "gpu_check: PASS $*"; }
fail() { echo "gpu_check: FAIL $*"; FAILS=$((FAILS + 1)); }
skip() { echo "gpu_check: SKIP $*"; }

in_bg() {  # in_bg CMD...: run CMD and wait for it; a trapped signal interrupts the wait at once
  "$@" &
  CHILD_PID=$!
  wait "$CHILD_PID"
  local rc=$?
  CHILD_PID=
  return "$rc"
}

stop_engine() {
  [ -z "$CHILD_PID" ] || kill -TERM "$CHILD_PID" 2>/dev/null
  # The engine is the leader of its own process group (setsid): TERM the group, KILL after 10 s.
  [ -n "$ENGINE_PID" ] || return 0
  if kill -0 "$ENGINE_PID" 2>/dev/null; then
    kill -TERM -- "-$ENGINE_PID" 2>/dev/null || kill -TERM "$ENGINE_PID" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$ENGINE_PID" 2>/dev/null || true
  fi
  wait "$ENGINE_PID" 2>/dev/null
  ENGINE_PID=
}
trap stop_engine EXIT
trap 'stop_engine; exit 130' INT TERM

case "$DEVICE" in
  cuda) ;;
  cpu) skip "gpu: ORCH_GPU_CHECK_DEVICE=cpu: parts torch, nccl, nccl-tests, collbench skipped; serving on the CPU" ;;
  *) echo "gpu_check: ORCH_GPU_CHECK_DEVICE must be cuda or cpu, not '$DEVICE'"; exit 2 ;;
esac
if [ "$DEVICE" = cuda ]; then
  command -v nvidia-smi >/dev/null || { echo "gpu_check: no nvidia-smi: not an NVIDIA GPU machine"; exit 2; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
echo "gpu_check: work folder $WORK; python $(command -v "$PY") ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"

# --- 1. install: orch and the serving packages from the wheelhouse, offline --------------------
install_orch() {
  if ! ls "$WHEELHOUSE"/orch-*.whl >/dev/null 2>&1 || [ ! -f "$WHEELHOUSE/requirements.txt" ]; then
    fail "install: no wheelhouse at $WHEELHOUSE (build it where an index is reached: make wheelhouse; carry bench/wheelhouse)"
    return 1
  fi
  # A base Python without ensurepip (Debian/Ubuntu without python3-venv) cannot put pip into a
  # venv: then the venv is made without pip and $PY's own pip installs into it (pip --python).
  local pip_cmd=("$VPY" -m pip)
  if [ -n "${ORCH_GPU_CHECK_VENV_WITHOUT_PIP:-}" ] \
      || ! "$PY" -m venv --system-site-packages "$VENV" >"$WORK/venv.log" 2>&1; then
    rm -rf "$VENV"
    "$PY" -m venv --system-site-packages --without-pip "$VENV" >>"$WORK/venv.log" 2>&1 \
      || { cat "$WORK/venv.log"; fail "install: $PY -m venv failed"; return 1; }
    pip_cmd=("$PY" -m pip --python "$VPY")
    echo "gpu_check: venv made without pip; installing with: ${pip_cmd[*]}"
  fi
  # $PY may itself be a venv (the GPU image's /opt/torch/.venv): its packages (torch for CUDA,
  # numpy, nvidia-*) are not the base interpreter's, so the new venv sees them through a .pth
  # file, after its own site-packages (what the wheelhouse installs comes first).
  local parent_site own_site
  parent_site=$("$PY" -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
  own_site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ -n "$parent_site" ]; then
    printf '%s\n' "$parent_site" >"$own_site/_gpu_check_image.pth"
  fi
  if ! "${pip_cmd[@]}" install -q --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" \
      orch -r "$WHEELHOUSE/requirements.txt" >"$WORK/install.log" 2>&1; then
    tail -20 "$WORK/install.log"
    fail "install: pip install --no-index from $WHEELHOUSE failed (log $WORK/install.log)"
    return 1
  fi
  local versions
  versions=$(cd "$WORK" && "$VPY" - <<'PY'
from importlib import metadata
print(", ".join(f"{d} {metadata.version(d)}" for d in ("orch", "torch", "transformers", "tokenizers", "fastapi", "uvicorn")))
PY
) || { fail "install: the installed packages cannot be read"; return 1; }
  pass "install: from $WHEELHOUSE with --no-index: $versions"
}

install_orch
INSTALLED=$?
# Run orch's modules from $WORK so that the installed wheel is imported, not this checkout.
orch() { (cd "$WORK" && "$VPY" -m orchestrator "$@"); }

# --- 2.-5. NCCL: torch, the wheel's library, nccl-tests, collbench ---------------------------
largest() {  # largest FILE.json COLLECTIVE -> "SIZE ALGBW BUSBW" of the largest size
  "$VPY" - "$1" "$2" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
files = data if isinstance(data, list) else [data]
rows = [r for f in files for r in f["run"]["rows"] if r["collective"] == sys.argv[2]]
top = max(rows, key=lambda r: r["size_bytes"])
print(top["size_bytes"], top["out_of_place"]["algbw_gbs"], top["out_of_place"]["busbw_gbs"])
PY
}

nccl_parts() {
  local torch_line lib nccl_home src coll
  if ! torch_line=$(cd "$WORK" && "$VPY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>&1); then
    fail "torch: $(echo "$torch_line" | tail -1)"
    return 1
  fi
  pass "torch: $torch_line"

  if [ -n "${NCCL_HOME:-}" ]; then
    lib=
    for f in "$NCCL_HOME"/lib/libnccl.so*; do [ -e "$f" ] && { lib=$f; break; }; done
  else
    lib=$(cd "$WORK" && "$VPY" - <<'PY'
import glob, importlib.util, os, sys
try:
    spec = importlib.util.find_spec("nvidia.nccl")
except ImportError:
    spec = None
dirs = list(spec.submodule_search_locations or []) if spec else []
# nvidia-nccl-cu12 and -cu13 both keep it in nvidia/nccl/lib (the other cu13 libraries moved to
# nvidia/cu13/lib); any nvidia/*/lib is looked at last.
# sys.path, not site.getsitepackages(): the image venv's site-packages comes in through the .pth.
paths = [p for p in sys.path if p and os.path.isdir(p)]
dirs += [os.path.join(p, "nvidia", "nccl") for p in paths]
dirs += [d for p in paths for d in sorted(glob.glob(os.path.join(glob.escape(p), "nvidia", "*")))]
for d in dirs:
    hits = sorted(glob.glob(os.path.join(d, "lib", "libnccl.so*")))
    if hits:
        print(hits[0])
        break
PY
)
  fi
  if [ -z "$lib" ]; then
    fail "nccl: no libnccl.so* in the nvidia-nccl wheel (nvidia.nccl) nor under NCCL_HOME"
    return 1
  fi
  pass "nccl: $lib (inside the nvidia-nccl wheel)"

  src=${NCCL_TESTS_SRC:-}
  if [ -z "$src" ] || [ ! -f "$src/Makefile" ]; then
    skip "nccl-tests: NCCL_TESTS_SRC names no source (this machine reaches no git host and orch carries none of nccl-tests' code); collbench measures NCCL below"
  else
    # nccl-tests links -lnccl: a folder with the wheel's headers and a libnccl.so link to its .so.2.
    nccl_home=$WORK/nccl-home
    mkdir -p "$nccl_home/lib"
    ln -sfn "$(dirname "$(dirname "$lib")")/include" "$nccl_home/include"
    ln -sf "$lib" "$nccl_home/lib/libnccl.so"
    ln -sf "$lib" "$nccl_home/lib/libnccl.so.2"
    if ! make -s -C "$src" -j"$(nproc)" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" NCCL_HOME="$nccl_home" \
        >"$WORK/nccl-tests-build.log" 2>&1; then
      tail -20 "$WORK/nccl-tests-build.log"
      fail "nccl-tests: build against $nccl_home failed (log $WORK/nccl-tests-build.log)"
      src=
    else
      for coll in all_reduce sendrecv; do
        if LD_LIBRARY_PATH="$nccl_home/lib:${LD_LIBRARY_PATH:-}" "$src/build/${coll}_perf" -b 8 -e "$MAX" -f 2 -g 1 \
            | tee "$WORK/$coll.txt" && orch parse --kind nccl-tests --json "$WORK/$coll.txt" >"$WORK/$coll.json"; then
          read -r s a b <<<"$(largest "$WORK/$coll.json" "$coll")"
          pass "nccl-tests: $coll $s B algbw $a busbw $b GB/s"
        else
          fail "nccl-tests: $coll did not run or its output was refused"
          src=
        fi
      done
    fi
  fi

  if (cd "$WORK" && MASTER_ADDR=127.0.0.1 MASTER_PORT=${ORCH_GPU_CHECK_MASTER_PORT:-29555} RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 \
      "$VPY" -m orchestrator.workloads.collbench --backend nccl --collectives all_reduce,sendrecv \
      --sizes "8:$MAX:x2" --warmup 5 --iters 20 --check) | tee "$WORK/collbench.txt" \
      && orch parse --kind collbench --json "$WORK/collbench.txt" >"$WORK/collbench.json"; then
    for coll in all_reduce sendrecv; do
      read -r s a b <<<"$(largest "$WORK/collbench.json" "$coll")"
      line="collbench: $coll $s B algbw $a busbw $b GB/s"
      if [ -n "$src" ] && [ -f "$WORK/$coll.json" ]; then
        read -r _ a1 _ <<<"$(largest "$WORK/$coll.json" "$coll")"
        line="$line | nccl-tests algbw $a1 GB/s, ratio $("$VPY" -c "print(f'{$a / $a1:.2f}' if $a1 else '-')")"
      fi
      pass "$line"
    done
  else
    fail "collbench: backend nccl did not run or its output was refused (log above)"
  fi
}

if [ "$DEVICE" = cuda ]; then
  if [ "$INSTALLED" = 0 ]; then nccl_parts; else skip "torch, nccl, collbench: orch is not installed"; fi
fi

in_group() {  # in_group PGID: true when a process of that process group is still alive (/proc)
  "$VPY" - "$1" <<'PY'
import glob, sys
for stat in glob.glob("/proc/[0-9]*/stat"):
    try:
        fields = open(stat).read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if fields[0] != "Z" and fields[2] == sys.argv[1]:
        sys.exit(0)
sys.exit(1)
PY
}

# --- 6. serving ------------------------------------------------------------------------------
serve() {
  local model=$WORK/models/lab-tiny port base engine_argv loadgen_extra t0 load_s c out
  if [ "$ENGINE" = auto ]; then
    if (cd "$WORK" && "$VPY" -c 'import vllm') >/dev/null 2>&1; then ENGINE=vllm; else ENGINE=transformers; fi
  fi
  if ! (cd "$WORK" && HF_HUB_OFFLINE=1 "$VPY" -m orchestrator.workloads.labmodel --name lab-tiny \
      --dest "$model" --record "$WORK/models/lab-tiny.json") >"$WORK/labmodel.json" 2>"$WORK/labmodel.err"; then
    cat "$WORK/labmodel.err"
    fail "serving: the lab model could not be built"
    return 1
  fi
  echo "gpu_check: lab model $(cat "$WORK/labmodel.json")"
  port=$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  base=http://127.0.0.1:$port
  case "$ENGINE" in
    vllm)
      engine_argv=("$VPY" -m vllm.entrypoints.openai.api_server --model "$model" --host 127.0.0.1
                   --port "$port" --dtype auto)
      [ "$DEVICE" = cpu ] && engine_argv+=(--device cpu)
      loadgen_extra=(--ignore-eos) ;;  # vLLM honours ignore_eos; transformers serve refuses it (422)
    transformers)
      engine_argv=("$VENV/bin/transformers" serve "$model" --continuous-batching --device "$DEVICE"
                   --host 127.0.0.1 --port "$port")
      loadgen_extra=() ;;
    *) fail "serving: ORCH_GPU_CHECK_ENGINE must be auto, vllm or transformers, not '$ENGINE'"; return 1 ;;
  esac
  echo "gpu_check: engine $ENGINE: ${engine_argv[*]}"
  t0=$(date +%s.%N)
  (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 exec setsid "${engine_argv[@]}") >"$WORK/engine.log" 2>&1 &
  ENGINE_PID=$!
  if ! in_bg "$VPY" -c '
import os, sys, time, urllib.request
url, bound, pid = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
end = time.monotonic() + bound
while time.monotonic() < end:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(f"the engine exited before {url} answered")
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.5)
sys.exit(f"{url} did not answer 200 within {bound:g} s")
' "$base/health" "$HEALTH_S" "$ENGINE_PID"; then
    tail -30 "$WORK/engine.log"
    fail "serving: $ENGINE did not become healthy (log $WORK/engine.log)"
    stop_engine
    return 1
  fi
  load_s=$("$VPY" -c "import time; print(f'{time.time() - $t0:.1f}')")
  echo "gpu_check: $ENGINE answered /health after $load_s s (imports and model load)"
  if [ "$("$VPY" -c 'import os, sys; print(os.getpgid(int(sys.argv[1])))' "$ENGINE_PID")" != "$ENGINE_PID" ]; then
    echo "gpu_check: note: the engine (PID $ENGINE_PID) does not lead its own process group; only its PID is stopped"
  fi
  local failed=0
  for c in $LEVELS; do
    out=$WORK/records-c$c.jsonl
    in_bg env -C "$WORK" "$VPY" -m orchestrator.workloads.loadgen --target "gpu=$base" --model "$model" \
      --concurrency "$c" --requests "$REQUESTS" --warmup "$WARMUP" --input-tokens 32 --output-tokens 16 \
      --timeout 120 "${loadgen_extra[@]}" --out "$out" || { fail "serving: loadgen at concurrency $c exited $?"; failed=1; continue; }
    if ! (cd "$WORK" && "$VPY" - "$out" "c$c" "$ENGINE" "$DEVICE") <<'PY'
import sys
from pathlib import Path
from orchestrator.metrics.serving import level_lines, parse_records, summarize_level
path, level, engine, device = sys.argv[1:5]
records = [r.model_copy(update={"level": level}) for r in parse_records(Path(path).read_text().splitlines(), source=path)]
s = summarize_level(records)
for line in level_lines(s):
    print("gpu_check:   " + line)
def p(x): return "-" if x is None else f"{x:.4g}"
figs = (f"TTFT p50 {p(s.ttft_ms.p50)} p99 {p(s.ttft_ms.p99)} ms (n={s.ttft_ms.n}), "
        f"ITL p50 {p(s.itl_ms.p50)} p99 {p(s.itl_ms.p99)} ms (n={s.itl_ms.n})")
if s.ok == s.n:
    print(f"gpu_check: PASS serving: {engine} on {device}, {level}: {s.ok}/{s.n} ok, {figs}")
    sys.exit(0)
print(f"gpu_check: FAIL serving: {engine} on {device}, {level}: {s.ok}/{s.n} ok "
      f"(errors {s.errors}, aborted {s.aborted}), {figs}")
sys.exit(1)
PY
    then
      FAILS=$((FAILS + 1)); failed=1
    fi
  done
  local pid=$ENGINE_PID
  stop_engine
  if kill -0 "$pid" 2>/dev/null || in_group "$pid"; then
    fail "serving: the engine (PID $pid) or its process group is still running after stop"
  else
    pass "serving: engine stopped (PID $pid and its process group gone)"
  fi
  return "$failed"
}

if [ "$INSTALLED" = 0 ]; then serve; else skip "serving: orch is not installed"; fi

if [ "$FAILS" -gt 0 ]; then
  echo "gpu_check: $FAILS part(s) FAILED ($WORK)"
  exit 1
fi
echo "gpu_check: ok ($WORK)"
