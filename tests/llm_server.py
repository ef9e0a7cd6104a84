"""A real OpenAI-compatible chat server for tests, with fault injection.

It behaves like mlx_lm.server on the wire (see shared/mlx_server.md): HTTP/1.0, one request
per connection, ``{"error": "..."}`` bodies, ``content: null`` for an empty reply, SSE
streams with keep-alive comments, a usage chunk and ``[DONE]``.

Run in a thread (``LLMServer().start()``) or as a process
(``python -m tests.llm_server --port 0``, which prints ``port=N``). Control it through
attributes, or over HTTP: ``POST /_control`` with JSON fields, ``GET /_stats``,
``GET /_gaps`` (idle ms between consecutive replies), ``GET /_busy`` (busy share),
``POST /_reset``.

``held = True`` holds every reply until the test lets it go (``let_through(n)``: n replies).

A reply "in ``delay`` seconds" is timed from the moment the request line arrives (or a
queued request gets its slot), so the server's own parsing is not billed to the client.

Faults (``fault`` for every request, or ``FAULT:<name>`` inside a question's text):
``500``, ``429`` (with ``Retry-After: retry_after``), ``503``, ``404`` (unknown model),
``400``, ``slow`` (answers after ``slow_seconds``), ``malformed`` (broken JSON),
``null`` (content null), ``length`` (finish_reason "length"), ``filter`` (finish_reason
"content_filter"), ``noreason`` (no finish_reason, then ``[DONE]``), ``drop`` (closes mid-stream),
``hangup`` (reads the request, works ``delay`` seconds, then closes the connection without a
byte of reply),
``reasoning`` (a reasoning server: all its text in ``reasoning_content``, ``content`` empty).

Key audit and blind verifier calls get the answer a sound model would give, worked out from
what their prompt holds (``tests/llm_checks.py``): a correct key agrees, a sound explanation
raises no flag. ``audit_answer`` and ``verify_answer`` (``--audit-answer``,
``--verify-answer``) fix the reply instead; ``AUDIT:`` and ``VERIFY:`` in a question's text
script it per call (see below).

``flavour`` makes it say what it can take as llama.cpp does (``"llamacpp"``: ``GET /props``
with ``total_slots``, ``GET /slots``) or vLLM (``"vllm"``: ``GET /metrics`` with the requests
running and waiting for one of its ``capacity`` slots); by default it says nothing, as
mlx_lm.server.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests import llm_checks

QUESTION_RE = re.compile(r"Question:\n(.*?)(?:\n|\Z)", re.S)  # the question may end the message
FAULT_RE = re.compile(r"FAULT:([a-z0-9]+)")
# A key audit call (its system message asks for "Answer: N" alone) is answered by content:
# ``AUDIT:<spec>`` in the question's text gives each sample's answer in turn (a digit: that
# choice; ``x``: a reply no reader can read), e.g. ``AUDIT:223``; without it, ``audit_answer``
# when set, else the answer worked out as a sound model would (``llm_checks``).
AUDIT_SYSTEM_RE = re.compile(r"^You answer multiple-choice questions\.")
AUDIT_RE = re.compile(r"AUDIT:([0-9x]+)")
# A blind verifier call (its system message: "You check explanations…") likewise:
# ``VERIFY:<spec>`` in the question's text gives the reply of each call in turn (a digit: that
# choice; ``x``: a reply naming none), e.g. ``VERIFY:3``; without it, ``verify_answer`` when
# set, else the choice the explanation supports, read as a sound model would.
VERIFY_SYSTEM_RE = re.compile(r"^You check explanations of multiple-choice questions\.")
SUMMARY_SYSTEM_RE = re.compile(r"a short summary of a learner's study session")
VERIFY_RE = re.compile(r"VERIFY:([0-9x]+)")
# A step check call (its system message: "You check the steps…") likewise: ``STEP:<spec>``
# (a digit: "Step: N"; ``x``: a reply naming none); without it, ``step_answer`` when set, else
# "Step: none" (the test server's explanations hold no false step).
STEP_SYSTEM_RE = re.compile(r"^You check the steps of explanations")
STEP_RE = re.compile(r"STEP:([0-9x]+)")
# The default reply: long enough (QUALITY_MIN_CHARS is 40) not to be flagged too_short, and
# ending with the answer line the default prompt asks for (the README's first explanation: 2 + 2).
ANSWER = "Because 2 + 2 equals 4: two things and two more make four.\nAnswer: 4"
# A check's reply that names the first choice whatever it is asked (``--audit-answer``,
# ``--verify-answer``): a model that does not read the question.
FIXED_CHECK = "Answer: 1"


class LLMServer:
    """The server and its knobs; thread-safe counters of what it saw."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.delay = 0.0  # seconds per reply
        self.delay_jitter = 0.0  # each reply's delay is ``delay`` times 1 +/- up to this
        self.word_delay = 0.0  # seconds between two streamed words
        self.capacity = 0  # replies served at once (0: unlimited); others queue
        # What it says of itself beside the chat API: "" (nothing, like mlx_lm.server),
        # "llamacpp" (GET /props with total_slots, GET /slots: ``capacity`` slots; POST
        # /tokenize) or "vllm"
        # (GET /metrics: requests running and waiting for a slot).
        self.flavour = ""
        self.tokenize_delay = 0.0  # seconds its tokenizer (``/tokenize``) takes to answer
        # Served behind this path prefix too (a gateway's ``/team/x/v1``): it is cut from each
        # request's path before anything else looks at it. "": at the root only.
        self.path_prefix = ""
        self.waiting = 0  # requests queued for a slot (``capacity``)
        # vLLM mode: a ``/metrics`` page of the test's own, served as is in place of the gauges
        # (``+Inf``, ``NaN``, garbage, a page larger than any reader should hold); None: gauges.
        self.metrics_page: str | None = None
        self.metrics_status = 200  # vLLM mode: the status ``/metrics`` answers with
        self.fault = ""
        self.retry_after = "1"
        self.slow_seconds = 30.0
        self.model_id = "test-model"
        self.answer = ANSWER
        # A key audit (verifier) call's reply without AUDIT: (VERIFY:) in its text: this
        # fixed one (e.g. ``FIXED_CHECK``, blind to the question), or None: worked out.
        self.audit_answer: str | None = None
        self.audit_calls: Counter[str] = Counter()  # key audit calls per question
        self.verify_answer: str | None = None
        # A session summary's reply (None: a sound one, ``llm_checks.summary_reply``).
        self.summary_answer: str | None = None
        self.summary_prompts: list[str] = []
        self.verify_calls: Counter[str] = Counter()  # verifier calls per question
        # A test's own verifier: it reads a verifier call's user message and replies (in
        # place of VERIFY: and verify_answer).
        self.verify_reader: Callable[[str], str] | None = None
        self.step_answer: str | None = None  # a step check's fixed reply (None: STEP:, none)
        self.step_calls: Counter[str] = Counter()
        self.step_reader: Callable[[str], str] | None = None  # a test's own step checker
        # The usage it reports; ``cached_tokens`` None: no ``prompt_tokens_details`` at all.
        self.prompt_tokens = 42
        self.completion_tokens = 7
        self.cached_tokens: int | None = None
        # False: no usage chunk in a stream even when asked (llama-cpp-python's server).
        self.stream_usage = True
        self.ignore_stream = False  # answer with one JSON body even when asked to stream
        self.held = False  # each reply waits for a pass (``let_through``) before it starts
        self.last_authorization = ""
        self.bodies: list[dict] = []  # every chat request's JSON body, in order
        self.unknown_posts: list[str] = []  # the paths of POSTs it has no answer for
        self._lock = threading.Lock()
        self._slots: threading.Semaphore | None = None
        self._passes = threading.Semaphore(0)
        self.requests = 0
        self.active = 0
        self.max_active = 0
        self.per_question: Counter[str] = Counter()
        self.completed_per_question: Counter[str] = Counter()
        # (received, finished) monotonic times of chat requests: the idle time between
        # one reply and the next request is what a client costs a GPU.
        self.timeline: list[tuple[float, float]] = []
        # Per chat request: seconds its connection was open before the request came
        # (a client that connects ahead shows the length of the previous call here).
        self.connection_ages: list[float] = []
        # Monotonic times at which chat requests started being served, and at which a
        # reply's first text was sent (the gate's warm-first is judged by these).
        self.starts: list[float] = []
        self.first_tokens: list[float] = []
        self.connections = 0
        self._sockets: set[Any] = set()
        self._idle: set[Any] = set()  # connected, no request line yet
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LLMServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop as a server process would: stop listening and drop every open connection
        (including idle ones a client opened ahead)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        with self._lock:
            sockets, self._sockets = set(self._sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop_once_active(self, timeout: float = 10.0) -> threading.Thread:
        """Stop the server (see ``stop``) as soon as a chat request is being served; the
        watcher thread, already started, fails if none comes within ``timeout``."""

        def watch() -> None:
            deadline = time.monotonic() + timeout
            while self.stats()["active"] == 0:
                if time.monotonic() > deadline:
                    raise AssertionError("no request reached the server")
                time.sleep(0.005)
            self.stop()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        return thread

    def stop_idle_connections(self) -> None:
        """Close connections that carry no request (as servers with an idle timeout do)."""
        with self._lock:
            idle = set(self._idle)
        for sock in idle:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def let_through(self, replies: int = 1) -> None:
        """Let that many held replies go on (see ``held``), now or when they come."""
        self._passes.release(replies)

    def connections_open(self) -> int:
        with self._lock:
            return len(self._sockets)

    def configure(self, **values: Any) -> None:
        for key, value in values.items():
            if not hasattr(self, key) or key.startswith("_"):
                raise ValueError(f"unknown control {key!r}")
            setattr(self, key, value)
        if "capacity" in values:
            self._slots = threading.Semaphore(self.capacity) if self.capacity else None

    def vllm_metrics(self) -> str:
        """The scheduler gauges of vLLM's ``/metrics`` (``flavour = "vllm"``)."""
        if self.metrics_page is not None:
            return self.metrics_page
        with self._lock:
            running, waiting = self.active, self.waiting
        label = f'{{model_name="{self.model_id}"}}'
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{label} {float(running)}\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{label} {float(waiting)}\n"
        )

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "active": self.active,
                "max_active": self.max_active,
                "per_question": dict(self.per_question),
                "completed_per_question": dict(self.completed_per_question),
            }

    def idle_gaps_ms(self) -> list[float]:
        """Between consecutive requests that did not overlap: ms from a reply's end to
        the next request's arrival (``GET /_gaps``)."""
        with self._lock:
            spans = sorted(self.timeline)
        return [
            round((nxt[0] - cur[1]) * 1000, 3)
            for cur, nxt in itertools.pairwise(spans)
            if nxt[0] >= cur[1]
        ]

    def busy_share(self) -> float:
        """The share of time, from the first chat request to the last reply, during which
        at least one reply was being generated (``GET /_busy``): a GPU's utilisation."""
        with self._lock:
            spans = sorted(self.timeline)
        if not spans:
            return 0.0
        busy, (start, end) = 0.0, spans[0]
        first = start
        for nxt_start, nxt_end in spans[1:]:
            if nxt_start > end:
                busy += end - start
                start, end = nxt_start, nxt_end
            else:
                end = max(end, nxt_end)
        busy += end - start
        total = end - first
        return busy / total if total > 0 else 1.0

    def reset_stats(self) -> None:
        with self._lock:
            self.requests = self.max_active = self.connections = 0
            self.timeline.clear()
            self.connection_ages.clear()
            self.starts.clear()
            self.first_tokens.clear()
            self.per_question.clear()
            self.completed_per_question.clear()
            self.audit_calls.clear()
            self.verify_calls.clear()
            self.step_calls.clear()

    # ------------------------------------------------------------------ handler

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def setup(self) -> None:
                super().setup()
                self.accepted_at = time.monotonic()
                with server._lock:
                    server._sockets.add(self.connection)
                    server._idle.add(self.connection)
                    server.connections += 1

            def finish(self) -> None:
                with server._lock:
                    server._sockets.discard(self.connection)
                    server._idle.discard(self.connection)
                super().finish()

            def parse_request(self) -> bool:
                # The request line has just been read: a reply "in `delay` seconds"
                # counts from here, so the server's own parsing is not billed to clients.
                self.received_at = time.monotonic()
                with server._lock:
                    server._idle.discard(self.connection)
                parsed = super().parse_request()
                prefix = server.path_prefix
                if parsed and prefix and self.path.startswith(prefix + "/"):
                    self.path = self.path[len(prefix) :]
                return parsed

            def do_GET(self) -> None:
                if self.path == "/_stats":
                    self._json(200, server.stats())
                elif self.path == "/_gaps":
                    self._json(200, server.idle_gaps_ms())
                elif self.path == "/_busy":
                    self._json(200, server.busy_share())
                elif self.path == "/health":
                    self._json(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": server.model_id}]})
                elif server.flavour == "llamacpp" and self.path == "/props":
                    self._json(200, {"total_slots": server.capacity or 1, "build_info": "test"})
                elif server.flavour == "llamacpp" and self.path == "/slots":
                    self._json(200, [{"id": i} for i in range(server.capacity or 1)])
                elif server.flavour == "vllm" and self.path == "/metrics":
                    self._text(server.metrics_status, server.vllm_metrics())
                else:
                    self._text(404, "Not Found")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path == "/_control":
                    try:
                        server.configure(**json.loads(raw or b"{}"))
                    except (ValueError, TypeError) as exc:
                        self._json(400, {"error": str(exc)})
                        return
                    self._json(200, {"ok": True})
                    return
                if self.path == "/_reset":
                    server.reset_stats()
                    self._json(200, {"ok": True})
                    return
                if server.flavour == "llamacpp" and self.path == "/tokenize":
                    # llama.cpp's tokenizer; here a token is a character, which no text chunk
                    # count gives.
                    time.sleep(server.tokenize_delay)
                    self._json(200, {"tokens": list(range(len(json.loads(raw)["content"])))})
                    return
                if self.path != "/v1/chat/completions":
                    server.unknown_posts.append(self.path)
                    self._text(404, "Not Found")
                    return
                try:
                    body = json.loads(raw)
                    prompt = body["messages"][-1]["content"]
                except (ValueError, KeyError, IndexError, TypeError):
                    self._json(400, {"error": "malformed request"})
                    return
                server.last_authorization = self.headers.get("Authorization", "")
                server.bodies.append(body)
                with server._lock:
                    server.connection_ages.append(self.received_at - self.accepted_at)
                server._serve_chat(self, body, prompt, self.received_at)

            def _json(self, status: int, data: Any, headers: dict | None = None) -> None:
                payload = json.dumps(data).encode()
                getattr(self, "finished", lambda: None)()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def _text(self, status: int, text: str) -> None:
                payload = text.encode()
                getattr(self, "finished", lambda: None)()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    def _serve_chat(self, h: Any, body: dict, prompt: str, received_at: float) -> None:
        match = QUESTION_RE.search(prompt)
        question = match.group(1).strip() if match else prompt[:60]
        fault_match = FAULT_RE.search(prompt)
        fault = fault_match.group(1) if fault_match else self.fault
        slots = self._slots
        if slots is not None and not slots.acquire(blocking=False):
            with self._lock:
                self.waiting += 1
            slots.acquire()
            with self._lock:
                self.waiting -= 1
            received_at = time.monotonic()  # a queued request's time starts with its slot
        with self._lock:
            self.requests += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.per_question[question] += 1
            self.starts.append(received_at)
        open_ = [True]

        def finished() -> None:
            # Called just before the last bytes go out: a client can never see the end
            # of a reply while the server still counts it as active.
            with self._lock:
                if not open_[0]:
                    return
                open_[0] = False
                self.active -= 1
                self.timeline.append((received_at, time.monotonic()))
            if slots is not None:
                slots.release()

        h.finished = finished
        try:
            self._reply(h, body, fault, received_at)
            with self._lock:
                self.completed_per_question[question] += 1
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (timeout, shutdown): stop "generating"
        finally:
            finished()

    def _content(self, body: dict) -> str:
        """The reply's text: ``answer``, or for a key audit or verifier call its answer."""
        messages = body.get("messages") or []
        system = (messages[0].get("content", "") if messages else "") or ""
        prompt = messages[-1].get("content", "") if messages else ""
        if SUMMARY_SYSTEM_RE.search(system):
            with self._lock:
                self.summary_prompts.append(prompt)
            if self.summary_answer is not None:
                return self.summary_answer
            return llm_checks.summary_reply(prompt)
        if AUDIT_SYSTEM_RE.search(system):
            calls, spec_re, fixed = self.audit_calls, AUDIT_RE, self.audit_answer
            default = fixed if fixed is not None else llm_checks.audit_reply(prompt)
        elif VERIFY_SYSTEM_RE.search(system):
            calls, spec_re, fixed = self.verify_calls, VERIFY_RE, self.verify_answer
            default = fixed if fixed is not None else llm_checks.verify_reply(prompt)
        elif STEP_SYSTEM_RE.search(system):
            calls, spec_re, fixed = self.step_calls, STEP_RE, self.step_answer
            default = fixed if fixed is not None else "Step: none"
        else:
            return self.answer
        if spec_re is VERIFY_RE and self.verify_reader is not None:
            return self.verify_reader(prompt)
        if spec_re is STEP_RE and self.step_reader is not None:
            return self.step_reader(prompt)
        match = QUESTION_RE.search(prompt)
        question = match.group(1).strip() if match else prompt[:60]
        with self._lock:
            turn = calls[question]
            calls[question] += 1
        spec = spec_re.search(prompt)
        if spec is None:
            return default
        said = spec.group(1)[turn % len(spec.group(1))]
        label = "Step" if spec_re is STEP_RE else "Answer"
        return "I cannot tell." if said == "x" else f"{label}: {said}"

    def _reply(self, h: Any, body: dict, fault: str, received_at: float) -> None:
        if fault == "hangup":
            time.sleep(max(0.0, received_at + self.delay - time.monotonic()))
            h.finished()
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault in ("500", "503", "400"):
            h._json(int(fault), {"error": f"injected {fault}"})
            return
        if fault == "429":
            h._json(429, {"error": "too many requests"}, {"Retry-After": self.retry_after})
            return
        if fault == "404":
            h._json(404, {"error": f"model {body.get('model')!r} not found"})
            return
        delay = self.delay * (1 + random.uniform(-self.delay_jitter, self.delay_jitter))
        deadline = received_at + (self.slow_seconds if fault == "slow" else delay)

        def generate() -> None:
            """ "Generation" ends at the deadline, or at once when the client closes the
            connection (mlx_lm.server stops generating for a closed stream)."""
            sock = h.connection
            held = self.held
            while held or deadline > time.monotonic():
                wait = 0.05 if held else min(deadline - time.monotonic(), 0.05)
                readable, _, _ = select.select([sock], [], [], max(wait, 0.0))
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    raise ConnectionResetError("the client closed the stream")
                if held and self._passes.acquire(blocking=False):
                    held = False

        content: str | None = None if fault == "null" else self._content(body)
        # "filter": the server's content filter ended it; "noreason": no finish_reason at all.
        finish = {"length": "length", "filter": "content_filter", "noreason": None}.get(
            fault, "stop"
        )
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        if not body.get("stream") or self.ignore_stream:
            generate()
            if fault == "malformed":
                h._text(200, '{"choices": [ {"message": ')
                return
            h._json(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": body.get("model") or "default_model",
                    "choices": [
                        {
                            "index": 0,
                            "message": (
                                {"role": "assistant", "content": "", "reasoning_content": content}
                                if fault == "reasoning"
                                else {"role": "assistant", "content": content}
                            ),
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        # Like mlx_lm.server: status, headers and a keep-alive comment go out at once,
        # the tokens when they are generated.
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        h.wfile.write(b": keepalive 1/2\n\n")
        generate()
        model = body.get("model") or "default_model"

        def event(data: Any) -> None:
            h.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            return {
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        if fault == "malformed":
            h.finished()
            h.wfile.write(b"data: {not json\n\n")
            return
        words = (content or "").split(" ") if content is not None else []
        if content is None:
            event(chunk({"role": "assistant", "content": None}))
        # A reasoning server streams its text as ``reasoning_content``, ``content`` empty.
        field = "reasoning_content" if fault == "reasoning" else "content"
        for i, word in enumerate(words):
            if i and self.word_delay:
                time.sleep(self.word_delay)  # tokens come one by one
            if i == 0:
                with self._lock:
                    self.first_tokens.append(time.monotonic())  # before the client can see it
            text = word if i == 0 else " " + word
            delta = {"role": "assistant", field: text}
            if field != "content":
                delta["content"] = ""
            event(chunk(delta))
            if fault == "drop" and i == 1:
                h.finished()
                h.wfile.flush()
                h.connection.shutdown(2)  # cut the connection mid-reply
                return
        event(chunk({"role": "assistant"}, finish))
        if self.stream_usage and body.get("stream_options", {}).get("include_usage"):
            event(
                {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
            )
        h.finished()
        h.wfile.write(b"data: [DONE]\n\n")


class LLMServerProcess:
    """The same server in a process of its own, as a real LLM server would be: the
    client being measured does not share an interpreter (and its GIL) with it."""

    def __init__(self, **knobs: Any) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.llm_server", "--port", "0"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()
        if not line.startswith("port="):
            self._proc.kill()
            raise RuntimeError(f"the test LLM server did not start: {line!r}")
        self.port = int(line.split("=", 1)[1])
        self.url = f"http://127.0.0.1:{self.port}/v1"
        if knobs:
            self.configure(**knobs)

    def _call(self, path: str, data: Any = None) -> Any:
        body = None if data is None else json.dumps(data).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body)
        with urllib.request.urlopen(request, timeout=10) as reply:
            return json.load(reply)

    def configure(self, **values: Any) -> None:
        self._call("/_control", values)

    def reset_stats(self) -> None:
        self._call("/_reset", {})

    def stats(self) -> dict[str, Any]:
        return self._call("/_stats")

    def idle_gaps_ms(self) -> list[float]:
        return self._call("/_gaps")

    def busy_share(self) -> float:
        return self._call("/_busy")

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--capacity", type=int, default=0)
    for option, calls in (("--audit-answer", "key audit"), ("--verify-answer", "verifier")):
        parser.add_argument(
            option,
            metavar="REPLY",
            nargs="?",
            const=FIXED_CHECK,
            help=f"reply to every {calls} call with REPLY (alone: {FIXED_CHECK!r}) instead "
            "of the answer a sound model would give",
        )
    args = parser.parse_args()
    server = LLMServer(port=args.port)
    server.configure(
        delay=args.delay,
        capacity=args.capacity,
        audit_answer=args.audit_answer,
        verify_answer=args.verify_answer,
    )
    print(f"port={server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()


if __name__ == "__main__":
    main()
