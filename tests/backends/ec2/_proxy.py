"""An HTTP relay in front of moto: counts EC2 actions on the wire and fails some on demand.

Counting happens outside the GAHP, so "one DescribeInstances per poll" is checked on
what actually reached the server. Failures are EC2's own error documents (a 503
RequestLimitExceeded, as EC2 throttles), so botocore's retry logic sees the real thing.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import threading
import urllib.parse
from dataclasses import dataclass

_ERROR = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>proxy-{n}</RequestID></Response>"
)


@dataclass
class Fault:
    """Answer `action` with an error, `times` times (None: always)."""

    action: str
    status: int
    code: str
    message: str
    times: int | None = None


class Relay:
    """A loopback HTTP server forwarding to `upstream`."""

    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.counts: collections.Counter[str] = collections.Counter()
        #: Every request's query parameters, in order: (action, {name: value}).
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.faults: list[Fault] = []
        self._lock = threading.Lock()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                relay._handle(self)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def fail(
        self, action: str, code: str, message: str, status: int = 503, times: int | None = None
    ) -> None:
        """From now on, answer `action` with this error."""
        with self._lock:
            self.faults.append(Fault(action, status, code, message, times))

    def _fault(self, action: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.action == action and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _handle(self, request: http.server.BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length)
        query = dict(urllib.parse.parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        action = query.get("Action", "?")
        with self._lock:
            self.counts[action] += 1
            self.requests.append((action, query))
            n = sum(self.counts.values())
        fault = self._fault(action)
        if fault is not None:
            text = _ERROR.format(code=fault.code, message=fault.message, n=n).encode()
            self._answer(request, fault.status, [("Content-Type", "text/xml")], text)
            return
        upstream = http.client.HTTPConnection(*self._upstream, timeout=60)
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() != "host"}
            upstream.request("POST", request.path, body=body, headers=headers)
            answer = upstream.getresponse()
            data = answer.read()
            kept = [
                (k, v)
                for k, v in answer.getheaders()
                if k.lower()
                not in ("content-length", "connection", "transfer-encoding", "server", "date")
            ]
            self._answer(request, answer.status, kept, data)
        finally:
            upstream.close()

    @staticmethod
    def _answer(
        request: http.server.BaseHTTPRequestHandler,
        status: int,
        headers: list[tuple[str, str]],
        data: bytes,
    ) -> None:
        request.send_response(status)
        for name, value in headers:
            request.send_header(name, value)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
