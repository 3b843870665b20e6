"""``demo``: a scripted agent run through the whole boundary (``tasks.demo``), shown as it
happens (``tasks.demo_view``)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from tasks.commands.common import JsonFlag, dumps, fail, reaching, settings_or_fail
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
    as_json: JsonFlag = False,
) -> None:
    """Run a scripted agent run through the whole boundary and show each call and the facts.

    With no TOOL_BOUNDARY_REDIS_URL it embeds a Redis-protocol server and a worker thread.
    Exits 0 when every call ends as scripted, 1 when one does not, 3 when the store is
    unreachable or a call does not finish (no worker).
    """
    # Imported here: the other commands need neither the worker nor the embedded server.
    from tasks.demo import CALL_TIMEOUT_S, run_demo
    from tasks.demo_view import LiveView, facts_table, report_json

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
            )
    finally:
        if view is not None:
            view.stop()
    if as_json:
        typer.echo(dumps(report_json(report)))
    else:
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
