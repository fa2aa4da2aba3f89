"""The ASGI app of `stepbill serve`: a JSON API over the library and one page (static files of this package).

Routes (GET takes options as a query string, POST as a JSON object; option names are the CLI's, without `--`):
  /api/bill       `stepbill bill --json`          /api/recompute  `stepbill recompute --json`
  /api/view       the page's state: the bill, its time lines in full and the equivalent CLI command
  /api/models     `stepbill models --json`        /api/gpus       the GPU catalog
  /api/lab/TOPIC  `stepbill lab TOPIC --json`     /api/choices    names the pickers offer
  /api/plan       `stepbill plan --json` (searched for at most 8 s) + the scatter's points
Safety: no route reads a file path; bodies over 1 MiB are refused (413); bad input is a 400 whose `error` is the
CLI's one-line message; a computation is abandoned after REQUEST_SECONDS (503); nothing is kept between requests
(constant answers — models, lab topics at their defaults — are cached).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stepbill.errors import StepbillError
from stepbill.web import api

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a config.json and its options
REQUEST_SECONDS = 10.0  # a request's computation is abandoned after this long (a budget policy's first solve is among the slowest)
STATIC_FILES = {"/": ("index.html", "text/html; charset=utf-8"),
                "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
                "/static/charts.js": ("charts.js", "text/javascript; charset=utf-8"),
                "/static/style.css": ("style.css", "text/css; charset=utf-8")}


def _error(status: int, message: str) -> JSONResponse:
    """One line, always: the CLI's message for bad input."""
    return JSONResponse({"error": " ".join(str(message).split())}, status_code=status)


class BodyLimit:
    """Refuses request bodies over `limit` bytes with 413 before the route reads them (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body is larger than {self.limit:,} bytes"
        for key, value in scope.get("headers", []):
            if key == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                await _error(413, message)(scope, receive, send)
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(message)
            return msg

        try:
            await self.app(scope, limited, send)
        except _TooLarge as exc:
            await _error(413, str(exc))(scope, receive, send)


class _TooLarge(Exception):
    pass


async def _options(request: Request) -> dict[str, Any]:
    """The request's options: the query string, then (POST) the JSON object in the body on top."""
    given: dict[str, Any] = dict(request.query_params)
    if request.method == "POST":
        body = await request.body()
        if body.strip():
            try:
                data = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise StepbillError(f"request body is not valid JSON: {getattr(exc, 'msg', exc)}") from None
            if not isinstance(data, dict):
                raise StepbillError("request body must be a JSON object of options")
            given.update(data)
    return given


async def _compute(fn: Callable[..., Any], *args: Any) -> Any:
    """Run `fn` in a worker thread, abandoning it after REQUEST_SECONDS."""
    with anyio.fail_after(REQUEST_SECONDS):
        return await anyio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)


def create_app() -> FastAPI:
    """The app: API routes, the page, one-line errors."""
    app = FastAPI(title="stepbill", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(StepbillError)
    async def _bad_input(_: Request, exc: StepbillError) -> JSONResponse:
        return _error(400, str(exc))

    @app.exception_handler(TimeoutError)
    async def _too_slow(_: Request, exc: TimeoutError) -> JSONResponse:
        return _error(503, f"computation took longer than {REQUEST_SECONDS:g} s and was abandoned")

    @app.exception_handler(OverflowError)
    async def _out_of_range(_: Request, exc: OverflowError) -> JSONResponse:
        return _error(400, f"a number is out of range: {exc}")

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:  # a bug, still one line (and never a traceback)
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    def route(path: str, fn: Callable[[dict[str, Any]], Any]) -> None:
        async def endpoint(request: Request) -> JSONResponse:
            start = time.perf_counter()
            response = JSONResponse(await _compute(fn, await _options(request)))
            # the server's own share of the latency (parse, compute, JSON), for benchmarks/serve_latency.py
            response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - start) * 1e3:.2f}"
            return response

        app.add_api_route(path, endpoint, methods=["GET", "POST"], name=path)

    route("/api/bill", api.bill_json)
    route("/api/view", api.view_json)
    route("/api/recompute", api.recompute_json)

    @app.get("/api/models")
    async def models() -> JSONResponse:
        return JSONResponse(await _compute(api.models_json))

    @app.get("/api/gpus")
    async def gpus() -> JSONResponse:
        return JSONResponse(api.gpus_json())

    @app.get("/api/choices")
    async def choices() -> JSONResponse:
        return JSONResponse(await _compute(api.choices_json))

    @app.get("/api/lab/{topic}")
    async def lab(topic: str) -> JSONResponse:
        return JSONResponse(await _compute(api.lab_json, topic))

    route("/api/plan", api.plan_json)

    static = resources.files("stepbill.web") / "static"
    for path, (name, media_type) in STATIC_FILES.items():
        content = (static / name).read_bytes()

        def serve(content: bytes = content, media_type: str = media_type) -> Response:
            return Response(content, media_type=media_type, headers={"Cache-Control": "no-cache"})

        app.add_api_route(path, serve, methods=["GET"], include_in_schema=False)

    app.add_middleware(BodyLimit)
    return app
