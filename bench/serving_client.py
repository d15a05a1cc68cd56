"""bench/serving_client.py — how fast orch's load generator can send, and how true its timestamps are.

Method: a streaming OpenAI-compatible stand-in (http.server, one thread per request, in its own
process so that it does not share the client's interpreter lock) answers every request on
127.0.0.1; it is not an engine. Two measurements, each with orchestrator.workloads.loadgen as the
scheduler runs it (threads, http.client, one JSON line per record):

  * highest sustained rate: open-loop Poisson arrivals at rising rates, 400 requests each (chat
    completions, 8 output tokens, no delay at the server), for orch's generator in one process,
    orch's in N processes on one schedule (workloads/loadgen_multi.py; --procs, one per core by
    default), and, with --max-rate-guidellm, guidellm's Poisson profile (its own worker
    processes), all against one stand-in run in N processes on one port (SO_REUSEPORT). A rate is
    sustained when every request succeeded and the achieved send rate, (n - 1) / (last send -
    first send), is within 5% of the schedule's own rate (the same over the scheduled times:
    orch's `scheduled`, guidellm's `targeted_start`; the target where a level has no schedule).
    The figures are the highest sustained rates and their ratios, N / 1 and orch / guidellm; the
    server shares the same cores, so each is a lower bound of that client's own limit.
  * timestamp error: the server sleeps TTFT_S before the first token and ITL_S between tokens
    (monotonic deadlines from the request's arrival, so its own jitter does not accumulate); at
    concurrency 1 and 4, 200 requests of 16 tokens, the client's TTFT - TTFT_S and ITL - ITL_S
    are its error (request send and parse overhead, scheduling of its threads) plus the stand-in's
    own lateness. Printed as p50 / p99 with n.

With --versus guidellm (issue 11, point 4), in the same run: the side-by-side with guidellm on
one server and one load. The server is tests/unit/sse_server.py as a program (its own process)
with an engine's pace: TTFT 20 ms, 5 ms between tokens, one token per chunk, ignore_eos accepted.
Each tool runs chat completions at fixed concurrency 4, 200 requests (32 input words, 16 output
tokens), twice, interleaved (orch A, guidellm A, orch B, guidellm B): A-against-A gives each
tool's own spread. guidellm runs from its own venv (--guidellm-python) with a word-level
tokenizer built here from faker text (no model hub: its synthetic data needs a tokenizer); its
TTFT and ITL p50 are read from its JSON report. Its ITL is per request (last - first token) /
(tokens - 1), weighted by tokens: it spaces the tokens evenly, so orch's ITL is printed both
pooled (its own definition) and as guidellm computes it. Agreement: |orch - guidellm| / guidellm
within max(10 %, orch's A/A spread, guidellm's A/A spread), spread = |A - B| / mean(A, B).

Usage: .venv/bin/python bench/serving_client.py [--quick] [--procs N] [--max-rate-guidellm]
       [--versus guidellm] [--guidellm-python P]
Never part of the pass/fail run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.metrics.percentiles import label, summarize
from orchestrator.models.serving_results import RequestRecord
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, Target
from orchestrator.workloads.loadgen_multi import MultiLoadGenerator

ROOT = Path(__file__).resolve().parents[1]
TTFT_S = 0.020
ITL_S = 0.005
RATES = (50, 100, 150, 200, 300, 400, 600, 800, 1000, 1200, 1600, 2000, 2400, 3200)


_TEXT_CHUNKS = (
    b'data: {"choices": [{"index": 0, "text": " x"}]}\n\n',
    b'data: {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}\n\n',
)
_CHAT_CHUNKS = (
    b'data: {"choices": [{"index": 0, "delta": {"content": " x"}}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}\n\n',
)


def _serve(port_q: multiprocessing.Queue, ttft_s: float, itl_s: float, port: int = 0) -> None:  # type: ignore[type-arg]
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # /health, /v1/models: what guidellm checks before it starts
            data = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            t0 = time.monotonic()
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            chat = self.path.endswith("/chat/completions")
            token, end = _CHAT_CHUNKS if chat else _TEXT_CHUNKS
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(int(body.get("max_tokens") or body["max_completion_tokens"])):
                wait = t0 + ttft_s + i * itl_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.wfile.write(token)
                self.wfile.flush()
            self.wfile.write(end)
            self.wfile.write(b"data: [DONE]\n\n")

    ThreadingHTTPServer.allow_reuse_port = True  # several stand-in processes share one port
    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    srv.request_queue_size = 1024
    port_q.put(srv.server_address[1])
    srv.serve_forever()


class StandIn:
    """The stand-in in `workers` processes on one port (SO_REUSEPORT: the kernel spreads the
    connections), so that its interpreter lock is not the limit of a multi-process client."""

    def __init__(self, ttft_s: float = 0.0, itl_s: float = 0.0, workers: int = 1) -> None:
        q: multiprocessing.Queue[int] = multiprocessing.Queue()
        self.procs = [multiprocessing.Process(target=_serve, args=(q, ttft_s, itl_s), daemon=True)]
        self.procs[0].start()
        port = q.get(timeout=30)
        for _ in range(workers - 1):
            self.procs.append(
                multiprocessing.Process(target=_serve, args=(q, ttft_s, itl_s, port), daemon=True)
            )
            self.procs[-1].start()
            q.get(timeout=30)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
            p.join(10)


def level(url: str, **kw: object) -> list[RequestRecord]:
    spec: dict[str, object] = {"targets": [Target("stand-in", url)], "model": "m", "input_tokens": [8],
                               "output_tokens": [8], "timeout_s": 30.0, "max_in_flight": 4096}  # fmt: skip
    spec.update(kw)
    out: list[RequestRecord] = []
    LoadGenerator(LoadSpec(**spec), out.append).run()  # type: ignore[arg-type]
    return out


Sent = tuple[list[tuple[float, float | None]], list[str]]
"""One level as a sender saw it: (send, scheduled) of each request that was sent (scheduled None
when unknown) and the errors of the requests that failed."""


def _rate(times: Sequence[float]) -> float:
    ts = sorted(times)
    return (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else 0.0


def sweep(send: Callable[[float, int], Sent], n: int, rates: Sequence[int] = RATES) -> float:
    """Open-loop Poisson levels of n requests at rising rates until one is not sustained; prints
    each and returns the highest sustained rate (0 when none). Sustained: every request sent and
    ok, and the achieved send rate, (n - 1) / (last send - first send), within 5 % of the
    schedule's own rate (the same over its scheduled times; the target rate where the sender gave
    none): the generator is judged against the arrivals it drew, not against its seed's luck, and
    a sender that runs ahead of its schedule does not hold it either."""
    best = 0.0
    for rate in rates:
        sent, errors = send(float(rate), n)
        achieved = _rate([a for a, _ in sent])
        scheduled = [b for _, b in sent if b is not None]
        meant = _rate(scheduled) if len(scheduled) == len(sent) else float(rate)
        late = sorted(a - b for a, b in sent if b is not None)
        ok = not errors and len(sent) == n and abs(achieved / meant - 1) <= 0.05
        lag = f", late p95 {late[int(0.95 * (len(late) - 1))] * 1e3:6.1f} ms" if late else ""
        slow = "too slow" if achieved < meant else "too fast: sent ahead of its schedule"
        why = "; ".join(sorted({e[:160] for e in errors})) or (slow if sent else "no requests")
        known = "scheduled" if len(scheduled) == len(sent) else "target (no schedule in its records)"
        print(f"    rate {rate:5d}/s: {known} {meant:7.1f}/s, achieved {achieved:7.1f}/s{lag}, failed "
              f"{len(errors)}, {'sustained' if ok else f'NOT ({why})'}")  # fmt: skip
        if not ok:
            break
        best = float(rate)
    return best


def orch_sender(url: str, procs: int | None) -> Callable[[float, int], Sent]:
    """orch's generator at one rate: one process (LoadGenerator, procs None) or `procs`
    processes on one schedule (MultiLoadGenerator)."""

    def send(rate: float, n: int) -> Sent:
        spec = LoadSpec(targets=[Target("stand-in", url)], model="m", input_tokens=[8], output_tokens=[8],
                        rate=rate, requests=n, seed=1, timeout_s=30.0, max_in_flight=4096,
                        api="chat")  # fmt: skip
        recs: list[RequestRecord] = []
        gen = (
            LoadGenerator(spec, recs.append)
            if procs is None
            else MultiLoadGenerator(spec, recs.append, procs)
        )
        gen.run()
        errors = [r.error or r.status for r in recs if r.status != "ok"]
        return [(r.send, r.scheduled) for r in recs if r.status == "ok"], errors

    return send


def guidellm_sender(py: str, url: str, tokenizer: str, tmp: Path) -> Callable[[float, int], Sent]:
    """guidellm's Poisson profile at one rate (its own processes; chat completions, 8 words in,
    8 tokens out), its send times the requests' `request_start` from its JSON report."""

    def send(rate: float, n: int) -> Sent:
        out = tmp / f"rate{rate:g}.json"
        cmd = [py, "-m", "guidellm", "run", "--backend", f"kind=openai_http,target={url},model=m",
               "--profile", f"kind=poisson,rate={rate:g}", "--constraint", f"kind=max_requests,count={n}",
               "--data", "kind=synthetic_text,prompt_tokens=8,output_tokens=8",
               "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
               "--output", f"kind=json,path={out}", "--disable-console"]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if p.returncode != 0 or not out.exists():
            return [], [
                f"guidellm failed ({p.returncode}): {(p.stderr or p.stdout).strip().splitlines()[-1][-160:]}"
            ]
        reqs = json.loads(out.read_text())["benchmarks"][0]["requests"]
        timings = [r["info"]["timings"] for r in reqs["successful"]]
        failed = [*(reqs.get("errored") or []), *(reqs.get("incomplete") or [])]
        # targeted_start is absolute (epoch seconds) in its reports; anything else is not a schedule
        sent = [(t["request_start"], t["targeted_start"] if (t.get("targeted_start") or 0) > 1e9 else None)
                for t in timings]  # fmt: skip
        return sent, [str(r.get("error") or "failed")[:60] for r in failed]

    return send


def max_rates(n: int, procs: int, guidellm_py: str | None) -> None:
    """The highest sustained rate of orch's generator with 1 and with `procs` processes, and of
    guidellm's, in one run against one stand-in (`procs` processes on one port); prints the ratios."""
    srv = StandIn(workers=max(1, procs))
    best: dict[str, float] = {}
    try:
        level(srv.url, concurrency=4, requests=50)  # warm the server's and the client's paths
        print("  orch, 1 process:")
        best["orch 1"] = sweep(orch_sender(srv.url, None), n)
        print(f"  orch, {procs} processes (one schedule):")
        best[f"orch {procs}"] = sweep(orch_sender(srv.url, procs), n)
        if guidellm_py is not None:
            with tempfile.TemporaryDirectory(prefix="orch-gl-") as tmp:
                tok = Path(tmp) / "tokenizer"
                subprocess.run([guidellm_py, "-c", _TOKENIZER, str(tok)], check=True, capture_output=True)
                print("  guidellm (poisson profile, its own worker processes):")
                best["guidellm"] = sweep(guidellm_sender(guidellm_py, srv.url, str(tok), Path(tmp)), n)
    finally:
        srv.close()
    print("  => highest sustained: " + ", ".join(f"{k} {v:g}/s" for k, v in best.items()))
    one, many = best["orch 1"], best[f"orch {procs}"]
    print(f"  => orch {procs} processes / 1 process: {many / one if one else float('nan'):.2f}")
    if "guidellm" in best:
        g = best["guidellm"]
        for k in ("orch 1", f"orch {procs}"):
            print(f"  => {k} / guidellm: {best[k] / g if g else float('nan'):.2f}")
    else:
        print("  => guidellm: not measured (no --guidellm-python)")


def timestamp_error(n: int) -> None:
    srv = StandIn(TTFT_S, ITL_S)
    try:
        level(srv.url, concurrency=1, requests=10)
        for c in (1, 4):
            recs = [
                r for r in level(srv.url, concurrency=c, requests=n, output_tokens=[16]) if r.status == "ok"
            ]
            ttft = [((r.first_token or r.send) - r.send - TTFT_S) * 1e3 for r in recs]
            itl = [((b - a) - ITL_S) * 1e3 for r in recs for a, b in itertools.pairwise(r.token_times)]
            ttft_label = label(summarize(ttft), "ms", ".3g")
            print(f"  c{c}: TTFT - {TTFT_S * 1e3:g} ms: {ttft_label}; min {min(ttft):.3g} ms")
            print(f"      ITL - {ITL_S * 1e3:g} ms:  {label(summarize(itl), 'ms', '.3g')}; "
                  f"median |error| {statistics.median(abs(x) for x in itl):.3g} ms")  # fmt: skip
    finally:
        srv.close()


VS_TTFT_S, VS_ITL_S, VS_C, VS_N, VS_IN, VS_OUT = 0.020, 0.005, 4, 200, 32, 16

# Run with guidellm's python: a word-level tokenizer over faker's words (what guidellm's synthetic
# data draws its text from), so that a prompt of k tokens is k words, as orch's are.
_TOKENIZER = """
import sys
from faker import Faker
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
f = Faker()
f.seed_instance(0)
tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.train_from_iterator((f.text(max_nb_chars=2000) for _ in range(3000)),
                        trainers.WordLevelTrainer(special_tokens=["[UNK]", "[EOS]"]))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
fast.save_pretrained(sys.argv[1])
"""


class Engine:
    """tests/unit/sse_server.py as a program, paced like an engine; stopped by close()."""

    def __init__(self, ttft_s: float, itl_s: float) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, str(ROOT / "tests/unit/sse_server.py"), "serve", "m", "--host", "127.0.0.1",
               "--port", str(port), "--ttft", str(ttft_s), "--itl", str(itl_s)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        for _ in range(100):
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError("stand-in engine did not answer /health")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _orch_run(url: str) -> dict[str, float]:
    recs = level(url, concurrency=VS_C, requests=VS_N, input_tokens=[VS_IN], output_tokens=[VS_OUT],
                 api="chat", ignore_eos=True)  # fmt: skip
    ok = [r for r in recs if r.status == "ok" and r.first_token is not None]
    ttft = [((r.first_token or 0.0) - r.send) * 1e3 for r in ok]
    gaps = [(b - a) * 1e3 for r in ok for a, b in itertools.pairwise(r.token_times)]
    # guidellm's ITL: (last - first token) / (tokens - 1) per request, one value per gap
    even = [
        (r.token_times[-1] - r.token_times[0]) * 1e3 / (len(r.token_times) - 1)
        for r in ok
        if len(r.token_times) > 1
        for _ in range(len(r.token_times) - 1)
    ]
    return {"ok": len(ok), "failed": len(recs) - len(ok), "ttft": statistics.median(ttft),
            "itl": statistics.median(gaps), "itl_even": statistics.median(even), "n_itl": len(gaps),
            "out": statistics.median(r.output_tokens or 0 for r in ok),
            "in": statistics.median(r.input_tokens or 0 for r in ok)}  # fmt: skip


def _guidellm_run(py: str, url: str, tokenizer: str, out: Path) -> dict[str, float]:
    cmd = [py, "-m", "guidellm", "run", "--backend", f"kind=openai_http,target={url},model=m",
           "--profile", f"kind=concurrent,streams={VS_C}", "--constraint", f"kind=max_requests,count={VS_N}",
           "--data", f"kind=synthetic_text,prompt_tokens={VS_IN},output_tokens={VS_OUT}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
           "--output", f"kind=json,path={out}", "--disable-console"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if p.returncode != 0 or not out.exists():
        raise RuntimeError(f"guidellm failed ({p.returncode}): {(p.stderr or p.stdout)[-800:]}")
    b = json.loads(out.read_text())["benchmarks"][0]
    m, reqs = b["metrics"], b["requests"]

    def p50(name: str) -> tuple[float, int]:
        s = m[name]["successful"]
        return float(s["percentiles"]["p50"]), int(s["count"])

    ttft, n = p50("time_to_first_token_ms")
    itl, n_itl = p50("inter_token_latency_ms")
    return {"ok": n, "failed": len(reqs.get("errored") or []) + len(reqs.get("incomplete") or []),
            "ttft": ttft, "itl": itl, "n_itl": n_itl, "out": p50("output_token_count")[0],
            "in": p50("prompt_token_count")[0]}  # fmt: skip


def _spread(a: float, b: float) -> float:
    return abs(a - b) / ((a + b) / 2)


def versus_guidellm(py: str) -> bool:
    ver = subprocess.run([py, "-c", "import importlib.metadata as m; print(m.version('guidellm'))"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    print(f"side by side with guidellm {ver} ({py}): stand-in engine TTFT {VS_TTFT_S * 1e3:g} ms, "
          f"ITL {VS_ITL_S * 1e3:g} ms; chat, concurrency {VS_C}, {VS_N} requests, "
          f"{VS_IN} in / {VS_OUT} out")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="orch-vs-") as tmp:
        tok = Path(tmp) / "tokenizer"
        subprocess.run([py, "-c", _TOKENIZER, str(tok)], check=True, capture_output=True)
        eng = Engine(VS_TTFT_S, VS_ITL_S)
        try:
            level(eng.url, concurrency=VS_C, requests=20, api="chat", output_tokens=[VS_OUT])  # warm-up
            runs: dict[str, list[dict[str, float]]] = {"orch": [], "guidellm": []}
            for ab in "AB":
                runs["orch"].append(_orch_run(eng.url))
                runs["guidellm"].append(_guidellm_run(py, eng.url, str(tok), Path(tmp) / f"g{ab}.json"))
                for tool in ("orch", "guidellm"):
                    r = runs[tool][-1]
                    extra = f", ITL as guidellm spaces it {r['itl_even']:.3f} ms" if tool == "orch" else ""
                    print(f"  {tool:8s} {ab}: ok {r['ok']:g}, failed {r['failed']:g}, tokens p50 in "
                          f"{r['in']:g} / out {r['out']:g}; TTFT p50 {r['ttft']:.3f} ms; "
                          f"ITL p50 {r['itl']:.3f} ms (n={r['n_itl']:g}){extra}")  # fmt: skip
        finally:
            eng.close()
    agree = True
    for metric in ("ttft", "itl"):
        o = statistics.fmean(r[metric] for r in runs["orch"])
        g = statistics.fmean(r[metric] for r in runs["guidellm"])
        so = _spread(*(r[metric] for r in runs["orch"]))
        sg = _spread(*(r[metric] for r in runs["guidellm"]))
        band = max(0.10, so, sg)
        diff = abs(o - g) / g
        agree &= diff <= band
        print(f"  {metric.upper()} p50: orch {o:.3f} ms / guidellm {g:.3f} ms = {o / g:.3f}; |diff| "
              f"{diff:.1%}, A/A spread orch {so:.1%}, guidellm {sg:.1%}; band {band:.1%}: "
              f"{'AGREE' if diff <= band else 'DISAGREE'}")  # fmt: skip
    return agree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="fewer requests (100 per rate, 100 per level)")
    ap.add_argument("--versus", choices=["guidellm"], help="also run the side-by-side with this generator")
    ap.add_argument("--guidellm-python", default="python3", help="the python of a venv that has guidellm")
    ap.add_argument("--procs", type=int, help="generator processes against one (default: one per core)")
    ap.add_argument("--max-rate-guidellm", action="store_true",
                    help="also sweep guidellm's highest rate (needs --guidellm-python)")  # fmt: skip
    a = ap.parse_args()
    print(f"serving_client: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    procs = a.procs or os.cpu_count() or 1
    gl = a.guidellm_python if a.max_rate_guidellm else None
    print(f"highest sustained open-loop rate against a zero-latency stand-in ({procs} processes, "
          "8 tokens per answer):")  # fmt: skip
    max_rates(100 if a.quick else 400, procs, gl)
    print(f"timestamp error against a stand-in with TTFT {TTFT_S * 1e3:g} ms and ITL {ITL_S * 1e3:g} ms:")
    timestamp_error(100 if a.quick else 200)
    if a.versus == "guidellm":
        return 0 if versus_guidellm(a.guidellm_python) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
