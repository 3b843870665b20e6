"""``demo``: a scripted agent run through the whole boundary (``tasks.demo``), shown as it
happens (``tasks.demo.terminal``)."""

from __future__ import annotations

import sys
import time
import webbrowser
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console

from tasks.cli.common import JsonFlag, dumps, fail, reaching, settings_or_fail
from tasks.exits import EXIT_NOT_FOUND, EXIT_UNAVAILABLE, EXIT_USAGE


def demo(
    no_worker: Annotated[
        bool,
        typer.Option(
            "--no-worker",
            help="Leave execution to external workers (celery -A tasks worker -Q "
            "tools,projections); needs TOOL_BOUNDARY_REDIS_URL.",
        ),
    ] = False,
    web: Annotated[
        bool,
        typer.Option(
            "--web",
            help="Serve the web view on 127.0.0.1 and follow the run there; it stays up "
            "after the run until Ctrl-C.",
        ),
    ] = False,
    web_port: Annotated[int, typer.Option("--web-port", help="The web view's port.")] = 8766,
    as_json: JsonFlag = False,
) -> None:
    """Run a scripted agent run through the whole boundary and show each call and the facts.

    With no TOOL_BOUNDARY_REDIS_URL it embeds a Redis-protocol server and a worker thread.
    Exits 0 when every call ends as scripted, 1 when one does not, 3 when the store is
    unreachable or a call does not finish (no worker).
    """
    # Imported here: the other commands need neither the worker nor the embedded server.
    from tasks.demo.script import CALL_TIMEOUT_S, run_demo
    from tasks.demo.terminal import LiveView, facts_table, long_table, report_json

    if web:
        try:
            import jinja2  # noqa: F401
            import starlette  # noqa: F401
        except ImportError:
            fail("--web needs the web extra: pip install 'tool-boundary[web]'", EXIT_USAGE)

    settings = settings_or_fail()
    if no_worker and settings.redis_url is None:
        fail(
            "--no-worker needs TOOL_BOUNDARY_REDIS_URL (workers cannot reach an embedded server)",
            EXIT_USAGE,
        )
    console = Console(highlight=False)
    view = None if as_json else LiveView(console)
    try:
        with reaching(settings):
            report = run_demo(
                settings,
                start_worker=not no_worker,
                on_ready=view.ready if view else None,
                on_call=view.call if view else None,
                on_long=view.long if view else None,
                web_port=web_port if web else None,
                linger=_linger(console, as_json) if web else None,
            )
    finally:
        if view is not None:
            view.stop()
    if as_json:
        typer.echo(dumps(report_json(report)))
    else:
        if report.long_calls:
            console.print()
            console.print(long_table(report.long_calls))
        if report.facts is not None:
            console.print()
            console.print(facts_table(report.facts))
        console.print(f"Done in {report.wall_s:.1f}s.")
    if any(call.status == "PROJECTING" for call in report.calls):
        fail(
            f"a call did not finish within {CALL_TIMEOUT_S:.0f}s: is a worker running "
            "(celery -A tasks worker -Q tools,projections)?",
            EXIT_UNAVAILABLE,
        )
    if not report.ok:
        fail("the run did not go as scripted (see the unexpected calls)", EXIT_NOT_FOUND)


def _linger(console: Console, as_json: bool) -> Callable[[Any], None]:
    """``--web``: after the run, keep the store and the web view up until Ctrl-C (which ends
    the command as any Ctrl-C does)."""

    def linger(report: Any) -> None:
        from tasks.demo.terminal import report_json

        if as_json:
            typer.echo(dumps(report_json(report)), nl=True)
            sys.stdout.flush()
        else:
            console.print(f"Done in {report.wall_s:.1f}s. The web view shows the run at")
            console.print(f"{report.web_url} until Ctrl-C.")
            if console.is_terminal:
                webbrowser.open(report.web_url)
        while True:
            time.sleep(3600)

    return linger
