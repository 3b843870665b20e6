"""Why a tool or projector failed, told to the Harness without telling anyone its secrets.

A tool author needs more than ``TOOL_EXECUTION_FAILED``: the exception's type and the frame
that raised it (file, function, line) say where to look. The exception's message does not
go anywhere: it may hold a payload, a URL or a password. The same ``Diagnostic`` is logged by
the worker at WARNING and kept on the record (``CanonicalRecord.diagnostic``, shown by
``tool-boundary show``); it never reaches an agent-facing outcome.
"""

from __future__ import annotations

import logging
import traceback
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from boundary.errors import ErrorCode

logger = logging.getLogger("boundary.diagnostics")

#: Characters kept of a type name, file or function (a generated name can be long).
MAX_NAME_CHARS = 300


class Stage(StrEnum):
    """The step of a call that failed."""

    EXECUTE = "execute"
    PROJECT = "project"


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_NAME_CHARS:
        return text
    return "..." + text[-(MAX_NAME_CHARS - 3) :]


def exception_type_name(exc: BaseException) -> str:
    """``RuntimeError`` for builtins, ``package.module.Class`` for the rest."""
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


class Diagnostic(BaseModel):
    """A failed tool or projector: never the exception's message, nor any payload.

    Attributes:
        tool_name: the tool whose executor or projector failed.
        error_code: the code the record was sealed with.
        stage: ``execute`` (the tool) or ``project`` (its projector).
        exception_type: the exception's type, when one was raised.
        file, function, line: the frame that raised it (the innermost one).
        note: a fixed sentence of this code when no exception says enough (a timeout, a
            missing tool, a size over its limit); never text from the tool.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_name: str = Field(max_length=MAX_NAME_CHARS)
    error_code: ErrorCode
    stage: Stage
    exception_type: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    file: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    function: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    line: int | None = None
    note: str | None = Field(default=None, max_length=MAX_NAME_CHARS)

    @classmethod
    def of_exception(
        cls, tool_name: str, error_code: ErrorCode, stage: Stage, exc: BaseException
    ) -> Diagnostic:
        """The exception's type and the frame that raised it; its message is left out."""
        frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
        frame = frames[-1] if frames else None
        return cls(
            tool_name=_cut(tool_name) or "",
            error_code=error_code,
            stage=stage,
            exception_type=_cut(exception_type_name(exc)),
            file=_cut(frame.filename) if frame else None,
            function=_cut(frame.name) if frame else None,
            line=frame.lineno if frame else None,
        )

    @classmethod
    def of_note(cls, tool_name: str, error_code: ErrorCode, stage: Stage, note: str) -> Diagnostic:
        return cls(tool_name=_cut(tool_name) or "", error_code=error_code, stage=stage, note=note)

    def summary(self) -> str:
        """One line: ``RuntimeError raised at tools.py:12 in search`` or the note."""
        parts = []
        if self.exception_type is not None:
            where = f"{self.file}:{self.line}" if self.file else "an unknown frame"
            parts.append(f"{self.exception_type} raised at {where} in {self.function or '?'}")
        if self.note is not None:
            parts.append(self.note)
        return "; ".join(parts) or "no detail"

    def log(self, identity: str) -> None:
        """Logs the failure at WARNING (one line; the message of the exception never)."""
        logger.warning(
            "tool %s failed (%s step of call %s): %s, %s",
            self.tool_name,
            self.stage.value,
            identity,
            self.error_code.value,
            self.summary(),
        )
