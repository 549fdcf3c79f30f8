"""A loopback OpenAI-compatible ``/chat/completions`` server for judge tests (a real HTTP server, no mocks)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def chat_server(reply: Callable[[str, dict], str | None], headers: list[dict] | None = None) -> Iterator[str]:
    """Serves ``reply(path, body) -> content`` (None: HTTP 500) on 127.0.0.1; yields the base URL (``.../v1``).
    Each request's headers are appended to ``headers`` when given."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            if headers is not None:
                headers.append(dict(self.headers))
            content = reply(self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            if content is None:
                self.send_response(500)
                self.end_headers()
                return
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
