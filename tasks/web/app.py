"""The web view's Starlette app: pages, the cancel form and the live updates of a run.

Blocking store reads run on threads; a store failure is a 503 page naming the code, and any
other failure a 500 page: never exception text, a URL or a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from boundary import StoreError, ToolOutcome
from boundary.flow import Flow
from boundary.models import is_safe_id
from boundary.store.base import CanonicalStore
from tasks.views import printable
from tasks.web import jobs_page, pages
from tasks.web.auth import Csrf, TokenGuard
from tasks.web.feed import RunFeeds, TooManyStreams
from tasks.web.headers import SecurityHeaders

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent

#: Ends a PROJECTING call (``ToolBoundary.cancel``): ``(run_id, tool_call_id) -> outcome``.
Canceller = Callable[[str, str], ToolOutcome]
#: A tool's time limit in seconds (its ``ToolSpec.timeout_s``), ``None`` when not known.
TimeLimit = Callable[[str], float | None]

#: Characters of a ``?tool=`` filter (a tool name has at most 128): longer is refused (400).
TOOL_FILTER_CHARS = 128


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["duration"] = _duration
    # Tool output may carry terminal escapes or bidi overrides: shown escaped.
    env.filters["printable"] = lambda text: None if text is None else printable(str(text))
    env.filters["q"] = lambda text: quote(str(text), safe="")
    return env


class WebView:
    """The app's state: the store, what cancels, the live feeds, the CSRF key."""

    def __init__(
        self,
        store: CanonicalStore,
        *,
        canceller: Canceller | None,
        show_raw: bool,
        store_label: str,
        flow: Flow | None = None,
        time_limit: TimeLimit | None = None,
    ) -> None:
        self.store = store
        self.time_limit = time_limit
        self.flow = flow
        self.canceller = canceller
        self.show_raw = show_raw
        self.store_label = store_label
        self.csrf = Csrf()
        self.templates = _templates()
        self.feeds = RunFeeds(lambda run_id: pages.live_rows(store, run_id))

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(
            store=self.store_label, show_raw=self.show_raw, csrf=self.csrf, **context
        )
        return HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})

    def problem(self, status: int, title: str, text: str) -> HTMLResponse:
        return self.page("problem.html", status=status, title=title, text=text)

    async def read(self, read: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(read)

    # --- pages --------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        status = request.query_params.get("status") or None
        tool = (request.query_params.get("tool") or "").strip() or None
        if tool is not None and len(tool) > TOOL_FILTER_CHARS:
            return self.problem(
                400,
                "Bad filter",
                f"A tool name has at most {TOOL_FILTER_CHARS} characters (the filter was not "
                "applied).",
            )
        if status not in (None, *pages.STATUS_FILTERS):
            status = None
        query = pages.RunsQuery(status=status, tool=tool)
        page = await self.read(lambda: pages.runs_page(self.store, query))
        return self.page("runs.html", title="Runs", statuses=pages.STATUS_FILTERS, **page)

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        page = await self.read(lambda: pages.run_page(self.store, run_id))
        if page is None:
            return self.problem(404, "No such run", "No live run has this id (RECORD_NOT_FOUND).")
        return self.page(
            "run.html", title=f"Run {run_id}", cancelled=cancel_notice(request), **page
        )

    async def call(self, request: Request) -> Response:
        run_id, call_id = request.path_params["run_id"], request.path_params["tool_call_id"]
        page = await self.read(
            lambda: pages.call_page(self.store, run_id, call_id, show_raw=self.show_raw)
        )
        if page is None:
            return self.problem(
                404, "No such call", "No live call has these ids (RECORD_NOT_FOUND)."
            )
        limit = self.time_limit(page["record"].tool_name) if self.time_limit else None
        return self.page(
            "call.html",
            title=f"Call {call_id}",
            run_id=run_id,
            time_limit_s=limit,
            cancelled=cancel_notice(request),
            **page,
        )

    async def limits(self, request: Request) -> Response:
        flow = self.flow
        page = await self.read(lambda: pages.limits_page(flow))
        return self.page("limits.html", title="Limits", **page)

    async def cancel(self, request: Request) -> Response:
        run_id, call_id = request.path_params["run_id"], request.path_params["tool_call_id"]
        if not (is_safe_id(run_id) and is_safe_id(call_id)):
            return self.problem(404, "No such call", "No live call has these ids.")
        form = dict(parse_qsl((await request.body()).decode("utf-8", errors="replace")))
        if not self.csrf.valid(cancel_action(run_id, call_id), form.get("csrf", "")):
            return self.problem(
                403,
                "Refused",
                "The form is out of date (CSRF check): reload the page and try again.",
            )
        if self.canceller is None:
            return self.problem(501, "Not available", "This server cannot cancel calls.")
        canceller = self.canceller
        outcome = await self.read(lambda: canceller(run_id, call_id))
        back = f"/runs/{quote(run_id, safe='')}"
        if form.get("back") == "call":
            back += f"/calls/{quote(call_id, safe='')}"
        code = outcome.error_code.value if outcome.error_code else outcome.status.value
        return RedirectResponse(
            f"{back}?cancel={quote(code)}&call={quote(call_id, safe='')}#cancel-notice",
            status_code=303,
        )

    async def not_found(self, request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        if status == 405:
            return self.problem(405, "Method not allowed", "This page does not take that method.")
        if status != 404:
            return self.problem(status, "Refused", "This request was refused.")
        return self.problem(404, "Not found", "There is no page at this address.")

    async def favicon(self, request: Request) -> Response:
        return Response(status_code=204, headers={"cache-control": "max-age=86400"})

    async def events(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        if not is_safe_id(run_id):
            return Response(status_code=404)
        try:
            stream: AsyncIterator[str] = await self.feeds.stream(run_id)
        except TooManyStreams:
            return Response("too many live views open", status_code=503)
        return StreamingResponse(
            stream,
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )


class NoTracebacks:
    """Starlette re-raises a failed request's exception after its 500 page, for the server to
    log with its traceback and text (which may hold a URL or a payload): here it ends, logged
    by its type only."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            logger.error("web view %s failed: %s", scope.get("path"), type(exc).__name__)
            if started or scope["type"] != "http":
                return
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": b"internal error"})


def cancel_action(run_id: str, tool_call_id: str) -> str:
    return f"cancel:{run_id}:{tool_call_id}"


#: What a cancel ended with (``?cancel=CODE`` after the form), as a sentence; any other code
#: is an ERROR the call had ended with before the cancel.
CANCEL_NOTICES = {
    "CANCELLED": "was cancelled: it ended ERROR CANCELLED.",
    "READY": "had already ended READY: nothing was cancelled.",
}


def cancel_notice(request: Request) -> dict[str, str] | None:
    """What the page says after its Cancel form: ``{"call", "text"}``; ``None``: no cancel."""
    code = request.query_params.get("cancel")
    call = request.query_params.get("call") or ""
    if not code or not is_safe_id(call):
        return None
    if code in CANCEL_NOTICES:
        return {"call": call, "text": CANCEL_NOTICES[code]}
    if code.isupper() and code.replace("_", "").isalpha() and len(code) <= 64:
        return {"call": call, "text": f"had already ended ERROR {code}: nothing was cancelled."}
    return None


def create_app(
    store: CanonicalStore,
    *,
    canceller: Canceller | None = None,
    show_raw: bool = False,
    token: str | None = None,
    store_label: str = "",
    flow: Flow | None = None,
    time_limit: TimeLimit | None = None,
) -> ASGIApp:
    """The web view over ``store``; with ``token``, every request must bring it. ``flow``:
    the flow control whose limited tools the limits page lists; ``time_limit``: the tools'
    time limits, for a call's page."""
    view = WebView(
        store,
        canceller=canceller,
        show_raw=show_raw,
        store_label=store_label,
        flow=flow,
        time_limit=time_limit,
    )

    async def store_failed(request: Request, exc: Exception) -> Response:
        return view.problem(
            503, "Store unavailable", "The store did not answer (STORE_UNAVAILABLE)."
        )

    async def failed(request: Request, exc: Exception) -> Response:
        # Logged (by its type only) by NoTracebacks, which the exception reaches next.
        return view.problem(
            500, "Internal error", "This page failed; the server's log has its type."
        )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await view.feeds.aclose()

    app = Starlette(
        routes=[
            Route("/", view.runs),
            Route("/favicon.ico", view.favicon),
            Route("/limits", view.limits),
            Route("/jobs", jobs_page.jobs),
            Route("/jobs/{job_id}", jobs_page.job),
            Route("/jobs/{job_id}/events", jobs_page.job_events),
            Route("/jobs/{job_id}/cancel", jobs_page.cancel_job, methods=["POST"]),
            Route("/runs/{run_id}", view.run),
            Route("/runs/{run_id}/events", view.events),
            Route("/runs/{run_id}/calls/{tool_call_id}", view.call),
            Route("/runs/{run_id}/calls/{tool_call_id}/cancel", view.cancel, methods=["POST"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={
            StoreError: store_failed,
            HTTPException: view.not_found,
            Exception: failed,
        },
        lifespan=lifespan,
    )
    app.state.view = view
    # The token is checked inside NoTracebacks (a request it cannot answer is logged by type
    # only), and every answer, a 401 or a login redirect too, carries the security headers.
    guarded: ASGIApp = TokenGuard(app, token) if token else app
    return SecurityHeaders(NoTracebacks(guarded))
