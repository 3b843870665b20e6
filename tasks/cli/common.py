"""What every ``tool-boundary`` command shares: settings and store, one-line failures with
their exit codes, and output that is safe on an operator's terminal (``printable``, from
``tasks.views``, which the web view and the demo share)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Annotated, Any, NoReturn

import typer
from rich.text import Text

from boundary import RedisCanonicalStore, StoreError, StoreUnavailable
from boundary.models import is_safe_id
from tasks.exits import EXIT_UNAVAILABLE, EXIT_USAGE
from tasks.runtime import store_from_settings
from tasks.settings import InvalidSettings, Settings, load_settings, redis_location
from tasks.views import printable as printable  # noqa: PLC0414 (the commands take it here)
from tasks.wiring.reproject import ReprojectError
from tasks.wiring.services import ServiceUnavailable

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
RunArg = Annotated[str, typer.Argument(help="The run id.", show_default=False)]


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def settings_or_fail() -> Settings:
    try:
        return load_settings()
    except InvalidSettings as exc:
        fail(exc.problem, EXIT_USAGE)


def open_store(settings: Settings) -> RedisCanonicalStore:
    try:
        return store_from_settings(settings)
    except ValueError:
        fail("TOOL_BOUNDARY_REDIS_URL is not a Redis URL", EXIT_USAGE)


@contextmanager
def reaching(settings: Settings) -> Iterator[None]:
    """Turns an unreachable store, broker or backend into one line and ``EXIT_UNAVAILABLE``."""
    try:
        yield
    except StoreUnavailable as exc:
        where = redis_location(settings.store_url)
        fail(f"the store at {where} is unreachable ({exc.code.value})", EXIT_UNAVAILABLE)
    except StoreError as exc:
        where = redis_location(settings.store_url)
        fail(f"the store at {where} failed ({exc.code.value})", EXIT_UNAVAILABLE)
    except ServiceUnavailable as exc:
        if exc.hint:
            fail(exc.hint, EXIT_UNAVAILABLE)
        fail(_unreachable(settings, exc.part, exc.code.value), EXIT_UNAVAILABLE)
    except ReprojectError as exc:
        fail(_unreachable(settings, exc.part, exc.code.value), EXIT_UNAVAILABLE)


def _unreachable(settings: Settings, part: str, code: str) -> str:
    url = settings.broker if part == "broker" else settings.backend
    return f"the {part} at {redis_location(url)} is unreachable ({code})"


def require_id(value: str, what: str) -> str:
    if not is_safe_id(value):
        fail(f"{what} {value!r} is not a safe identifier", EXIT_USAGE)
    return value


def dumps(value: Any) -> str:
    """JSON for scripts: ASCII only, so it is safe on any terminal and parses back as is."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"), sort_keys=True)


def parsed(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def pretty(value: Any, limit: int) -> Text:
    text = json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters; --json shows all)"
    return Text(printable(text))


def open_out(path: str) -> IO[str]:
    """The file ``--out`` names (``-``: stdout), line-buffered: a line is written when it is
    done, even if Ctrl-C ends the process next (it leaves by os._exit: no close)."""
    if path == "-":
        return sys.stdout
    try:
        return open(path, "w", encoding="utf-8", buffering=1)  # closed by the caller
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror}", EXIT_USAGE)
