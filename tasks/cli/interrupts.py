"""Ctrl-C in ``tool-boundary``: one line, ``interrupted``, and ``EXIT_INTERRUPTED``.

A command marked ``@interruptible`` runs in its own thread while the main thread only waits
for it, so Ctrl-C never raises inside the command. An exception raised by a signal handler
lands on whatever bytecode the main thread is at, in library code not written for it; the
demo met three such ends: inside rich's ``Live.start``, whose ``stop`` then popped an empty
list (an ``IndexError``); between ``logging``'s lock acquire and its ``try``, the lock stayed
held and the embedded server's threads, then the main thread joining them, waited forever;
inside a finalizer, the interrupt was printed as ignored and the run went on to exit 0.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn, ParamSpec

from rich.console import Console

from tasks.exits import EXIT_INTERRUPTED

P = ParamSpec("P")

#: Seconds between two looks of the waiting main thread at the Ctrl-C flag.
POLL_S = 0.05


class Interrupted(BaseException):
    """Ctrl-C, raised in the main thread only: click would turn a ``KeyboardInterrupt`` into
    ``Aborted!`` and exit 1; this passes through it to ``main``."""


#: A line a command asks Ctrl-C to print after ``interrupted`` (``interrupt_note``).
_note: list[str] = []
#: Set by the first Ctrl-C.
_interrupted = False
#: Set while an ``@interruptible`` command runs in its thread: Ctrl-C then only sets the flag.
_supervising = False


@contextlib.contextmanager
def interrupt_note(text: str) -> Iterator[None]:
    """While it is open, Ctrl-C prints ``text`` after ``interrupted`` (what goes on, and
    how to stop it)."""
    _note.append(text)
    try:
        yield
    finally:
        _note.remove(text)


def was_interrupted() -> bool:
    return _interrupted


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """The SIGINT handler ``main`` installs."""
    global _interrupted
    if _interrupted:
        # A second Ctrl-C while the first one is handled: leave now.
        os._exit(EXIT_INTERRUPTED)
    _interrupted = True
    if not _supervising:
        # No command thread (argument parsing, or ``mcp``, which runs its own event loop
        # here): the main thread is the one to stop.
        raise Interrupted()


def interruptible(command: Callable[P, None]) -> Callable[P, None]:
    """Runs the command in a thread of its own when ``main`` handles Ctrl-C; in-process
    callers (``CliRunner``, the tests) run it as is."""

    @functools.wraps(command)
    def supervised(*args: P.args, **kwargs: P.kwargs) -> None:
        global _supervising
        handled = signal_handled()
        if not handled or _supervising:
            command(*args, **kwargs)
            return
        outcome: list[BaseException] = []

        def body() -> None:
            try:
                command(*args, **kwargs)
            except BaseException as exc:  # handed to the main thread, raised there
                outcome.append(exc)

        thread = threading.Thread(target=body, name="tool-boundary-command", daemon=True)
        _supervising = True
        thread.start()
        while thread.is_alive() and not _interrupted:
            thread.join(POLL_S)
        if thread.is_alive():
            raise Interrupted()  # the command's thread is left as it is: exit_interrupted
        _supervising = False
        if outcome:
            raise outcome[0]

    return supervised


def signal_handled() -> bool:
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is on_sigint
    )


def exit_interrupted() -> NoReturn:
    """Prints ``interrupted`` and ends the process now, with ``EXIT_INTERRUPTED``.

    ``os._exit``: the command's thread (and the embedded worker's and server's) may still run,
    and an interpreter shutdown would wait for them. What a user needs is flushed first:
    stdout (the lines already printed) and the terminal's cursor (rich hides it while a live
    display or a progress bar runs). A store record needs nothing: a call cut short stays
    PROJECTING until its deadline or the reaper seals it, as after a crash.
    """
    # The process is ending: the embedded worker's complaints about calls cut short would
    # bury the one line that says what happened.
    logging.disable(logging.CRITICAL)
    for console in (Console(), Console(stderr=True)):
        console.show_cursor(True)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to save
            stream.flush()
    with contextlib.suppress(OSError, ValueError):
        print("\ninterrupted", file=sys.stderr, flush=True)
        for text in _note:
            print(text, file=sys.stderr, flush=True)
    os._exit(EXIT_INTERRUPTED)
