"""``tool-boundary``: look at records and runs, and reprocess run projections, without
writing Redis commands.

For operators (the Harness side): ``show --raw`` prints a raw tool response. Every command
reads the ``TOOL_BOUNDARY_*`` settings, has ``--json`` for scripts, and exits with one of the
``EXIT_*`` codes below; a failure prints one line on stderr, never a traceback.

The commands live beside it in ``tasks.cli``, one module each, by concern; here they become
the console script, with its entry point (``main``: Ctrl-C and unexpected errors).
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from boundary import __version__
from tasks.cli.demo import demo
from tasks.cli.interrupts import (
    Interrupted,
    exit_interrupted,
    interruptible,
    on_sigint,
    was_interrupted,
)
from tasks.cli.jobs import jobs_app
from tasks.cli.limits import limits_app
from tasks.cli.records import observe, runs, show
from tasks.cli.reproject import reproject_command
from tasks.cli.watch import watch
from tasks.cli.web import web
from tasks.exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from tasks.mcp_server.command import mcp_command

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "cli",
    "main",
]

cli = typer.Typer(
    name="tool-boundary",
    help="Look at canonical tool-call records and runs; reprocess run projections; run the demo.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown reflows a docstring's paragraphs to the terminal's width (its source line
    # breaks are not sentence breaks).
    rich_markup_mode="markdown",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tool-boundary {__version__}")
        raise typer.Exit()


@cli.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version (CHANGELOG.md says what it holds) and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    # The options of ``tool-boundary`` itself, before any command (no docstring: the app's
    # help stays the one above).
    pass


# --- the console script -------------------------------------------------------------------

# In this order: it is the order of ``--help``.
cli.command()(interruptible(show))
cli.command()(interruptible(runs))
cli.command()(interruptible(observe))
cli.command()(interruptible(watch))
cli.add_typer(limits_app)
cli.command(name="reproject")(interruptible(reproject_command))
cli.add_typer(jobs_app)
cli.command()(interruptible(demo))
cli.command()(web)
cli.command("mcp")(mcp_command)


def main() -> None:
    """The ``tool-boundary`` console script: every failure is one line on stderr.

    Ctrl-C exits ``EXIT_INTERRUPTED``; an unexpected exception (a bug) prints its type only,
    never its message (it may hold a URL or a payload), and exits ``EXIT_INTERNAL``.
    """
    signal.signal(signal.SIGINT, on_sigint)
    try:
        cli()
    except Interrupted:
        exit_interrupted()
    except Exception as exc:
        if was_interrupted():  # raised where Ctrl-C cut the main thread short (mcp)
            exit_interrupted()
        typer.echo(f"error: unexpected {type(exc).__name__} (a bug; please report)", err=True)
        sys.exit(EXIT_INTERNAL)
    except BaseExceptionGroup:
        # mcp: anyio's task group wraps the Interrupted raised inside it (seen 1 in 40 Ctrl-C
        # of mcp --transport stdio: exit 1 with a traceback).
        if was_interrupted():
            exit_interrupted()
        raise


if __name__ == "__main__":
    main()
