"""Every Python block of README.md and docs/ runs, in order, one namespace per page, against
the suite's Redis (the store's test DB): the examples a reader copies cannot rot. A block that
must not run says why (``<!-- docs-test: skip: REASON -->``; ``tests/docs/blocks.py``)."""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from boundary import (
    InProcessDispatcher,
    RedisCanonicalStore,
    RunContext,
    ToolBoundary,
    ToolCallEnvelope,
    ToolRegistry,
    load_registry,
)
from tasks.settings import DEFAULT_TOOLS
from tests.conftest import STORE_DB, redis_url
from tests.docs.blocks import ROOT, Block, blocks, pages


def python_pages() -> list[Path]:
    return [page for page in pages() if any(block.is_python for block in blocks(page))]


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[dict[str, Any]]:
    """What every page's blocks may take for granted (``docs/contributing.md``): a boundary
    on the test store whose in-process dispatcher runs the demo's tools, a run that may call
    them, and one call of it."""
    store = RedisCanonicalStore.from_url(redis_url(STORE_DB), ttl_s=600)
    registry = ToolRegistry()
    for spec in load_registry(DEFAULT_TOOLS):
        registry.register(spec)
    dispatcher = InProcessDispatcher(store, registry)
    boundary = ToolBoundary(store=store, registry=registry, dispatcher=dispatcher)
    run = RunContext(
        run_id="run-7",
        authorized_tools={spec.name for spec in registry if spec.read_only},
        max_tool_calls=100,
    )
    call = ToolCallEnvelope(
        run_id="run-7",
        tool_call_id="call_a1",
        tool_name="search_docs",
        arguments={"query": "timeout"},
    )
    yield {
        "__name__": "docs_example",
        "boundary": boundary,
        "registry": registry,
        "store": store,
        "run": run,
        "call": call,
    }
    # Calls a block submitted without waiting finish before the store's DB is flushed.
    for running in list(dispatcher._running.values()):
        running.done.wait(30)


def run_block(block: Block, namespace: dict[str, Any]) -> None:
    """Runs the block's code in ``namespace``; top-level ``await`` runs on an event loop."""
    code = compile(
        block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    if inspect.CO_COROUTINE & code.co_flags:
        asyncio.run(eval(code, namespace))
    else:
        exec(code, namespace)


@pytest.mark.parametrize("page", python_pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_python_block_of_the_page_runs(page: Path, namespace: dict[str, Any]) -> None:
    # Given the page's Python blocks (and setup comments), in order
    ran = 0
    for block in blocks(page):
        if not block.is_python or block.skip is not None:
            continue
        # When each runs in the page's namespace
        try:
            run_block(block, namespace)
        except Exception as exc:  # the block's place, then its error
            raise AssertionError(f"{block.where}: {type(exc).__name__}: {exc}") from exc
        ran += 1
    # Then each ran to its end (an exception above names the block)
    assert ran > 0 or all(b.skip for b in blocks(page) if b.lang != "setup" and b.is_python)


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_every_skip_marker_gives_its_reason(page: Path) -> None:
    # A marker not right before a block raises in blocks(): it would skip nothing. Only
    # Python blocks run; a marker before another block (a shell one) says why it is not run.
    for block in blocks(page):
        if block.skip is not None:
            assert len(block.skip) >= 10, f"{block.where}: say why it does not run"


def test_the_collector_finds_the_readme_example_and_the_docs_blocks() -> None:
    readme = [block for block in blocks(ROOT / "README.md") if block.is_python]
    assert len(readme) == 1 and readme[0].code.startswith("# agent.py")
    assert len(python_pages()) >= 5
