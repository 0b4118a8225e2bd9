"""run_process stops what it started even when the server ignores SIGTERM, as ik_llama.cpp's did once."""

from __future__ import annotations

import time

from tests.support.servers import free_port, run_process

# A server that answers /health and, like ik_llama.cpp's with busy HTTP threads, ignores SIGTERM.
DEAF = """
import http.server, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_a_server_deaf_to_sigterm_is_killed_after_the_grace() -> None:
    port = free_port()
    with run_process(["python", "-c", DEAF, str(port)], health_path="/health", port=port, grace=1) as (
        _,
        proc,
    ):
        started = time.monotonic()
    assert proc.returncode == -9  # SIGKILL: SIGTERM alone left it running
    assert time.monotonic() - started < 6
