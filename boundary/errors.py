"""Stable error codes (the only error text an agent ever sees) and the exception tree.

Exceptions carry context in attributes, never in a message that someone must parse, and
their messages never hold payloads, keys, URLs or driver text.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every error an agent-facing value may carry."""

    # Preflight: no record is written and the tool is not run.
    INVALID_TOOL_CALL_ID = "INVALID_TOOL_CALL_ID"
    RUN_ID_MISMATCH = "RUN_ID_MISMATCH"
    INVALID_ARGUMENTS = "INVALID_ARGUMENTS"
    REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    UNAUTHORIZED = "UNAUTHORIZED"
    NOT_READ_ONLY = "NOT_READ_ONLY"
    RUN_INACTIVE = "RUN_INACTIVE"
    RUN_DEADLINE_EXCEEDED = "RUN_DEADLINE_EXCEEDED"
    #: The same call (same tool, equal arguments) again under a used tool_call_id.
    DUPLICATE_TOOL_CALL = "DUPLICATE_TOOL_CALL"
    #: A used tool_call_id again with another tool or other arguments.
    DUPLICATE_TOOL_CALL_CONFLICT = "DUPLICATE_TOOL_CALL_CONFLICT"
    TOOL_BUDGET_EXHAUSTED = "TOOL_BUDGET_EXHAUSTED"
    RUN_BUDGET_EXHAUSTED = "RUN_BUDGET_EXHAUSTED"
    STORE_UNAVAILABLE = "STORE_UNAVAILABLE"
    #: The tool's waiting line is full (``ToolSpec.max_waiting``): nothing was created or
    #: charged; the same call may be made again later.
    TOOL_BUSY = "TOOL_BUSY"
    #: A server looked a run up by id (``ToolBoundary.get_run``) and found none open.
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    # After the record exists: the record is sealed ERROR with one of these.
    TOOL_EXECUTION_FAILED = "TOOL_EXECUTION_FAILED"
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    RESULT_TOO_LARGE = "RESULT_TOO_LARGE"
    SERIALIZATION_FAILED = "SERIALIZATION_FAILED"
    PROJECTION_FAILED = "PROJECTION_FAILED"
    INVALID_EVIDENCE_STATUS = "INVALID_EVIDENCE_STATUS"
    DISPATCH_FAILED = "DISPATCH_FAILED"
    WORKER_LOST = "WORKER_LOST"
    #: A PROJECTING call ended by a cancel request (``ToolBoundary.cancel``, MCP tasks/cancel).
    CANCELLED = "CANCELLED"
    #: A record or message of a newer format than this version reads (a mixed-version fleet:
    #: ``boundary.formats``; upgrade workers first).
    FORMAT_TOO_NEW = "FORMAT_TOO_NEW"
    # Lookups.
    RECORD_NOT_FOUND = "RECORD_NOT_FOUND"

    @property
    def message(self) -> str:
        """A fixed human sentence for the code: safe to show to an agent."""
        return ERROR_MESSAGES[self]

    @property
    def retryable(self) -> bool:
        """May a caller try the same work again under a new tool_call_id? Only for failures
        of the infrastructure or of time, never for what the call itself was or returned."""
        return self in RETRYABLE_CODES


#: One fixed sentence per code. Never formatted with runtime values.
ERROR_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.INVALID_TOOL_CALL_ID: "The tool call id is missing or not a safe identifier.",
    ErrorCode.RUN_ID_MISMATCH: "The call belongs to a different run than the current one.",
    ErrorCode.INVALID_ARGUMENTS: (
        "The arguments are not a strict JSON object, or do not match the tool's input schema."
    ),
    ErrorCode.REQUEST_TOO_LARGE: "The arguments exceed the request size limit.",
    ErrorCode.UNKNOWN_TOOL: "No tool with this name is registered.",
    ErrorCode.UNAUTHORIZED: "This run is not authorized to use the tool.",
    ErrorCode.NOT_READ_ONLY: "The tool is not read-only and may not be called.",
    ErrorCode.RUN_INACTIVE: "The run is not active.",
    ErrorCode.RUN_DEADLINE_EXCEEDED: "The run's deadline has passed.",
    ErrorCode.DUPLICATE_TOOL_CALL: "A call with this id was already made in this run.",
    ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT: (
        "This tool call id was already used in this run for a different call."
    ),
    ErrorCode.TOOL_BUDGET_EXHAUSTED: "The run has used all calls allowed for this tool.",
    ErrorCode.RUN_BUDGET_EXHAUSTED: "The run has used all tool calls it is allowed.",
    ErrorCode.STORE_UNAVAILABLE: "The invocation store is unavailable; try again later.",
    ErrorCode.TOOL_BUSY: "Too many calls of this tool are waiting; try again later.",
    ErrorCode.RUN_NOT_FOUND: "No open run has this id; it is unknown, closed or expired.",
    ErrorCode.TOOL_EXECUTION_FAILED: "The tool failed while running.",
    ErrorCode.TOOL_TIMEOUT: "The tool did not finish within its time limit.",
    ErrorCode.RESULT_TOO_LARGE: "The tool's result exceeds the size limit.",
    ErrorCode.SERIALIZATION_FAILED: "The tool's result could not be serialized as JSON.",
    ErrorCode.PROJECTION_FAILED: "The tool's result could not be projected.",
    ErrorCode.INVALID_EVIDENCE_STATUS: "The projection returned an invalid evidence status.",
    ErrorCode.DISPATCH_FAILED: "The call could not be handed to a worker.",
    ErrorCode.WORKER_LOST: "The worker running the call was lost.",
    ErrorCode.CANCELLED: "The call was cancelled before it finished.",
    ErrorCode.FORMAT_TOO_NEW: "The call was written by a newer version than this one reads.",
    ErrorCode.RECORD_NOT_FOUND: "No such call is known, or its record has expired.",
}

#: Codes whose call may be tried again, as new work under a new tool_call_id (the failed
#: call's own id stays used: the store refuses it as a duplicate).
RETRYABLE_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.STORE_UNAVAILABLE,
        ErrorCode.DISPATCH_FAILED,
        ErrorCode.TOOL_TIMEOUT,
        ErrorCode.WORKER_LOST,
        ErrorCode.TOOL_BUSY,
    }
)

#: Codes a preflight (or the create step) may return; no record exists for these calls.
PREFLIGHT_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.INVALID_TOOL_CALL_ID,
        ErrorCode.RUN_ID_MISMATCH,
        ErrorCode.INVALID_ARGUMENTS,
        ErrorCode.REQUEST_TOO_LARGE,
        ErrorCode.UNKNOWN_TOOL,
        ErrorCode.UNAUTHORIZED,
        ErrorCode.NOT_READ_ONLY,
        ErrorCode.RUN_INACTIVE,
        ErrorCode.RUN_DEADLINE_EXCEEDED,
        ErrorCode.DUPLICATE_TOOL_CALL,
        ErrorCode.DUPLICATE_TOOL_CALL_CONFLICT,
        ErrorCode.TOOL_BUDGET_EXHAUSTED,
        ErrorCode.RUN_BUDGET_EXHAUSTED,
        ErrorCode.STORE_UNAVAILABLE,
        ErrorCode.RUN_NOT_FOUND,
        ErrorCode.TOOL_BUSY,
    }
)

#: Codes a sealed ERROR record may carry.
SEAL_CODES: frozenset[ErrorCode] = frozenset(
    {
        ErrorCode.TOOL_EXECUTION_FAILED,
        ErrorCode.TOOL_TIMEOUT,
        ErrorCode.RESULT_TOO_LARGE,
        ErrorCode.SERIALIZATION_FAILED,
        ErrorCode.PROJECTION_FAILED,
        ErrorCode.INVALID_EVIDENCE_STATUS,
        ErrorCode.DISPATCH_FAILED,
        ErrorCode.WORKER_LOST,
        ErrorCode.CANCELLED,
        ErrorCode.FORMAT_TOO_NEW,
        ErrorCode.RUN_DEADLINE_EXCEEDED,
        ErrorCode.STORE_UNAVAILABLE,
    }
)


class BoundaryError(Exception):
    """Root of every exception raised by tool-boundary."""

    #: The code an agent sees when this error ends a call.
    code: ErrorCode = ErrorCode.STORE_UNAVAILABLE

    def __init__(self, code: ErrorCode | None = None) -> None:
        if code is not None:
            self.code = code
        # The message is the code itself: never driver text, keys or URLs.
        super().__init__(self.code.value)


class StoreError(BoundaryError):
    """The store could not do what was asked (wraps every driver error)."""


class StoreUnavailable(StoreError):
    """The store could not be reached or timed out."""

    code = ErrorCode.STORE_UNAVAILABLE


class DispatchError(BoundaryError):
    """A call could not be handed to the execution backend.

    Attributes:
        cause: the type name of what failed underneath (``"PublishUnconfirmed"``,
            ``"OperationalError"``...), for the log; never its text, which may name the
            broker's URL. ``None``: not known.
    """

    code = ErrorCode.DISPATCH_FAILED

    def __init__(self, cause: str | None = None) -> None:
        super().__init__()
        self.cause = cause


def failure_name(error: BaseException) -> str:
    """What a log may say of ``error``: its type's name, or for a ``DispatchError`` that
    knows it, the type name of what failed underneath (never an exception's text)."""
    if isinstance(error, DispatchError) and error.cause:
        return f"{type(error).__name__}: {error.cause}"
    return type(error).__name__


class ToolTimeout(BoundaryError):
    """A tool ran past its time limit or its run's deadline."""

    code = ErrorCode.TOOL_TIMEOUT


class ConfigurationError(BoundaryError):
    """The boundary was set up wrongly (a bad registry path, a bad setting).

    Raised at start-up to an operator, never to an agent: the message says what to fix.
    """

    def __init__(self, problem: str) -> None:
        super().__init__()
        self.problem = problem
        self.args = (problem,)
