"""``TOOL_BOUNDARY_TOOLS=tests.support.otel_tools:registry``: the Celery test tools, in a
worker that exports its spans to the file ``TB_TEST_SPAN_FILE`` names."""

from __future__ import annotations

from tests.support.celery_tools import registry
from tests.support.otel import install_file_exporter

install_file_exporter()

__all__ = ["registry"]
