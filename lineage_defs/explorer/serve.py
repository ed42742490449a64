"""``lineage-defs docs serve``: build the site into a folder and serve it on 127.0.0.1 (Python's http.server)."""

from __future__ import annotations

import functools
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from lineage_defs.errors import RunError

HOST = "127.0.0.1"  # the explorer shows the whole plan: never on another interface


class _Quiet(SimpleHTTPRequestHandler):
    """Static files, no request log (a column's walk fetches many small JSON files)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")  # a rebuild shows at once
        super().end_headers()


def serve(site: Path, port: int) -> int:
    """Serve ``site`` until interrupted; prints the URL once listening."""
    handler = functools.partial(_Quiet, directory=str(site))
    try:
        server = ThreadingHTTPServer((HOST, port), handler)
    except OSError as e:
        raise RunError(f"cannot listen on {HOST}:{port}: {e.strerror}", fix="pick another port with --port") from e
    server.daemon_threads = True
    print(f"lineage explorer: http://{HOST}:{server.server_address[1]}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print("stopped", file=sys.stderr)
    return 0
