"""A test double of an OpenAI-compatible streaming server (NOT a real engine, and not its output).

It answers POST /v1/completions and /v1/chat/completions with server-sent events as vLLM and
`transformers serve` shape them (one `data:` chunk per token, a usage chunk when asked, then
`data: [DONE]`), after delays the test chooses: `ttft_s` before the first token, `itl_s` between
tokens. The number of tokens is the request's max_tokens (or OpenAI's max_completion_tokens, as
guidellm sends on chat): the double has no end of sequence, so `ignore_eos` and other fields are
accepted and ignored. A chat message's content may be a string or a list of text parts.
Behaviours for error paths: `fail_every` (every k-th request gets HTTP 500), `hold` (a request
whose max_tokens equals HOLD_TOKENS waits for this event before it answers), `usage` (send the
usage chunk or not), `done` (end with `data: [DONE]` as vLLM does, or only with the finish chunk
as `transformers serve` 5.24 does), `empty_every` (every k-th token streams as "", as a
byte-level token that ends inside a UTF-8 character does), `truncate_after` (stop after that many
tokens, and end the stream as `truncate_end` says: "close" the connection, "done" (`data: [DONE]`
with no finish chunk), "error" (an error event then [DONE], as vLLM ends a request that failed
after its HTTP 200), or "finish" (the finish chunk, usage and [DONE] as usual)), `finish` (the
finish chunk's finish_reason, "length" by default; None sends no finish chunk), `echo` (answer
with the prompt's words in turn instead of " t0 t1 ...", as a greedy engine answers one prompt the
same way each time; `diverge_at` changes every word from
that token on, as a B that changes numerics would; `logprob_shift` moves each logprob). When the
request asks (`return_token_ids`, vLLM; `logprobs`, OpenAI's completions and chat shapes), each
chunk carries its token id (crc32 of the word) and its logprob (-0.01 x (i + 1) + logprob_shift).
`slots` (serve at most that many requests at once, the others wait in
a queue for a free slot: with ttft_s and itl_s this gives the double a service rate, and a
Poisson load above it a queue that grows). `bodies` keeps every request body, for tests of what a
client sent.
It runs in a thread on 127.0.0.1 and an ephemeral port, for the length of one test.

As a program it stands in for an engine that orch starts (`transformers serve`'s command line:
`sse_server.py serve MODEL --host H --port P [engine options, ignored]`): GET /health answers 200
(or 503 for ever with --never-healthy), GET /v1/models lists the model; --pid-file appends its
process id, so that a test can check that orch stopped it; --ttft and --itl (seconds) give it an
engine's pace (bench/serving_client.py --versus guidellm drives it so), --slots a service rate,
--echo and --diverge-at N the `echo` and `diverge_at` behaviours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_TOKENS = 99


@dataclass
class Behaviour:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    fail_every: int = 0
    usage: bool = True
    done: bool = True
    empty_every: int = 0
    truncate_after: int = 0
    truncate_end: str = "close"
    finish: str | None = "length"
    echo: bool = False
    diverge_at: int = -1
    logprob_shift: float = 0.0
    healthy: bool = True
    model: str = "test-model"
    slots: int = 0
    hold: threading.Event = field(default_factory=threading.Event)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    bodies: list[dict[str, object]] = field(default_factory=list)
    queue: threading.Semaphore | None = None

    def __post_init__(self) -> None:
        if self.slots:
            self.queue = threading.Semaphore(self.slots)


def _handler(b: Behaviour) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/health":
                self.send_response(200 if b.healthy else 503)
                self.end_headers()
                return
            if self.path == "/v1/models":
                data = json.dumps({"object": "list", "data": [{"id": b.model, "object": "model"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(404)
            self.end_headers()

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with b.lock:
                b.requests += 1
                k = b.requests
                b.bodies.append(body)
            if b.fail_every and k % b.fail_every == 0:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"engine overloaded")
                return
            chat = self.path.endswith("/chat/completions")
            # vLLM's and OpenAI's names for the cap (guidellm sends max_completion_tokens on chat)
            n = int(body["max_tokens"] if "max_tokens" in body else body["max_completion_tokens"])
            if n == HOLD_TOKENS:
                b.hold.wait(30)
            if b.queue is not None:
                with b.queue:
                    self._stream(body, n, chat)
            else:
                self._stream(body, n, chat)

        def _stream(self, body: dict[str, Any], n: int, chat: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                time.sleep(b.ttft_s)
                sent = n
                for i in range(n):
                    if b.truncate_after and i == b.truncate_after:
                        sent = i
                        if b.truncate_end == "error":
                            self._event(
                                {"error": {"message": "engine core died", "type": "InternalServerError"}}
                            )
                        if b.truncate_end in ("done", "error"):
                            self.wfile.write(b"data: [DONE]\n\n")
                            self.wfile.flush()
                        if b.truncate_end != "finish":
                            return
                        break
                    if i:
                        time.sleep(b.itl_s)
                    piece = "" if b.empty_every and (i + 1) % b.empty_every == 0 else f" t{i}"
                    if b.echo:
                        piece = " " + _echo_word(body, i, b.diverge_at)
                    choice: dict[str, object] = (
                        {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
                    )
                    if body.get("return_token_ids"):
                        choice["token_ids"] = [zlib.crc32(piece.strip().encode())]
                    if body.get("logprobs"):
                        lp = round(-0.01 * (i + 1) + b.logprob_shift, 6)
                        token = piece.strip()
                        choice["logprobs"] = (
                            {"content": [{"token": token, "logprob": lp}]}
                            if chat
                            else {"tokens": [token], "token_logprobs": [lp]}
                        )
                    self._event({"id": "x", "choices": [choice]})
                if b.finish is not None:
                    end = {"index": 0, "finish_reason": b.finish}
                    self._event(
                        {"id": "x", "choices": [{**end, "delta": {}} if chat else {**end, "text": ""}]}
                    )
                if body.get("stream_options", {}).get("include_usage") and b.usage:
                    text = body.get("prompt") or " ".join(
                        _content_text(m["content"]) for m in body["messages"]
                    )
                    prompt = len(text.split())
                    self._event(
                        {
                            "id": "x",
                            "choices": [],
                            "usage": {"prompt_tokens": prompt, "completion_tokens": sent},
                        }
                    )
                if b.done:
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _event(self, obj: object) -> None:
            self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            self.wfile.flush()

    return Handler


def _echo_word(body: dict[str, object], i: int, diverge_at: int) -> str:
    """Token i of an echoed answer: the prompt's words in turn; from diverge_at on, changed."""
    text = body.get("prompt") or " ".join(
        _content_text(m["content"])
        for m in body["messages"]  # type: ignore[attr-defined]
    )
    words = str(text).split() or ["-"]
    word = words[i % len(words)]
    return word + "x" if 0 <= diverge_at <= i else word


def _content_text(content: str | list[dict[str, str]]) -> str:
    """A chat message's text: a string, or OpenAI's list of parts ({"type": "text", "text": ...})."""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if p.get("type") == "text")


@contextmanager
def sse_server(b: Behaviour) -> Iterator[str]:
    """Serve b on 127.0.0.1; yields the base URL (http://127.0.0.1:PORT)."""
    # socketserver's listen backlog is 5: a burst of Poisson arrivals on a loaded machine would
    # overflow it and see resets that belong to the double, not to the client under test.
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 128})
    srv = server_class(("127.0.0.1", 0), _handler(b))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        b.hold.set()
        srv.shutdown()
        srv.server_close()


def main(argv: list[str] | None = None) -> int:
    """Serve as a stand-in engine until killed (see the module docstring)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["serve"])
    ap.add_argument("model")
    ap.add_argument("--host", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid-file")
    ap.add_argument("--ttft", type=float, default=0.0)
    ap.add_argument("--itl", type=float, default=0.0)
    ap.add_argument("--slots", type=int, default=0, help="requests served at once (0: no bound)")
    ap.add_argument("--never-healthy", action="store_true")
    ap.add_argument("--echo", action="store_true", help="answer with the prompt's words (greedy-like)")
    ap.add_argument("--diverge-at", type=int, default=-1, help="with --echo: change words from this token on")
    a, rest = ap.parse_known_args(argv)
    if a.pid_file:
        with open(a.pid_file, "a") as f:
            f.write(f"{os.getpid()}\n")
    print(f"stand-in engine for {a.model} on {a.host}:{a.port}; ignored: {rest}", flush=True)
    b = Behaviour(
        ttft_s=a.ttft,
        itl_s=a.itl,
        healthy=not a.never_healthy,
        model=a.model,
        slots=a.slots,
        echo=a.echo,
        diverge_at=a.diverge_at,
    )
    server_class = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 128})
    srv = server_class((a.host, a.port), _handler(b))
    srv.daemon_threads = True
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
