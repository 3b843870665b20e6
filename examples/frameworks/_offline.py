"""What the framework examples share: the boundary they run against, their run, a scripted
provider over a mock HTTP transport, and how they print what the model was sent."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from boundary import RunContext, ToolBoundary
from tasks.demo.script import embedded_redis, worker_thread
from tasks.runtime import get_runtime
from tasks.settings import Settings
from tasks.wiring.app import configure
from tasks.wiring.dispatcher import CeleryDispatcher

T = TypeVar("T")

#: The example tools a framework example's run may call.
TOOLS = frozenset({"search_docs", "search_logs", "sql_read"})
#: What every example asks.
QUESTION = "Why do Orbit API requests time out, and which service has had most incidents?"


@contextmanager
def offline_boundary() -> Iterator[ToolBoundary]:
    """A boundary over a real Celery worker thread and the example tools: on an embedded
    Redis-protocol server, or on ``TOOL_BOUNDARY_REDIS_URL`` when it is set."""
    settings = Settings()
    with ExitStack() as stack:
        if settings.redis_url is None:
            url = stack.enter_context(embedded_redis())
            settings = settings.model_copy(update={"redis_url": url})
        app = configure(settings)
        stack.enter_context(worker_thread(app))
        yield get_runtime().boundary(CeleryDispatcher(app))


def example_run(framework: str) -> RunContext:
    """A fresh run (its own id, so examples never collide on a shared Redis)."""
    return RunContext(
        run_id=f"example-{framework}-{secrets.token_hex(4)}",
        deadline=datetime.now(UTC) + timedelta(minutes=5),
        authorized_tools=TOOLS,
        max_tool_calls=10,
    )


class ScriptedProvider:
    """Answers each HTTP request with the next scripted JSON body; keeps the requests."""

    def __init__(self, *responses: dict[str, Any]) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        import httpx2

        self.requests.append(json.loads(request.content))
        return httpx2.Response(200, json=self.responses.pop(0))

    def sdk(self, sdk_class: Callable[..., T], base_url: str) -> T:
        """A provider SDK's client (``openai.OpenAI``, ``anthropic.Anthropic``) talking to it
        offline over an ``httpx2`` mock transport: no key, no retries."""
        import httpx2

        http_client = httpx2.Client(transport=httpx2.MockTransport(self))
        return sdk_class(
            api_key="offline", base_url=base_url, http_client=http_client, max_retries=0
        )


def show(tool_call_id: Any, text: Any, *, error: bool | None = None) -> None:
    """Prints one answer to a tool call as the model receives it."""
    flag = "" if error is None else f" is_error={error}"
    text = str(text)
    print(f"  {tool_call_id}{flag} -> {text if len(text) <= 150 else text[:147] + '...'}")
