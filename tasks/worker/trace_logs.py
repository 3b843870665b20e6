"""Worker log lines written inside a call's span carry its ``trace_id`` and ``span_id``, so a
log search and a trace join. Without tracing (no SDK, or no span) lines are unchanged.

The ids are appended to the message as ``trace_id=<32 hex> span_id=<16 hex>`` and also set
as the record's ``otelTraceID``/``otelSpanID`` attributes (the names
``opentelemetry-instrumentation-logging`` uses), for handlers that format them themselves.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace


class TraceIds(logging.Filter):
    """Adds the current span's ids to every record a handler emits."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if not context.is_valid or getattr(record, "otelTraceID", None):
            return True
        trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
        record.otelTraceID, record.otelSpanID = trace_id, span_id
        record.msg = f"{record.msg} trace_id={trace_id} span_id={span_id}"
        return True


_filter = TraceIds()


def add_trace_ids(logger: logging.Logger | None = None, **_: Any) -> None:
    """``after_setup_logger``, ``after_setup_task_logger``: the filter goes on the handlers
    the worker set up (pool children inherit them)."""
    for handler in logger.handlers if logger is not None else ():
        if _filter not in handler.filters:
            handler.addFilter(_filter)
