"""A small HTTP proxy on 127.0.0.1 that forwards to a real server and makes it misbehave on request, for testing the
api backend: a status with headers (429 with Retry-After, 500), a dropped connection, a reply slower than the client's
timeout, a reply that is not JSON, a reply whose text is null, one from another model, one that ignores the stop and
runs to megabytes, an error that echoes the request's Authorization header, a redirect to another port. It counts the
completion requests it forwarded and answered, remembers the Authorization headers it saw, and records each fault
it served with the request it met, so that a test asserts the fault fired where it meant it to."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FaultProxy:
    """``with FaultProxy(upstream_port) as proxy:`` then ``proxy.url``; ``proxy.faults.append(fault)`` queues a
    fault for the next completion request, one request each: ("status", code, headers), ("drop",), ("slow", s),
    ("badjson",), ("nulltext",), ("model", id), ("huge", characters), ("echo_auth",), ("redirect", port).
    ``proxy.answer_as = id`` makes every completion reply name that model; ``proxy.max_in_flight = k`` answers 429
    to a completion request that arrives while k are in flight."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.faults: deque = deque()
        self.forwarded = 0  # completion requests the server answered through the proxy
        self.answer_as: str | None = None
        self.authorizations: list[str] = []
        self.bodies: list[dict] = []  # the completion requests' bodies, as JSON
        self.max_in_flight: int | None = None  # above this many completion requests at once, answer 429
        self.in_flight = 0
        self.refused = 0
        self.most_in_flight = 0
        self.failed_at: float | None = None  # when a status fault was last answered (time.monotonic)
        self.served: list[tuple[tuple, str]] = []  # each fault as it met a request: (fault, the request's prompt)
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.proxy = self
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def prompt_of(body: dict) -> str:
    """What a completion request asked: its prompt, or its chat messages as text."""
    return str(body.get("prompt", body.get("messages")))


def rewritten(data: bytes, fault, answer_as: str | None) -> bytes:
    """The server's completion reply as the misbehaving server sends it."""
    kind = fault[0] if fault else None
    if kind not in ("nulltext", "model", "huge") and answer_as is None:
        return data
    reply = json.loads(data)
    choice = reply["choices"][0]
    field = "text" if "text" in choice else None
    if kind == "nulltext":
        if field:
            choice["text"] = None
        else:
            choice["message"]["content"] = None
    elif kind == "huge":
        tail = " and more" + "\nmore lines " * (fault[1] // 12)
        if field:
            choice["text"] += tail
        else:
            choice["message"]["content"] += tail
    if kind == "model":
        reply["model"] = fault[1]
    elif answer_as is not None:
        reply["model"] = answer_as
    return json.dumps(reply).encode()


class Handler(BaseHTTPRequestHandler):
    """The proxy's reply to one request: forwarded upstream, or the fault queued for it."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.forward(None)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self.forward(self.rfile.read(length))

    @property
    def proxy(self) -> FaultProxy:
        return self.server.proxy

    def forward(self, body):
        proxy = self.proxy
        fault = None
        with proxy.lock:
            proxy.authorizations.append(self.headers.get("Authorization", ""))
        if body is not None and "completions" in self.path:
            with proxy.lock:
                proxy.bodies.append(json.loads(body))
                busy = proxy.max_in_flight is not None and proxy.in_flight >= proxy.max_in_flight
                proxy.refused += busy
                if not busy:
                    fault = proxy.faults.popleft() if proxy.faults else None
                    if fault is not None:
                        proxy.served.append((fault, prompt_of(proxy.bodies[-1])))
                    proxy.in_flight += 1
                    proxy.most_in_flight = max(proxy.most_in_flight, proxy.in_flight)
            if busy:
                self.reply(429, b'{"error": {"message": "too many requests"}}', {"Retry-After": "0.2"})
                return
            try:
                self.answer(body, fault)
            finally:
                with proxy.lock:
                    proxy.in_flight -= 1
            return
        self.answer(body, fault)

    def answer(self, body, fault):
        if fault and self.misbehave(fault):
            return
        self.forward_upstream(body, fault)

    def misbehave(self, fault) -> bool:
        """Reply as the fault says where it replies in the server's stead (True); a slow fault only waits."""
        kind = fault[0]
        if kind == "echo_auth":
            echoed = f'{{"error": {{"message": "bad header {self.headers.get("Authorization", "")}"}}}}'
            self.reply(500, echoed.encode(), {})
        elif kind == "redirect":
            self.reply(307, b"", {"Location": f"http://127.0.0.1:{fault[1]}{self.path}"})
        elif kind == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif kind == "status":
            self.reply(fault[1], b'{"error": {"message": "injected"}}', fault[2])
            self.proxy.failed_at = time.monotonic()
        elif kind == "badjson":
            self.reply(200, b'{"id": "x", "choices": [', {})
        elif kind == "trickle":  # one byte a second of a reply that never ends (bounded)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                for _ in range(fault[1]):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(1)
            except OSError:
                pass  # the client gave up
        else:
            if kind == "slow":
                time.sleep(fault[1])
            return False
        return True

    def forward_upstream(self, body, fault):
        proxy = self.proxy
        upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=300)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
        except OSError:
            self.reply(502, b'{"error": {"message": "upstream down"}}', {})
            return
        finally:
            upstream.close()
        if body is not None and "completions" in self.path and response.status == 200:
            with proxy.lock:
                proxy.forwarded += 1
            data = rewritten(data, fault, proxy.answer_as)
        self.reply(response.status, data, {"Content-Type": response.getheader("Content-Type", "")})

    def reply(self, status, data, headers):
        try:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (a timeout): nothing to tell it
