"""``limits``: each limited tool's fleet-wide limits, what holds its slots and waits in its
line; ``limits set`` / ``limits reset`` change a tool's limits at run time (an override kept
in Redis that every worker and caller applies from its next call, no restart)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from boundary import RedisCanonicalStore
from boundary.flow import Flow
from tasks.cli.common import (
    JsonFlag,
    dumps,
    fail,
    open_store,
    printable,
    reaching,
    settings_or_fail,
)
from tasks.exits import EXIT_NOT_FOUND, EXIT_USAGE
from tasks.runtime import registry_or_empty
from tasks.settings import Settings
from tasks.views import limits_view
from tasks.worker import chunk_slots

limits_app = typer.Typer(
    name="limits",
    help="Fleet flow control: each limited tool's limits, running and waiting calls.",
    no_args_is_help=False,
    invoke_without_command=True,
    rich_markup_mode="markdown",
)

ToolArg = Annotated[
    str,
    typer.Argument(
        help="The tool's registered name, or tool_boundary.reproject (re-projection chunks "
        "at once, fleet-wide).",
        show_default=False,
    ),
]
NONE = "none"
#: The largest count an option takes (a limit past it is no limit: use ``none``).
MAX_COUNT = 1_000_000


def _flow(settings: Settings, store: RedisCanonicalStore, *, sending: bool = False) -> Flow:
    sender = None
    if sending:
        from tasks.wiring.app import app
        from tasks.wiring.dispatcher import CeleryDispatcher

        # Calls a raised limit lets start are sent from here, at once.
        sender = CeleryDispatcher(app)
    flow = Flow(store, registry_or_empty(settings), sender)
    # The fleet's own entries are listed, and may be set, like tools.
    chunk_slots.reserve(flow, settings)
    return flow


def _shown(value: int | None) -> str:
    return "-" if value is None else str(value)


def _tenants(counts: dict[str, int]) -> str:
    if not counts:
        return "-"
    named = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{'(shared)' if t == '_' else t} {n}" for t, n in named[:4])
    return text + (f", +{len(named) - 4}" if len(named) > 4 else "")


def _print(views: list[dict[str, Any]]) -> None:
    if not views:
        typer.echo("no limited tools (declare ToolSpec limits, or: tool-boundary limits set)")
        return
    table = Table("tool", "limits", "running", "waiting", "waiting by tenant")
    for view in views:
        limits = [f"concurrency {_shown(view['concurrency'])}"]
        if view["tenant_concurrency"] is not None:
            limits.append(f"per tenant {view['tenant_concurrency']}")
        rate = view["rate_limit"]
        if rate is not None:
            limits.append(
                f"rate {rate['limit']}/{rate['period_s']:g}s ({view['starts_in_period']} in period)"
            )
        if view["max_waiting"] is not None:
            limits.append(f"max waiting {view['max_waiting']}")
        if view["stale_holders"]:
            limits.append(f"{view['stale_holders']} stale holders refused")
        shown = "; ".join(limits) + (" (override)" if view["override"] else "")
        table.add_row(
            Text(printable(view["tool"])),
            Text(shown),
            str(view["running"]),
            str(view["waiting"]),
            Text(printable(_tenants(view["waiting_by_tenant"]))),
        )
    Console(highlight=False).print(table)


@limits_app.callback()
def limits(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Each limited tool of the fleet (declared in TOOL_BOUNDARY_TOOLS, used by any worker or
    caller, or overridden at run time): its limits in force, calls holding a slot, calls
    waiting (by tenant), and starts in the rate limit's period. Read from the store's index
    of limited tools and each tool's own keys, never a scan."""
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_or_fail()
    with reaching(settings):
        flow = _flow(settings, open_store(settings))
        views = [limits_view(status) for status in flow.fleet_status()]
    if as_json:
        typer.echo(dumps(views))
    else:
        _print(views)


def _count(option: str, value: str | None, least: int) -> int | str | None:
    """``N`` (at least ``least``), ``none``, or (not given) the ``...`` of "unchanged"."""
    if value is None:
        return "..."
    if value.strip().lower() == NONE:
        return None
    try:
        number = int(value)
    except ValueError:
        fail(f"{option} takes a whole number or 'none', not {value!r}", EXIT_USAGE)
    if not least <= number <= MAX_COUNT:
        fail(f"{option} must be within {least}..{MAX_COUNT} (or 'none'), not {value}", EXIT_USAGE)
    return number


def _rate(value: str | None) -> tuple[int | None, int | None] | str:
    """``LIMIT/PERIOD_S`` as (limit, period in ms), ``none``, or "unchanged"."""
    if value is None:
        return "..."
    if value.strip().lower() == NONE:
        return None, None
    limit, sep, period = value.partition("/")
    try:
        count, seconds = int(limit), float(period)
    except ValueError:
        count, seconds = 0, math.nan
    if not sep or not 1 <= count <= MAX_COUNT or not (0 < seconds <= 86_400):
        fail(f"--rate takes LIMIT/PERIOD_S (e.g. 30/60) or 'none', not {value!r}", EXIT_USAGE)
    return count, max(round(seconds * 1000), 1)


def _known(settings: Settings, tool: str, store: RedisCanonicalStore | None = None) -> None:
    """Exits 1 for a tool the registry does not have (when one is loaded), unless ``store``
    knows it as a limited tool (an override, or in use by another registry's processes).
    The fleet's own entries (``tool_boundary.reproject``) are always known."""
    if tool == chunk_slots.REPROJECT_SLOTS:
        return
    registry = registry_or_empty(settings)
    if not len(registry) or tool in registry:
        return
    if store is not None and tool in _flow(settings, store).fleet_tools():
        return
    fail(f"no tool {tool!r} in TOOL_BOUNDARY_TOOLS", EXIT_NOT_FOUND)


@limits_app.command("set")
def set_limits(
    tool: ToolArg,
    *,
    concurrency: Annotated[
        str | None, typer.Option("--concurrency", help="Running at once, fleet-wide: N or none.")
    ] = None,
    tenant_concurrency: Annotated[
        str | None,
        typer.Option("--tenant-concurrency", help="Running at once per tenant: N or none."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option("--rate", help="Starts per period, fleet-wide: LIMIT/PERIOD_S or none."),
    ] = None,
    max_waiting: Annotated[
        str | None,
        typer.Option("--max-waiting", help="Calls that may wait (more: TOOL_BUSY): N or none."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Overrides a tool's limits at run time, in Redis: every worker and caller uses them from
    its next call (within a second), no restart. Options not given keep their current
    override; `none` lifts a limit the tool declares. Calls a raised limit lets start are
    sent at once."""
    changes: dict[str, Any] = {}
    for name, parsed in (
        ("concurrency", _count("--concurrency", concurrency, 1)),
        ("tenant_concurrency", _count("--tenant-concurrency", tenant_concurrency, 1)),
        ("max_waiting", _count("--max-waiting", max_waiting, 0)),
    ):
        if parsed != "...":
            changes[name] = parsed
    rated = _rate(rate)
    if rated != "...":
        assert isinstance(rated, tuple)
        changes["rate_limit"], changes["rate_period_ms"] = rated
    if not changes:
        fail(
            "give at least one of --concurrency, --tenant-concurrency, --rate, --max-waiting",
            EXIT_USAGE,
        )
    settings = settings_or_fail()
    _known(settings, tool)
    with reaching(settings):
        store = open_store(settings)
        override = store.flow_ops.overrides().get(tool, {}) | changes
        store.flow_ops.set_override(tool, override)
        flow = _flow(settings, store, sending=True)
        started = flow.pump(tool)
        view = limits_view(flow.status(tool))
    _done(view, started, as_json)


@limits_app.command("reset")
def reset_limits(tool: ToolArg, as_json: JsonFlag = False) -> None:
    """Drops a tool's run-time override: its declared limits (ToolSpec) apply again."""
    settings = settings_or_fail()
    with reaching(settings):
        store = open_store(settings)
        _known(settings, tool, store)
        store.flow_ops.set_override(tool, {})
        flow = _flow(settings, store, sending=True)
        started = flow.pump(tool)
        view = limits_view(flow.status(tool))
    _done(view, started, as_json)


def _done(view: dict[str, Any], started: int, as_json: bool) -> None:
    if as_json:
        typer.echo(dumps(view | {"started_now": started}))
        return
    _print([view])
    if started:
        what = "chunk(s)" if view["tool"] == chunk_slots.REPROJECT_SLOTS else "call(s)"
        typer.echo(f"{started} waiting {what} started")
