"""Versioned projectors: every seal writes its projector's version into the record, and the
record views (``show``, observed facts, the web call page) carry it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from boundary import (
    EvidenceStatus,
    Projection,
    ToolBoundary,
    ToolRegistry,
    ToolSpec,
)
from boundary.store import keys
from tasks.cli.main import cli
from tests.conftest import STORE_DB, redis_url
from tests.support.helpers import RUN_ID, TOOL, envelope, key_of, make_boundary, make_run


class EchoProjector:
    def project(self, raw: Any, request: dict[str, Any]) -> Projection:
        if request["query"] == "broken":
            raise RuntimeError("projector bug")
        return Projection(evidence_status=EvidenceStatus.EVIDENCE_FOUND, result=raw["hits"])


@pytest.fixture
def versioned(redis_client: redis.Redis, registry: ToolRegistry) -> ToolBoundary:
    registry.register(
        ToolSpec(
            name=TOOL,
            executor=lambda arguments: {"hits": [arguments["query"]]},
            projector=EchoProjector(),
            read_only=True,
            projector_version="7",
        )
    )
    return make_boundary(redis_client, registry)[0]


def test_a_seal_writes_the_projector_version_and_facts_carry_it(versioned: ToolBoundary) -> None:
    run = make_run()
    assert versioned.invoke(envelope("c1", {"query": "a"}), run, timeout=5).error_code is None
    failed = versioned.invoke(envelope("c2", {"query": "broken"}), run, timeout=5)
    assert failed.error_code is not None

    record = versioned.store.get(key_of("c1"))
    assert record is not None and record.projector_version == "7"
    # A projection that failed was made by that projector too.
    failed_record = versioned.store.get(key_of("c2"))
    assert failed_record is not None and failed_record.projector_version == "7"
    facts = versioned.observe(RUN_ID)
    assert [(f.tool_call_id, f.projector_version) for f in facts.facts] == [("c1", "7")]


def test_a_record_sealed_before_versions_reads_as_none(
    versioned: ToolBoundary, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    versioned.invoke(envelope("c1", {"query": "a"}), make_run(), timeout=5)
    # As a seal of an earlier release left it: no version field.
    redis_client.hdel(keys.record_key(key_of("c1")), "projector_version")

    record = versioned.store.get(key_of("c1"))
    assert record is not None and record.projector_version is None
    assert versioned.observe(RUN_ID).facts[0].projector_version is None

    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    shown = CliRunner().invoke(cli, ["show", RUN_ID, "c1", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["projector_version"] is None


def test_show_and_observe_print_the_version(
    versioned: ToolBoundary, monkeypatch: pytest.MonkeyPatch
) -> None:
    versioned.invoke(envelope("c1", {"query": "a"}), make_run(), timeout=5)
    monkeypatch.setenv("TOOL_BOUNDARY_REDIS_URL", redis_url(STORE_DB))
    runner = CliRunner()

    shown = runner.invoke(cli, ["show", RUN_ID, "c1", "--json"])
    assert json.loads(shown.output)["projector_version"] == "7"
    assert "projector_version" in runner.invoke(cli, ["show", RUN_ID, "c1"]).output
    observed = runner.invoke(cli, ["observe", RUN_ID, "--json"])
    assert json.loads(observed.output)["facts"][0]["projector_version"] == "7"
    assert "projector v7" in runner.invoke(cli, ["observe", RUN_ID]).output


def test_a_projector_version_must_be_a_safe_id() -> None:
    with pytest.raises(ValueError):
        ToolSpec(
            name=TOOL,
            executor=lambda arguments: arguments,
            projector=EchoProjector(),
            read_only=True,
            projector_version="v 2:x",
        )
