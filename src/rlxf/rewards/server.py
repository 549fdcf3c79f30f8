"""A small HTTP reward server: any configured reward behind ``POST /score`` (``rlxf serve-reward``).

Request ``{"prompts": [...], "responses": [...], "metadata": [{...}, ...]}``; reply
``{"scores": [...], "components": {name: [...]}}``, or status 400/500 with ``{"error": "..."}``.
``GET /health`` answers ``{"ok": true, "reward": NAME}``. Stdlib only (``http.server``), one thread per
request; it binds to 127.0.0.1 unless told otherwise — put it behind your own network controls.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlxf.rewards.base import Reward, call_reward


def make_handler(reward: Reward, name: str) -> type[BaseHTTPRequestHandler]:
    class RewardHandler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") == "/health":
                self._reply(200, {"ok": True, "reward": name})
            else:
                self._reply(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/score":
                self._reply(404, {"error": f"no route {self.path}"})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompts, responses = request["prompts"], request["responses"]
                metadata = request.get("metadata") or [{} for _ in responses]
            except (ValueError, KeyError, TypeError) as err:
                self._reply(400, {"error": f"bad request: {err}"})
                return
            try:
                out = call_reward(reward, prompts, responses, metadata, name)
            except Exception as err:  # noqa: BLE001 - the client gets the failure, the server lives on
                self._reply(500, {"error": f"reward {name!r} raised {type(err).__name__}: {err}"})
                return
            self._reply(200, {"scores": out.scores, "components": out.components})

        def log_message(self, format: str, *args) -> None:  # quiet by default
            pass

    return RewardHandler


def make_reward_server(reward: Reward, name: str, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A bound server (``port=0``: any free port; read ``server.server_address``); call ``serve_forever``."""
    server = ThreadingHTTPServer((host, port), make_handler(reward, name))
    server.daemon_threads = True
    return server


def serve_in_background(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="reward-server", daemon=True)
    thread.start()
    return thread
