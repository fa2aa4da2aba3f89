"""`stepbill serve`: run the web explorer on uvicorn (the `web` extra), on 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import sys
import threading
import webbrowser

from stepbill.errors import StepbillError

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def serve(host: str = "127.0.0.1", port: int = 8000, open_browser: bool = False) -> None:
    """Serve the page and the API until interrupted; say where, and warn when reachable beyond this machine."""
    try:
        import uvicorn

        from stepbill.web.app import create_app
    except ImportError as exc:
        raise StepbillError(f"stepbill serve needs the web extra ({exc.name} missing): "
                            "pip install 'stepbill[web]'") from None
    if not 0 <= port <= 65535:
        raise StepbillError(f"--port must lie in 0..65535, got {port}")
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    if host in LOOPBACK:
        print(f"stepbill serve: {url} (this machine only; Ctrl-C stops)", file=sys.stderr)
    else:
        print(f"stepbill serve: listening on {host}:{port} because --host says so: reachable from other machines, "
              "with no authentication (Ctrl-C stops)", file=sys.stderr)
    if open_browser:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")
