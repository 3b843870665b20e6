"""``ToolSpec.description`` / ``input_schema``: checked when declared, applied in preflight by
jsonschema, and a failure names at most the schema keyword's path, never a value."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from boundary import ErrorCode, Limits, SchemaError, ToolRegistry, ToolSpec
from boundary.preflight import Accepted, Rejected, preflight
from boundary.schema import compile_schema, schema_path
from tasks.demo import tools as example_tools
from tests.support.helpers import TOOL, FakeProjector, FakeTool, envelope, make_run

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 20},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "since": {"type": "string", "format": "date"},
    },
    "required": ["query"],
    "additionalProperties": False,
}
#: A marker in the arguments: a refusal must never echo it.
NEEDLE = "needle-value-7"


def spec(schema: dict[str, Any] | None = SCHEMA, **fields: Any) -> ToolSpec:
    return ToolSpec(
        name=TOOL,
        executor=FakeTool(),
        projector=FakeProjector(),
        read_only=True,
        input_schema=schema,
        **fields,
    )


def check(arguments: Any, schema: dict[str, Any] | None = SCHEMA) -> Accepted | Rejected:
    registry = ToolRegistry([spec(schema)])
    return preflight(envelope(arguments=arguments), make_run(), registry, Limits())


class TestDeclaration:
    def test_a_spec_carries_description_and_schema(self) -> None:
        declared = spec(description="Search things.")
        assert declared.description == "Search things."
        assert declared.input_schema == SCHEMA
        assert declared.arguments_schema == SCHEMA

    def test_without_a_schema_any_object_is_exported(self) -> None:
        declared = spec(None)
        assert declared.description == ""
        assert declared.input_schema is None
        assert declared.arguments_schema == {"type": "object"}

    @pytest.mark.parametrize(
        "schema",
        [
            {"type": "object", "properties": {"q": {"type": "strnig"}}},
            {"type": "object", "required": "query"},
            {"type": "object", "properties": {"n": {"minimum": "one"}}},
            {"type": "array"},
            {"type": "string"},
        ],
    )
    def test_an_invalid_schema_fails_when_declared(self, schema: dict[str, Any]) -> None:
        with pytest.raises(ValidationError):
            spec(schema)
        with pytest.raises(SchemaError):
            compile_schema(schema)

    def test_the_schemas_draft_is_the_one_it_names(self) -> None:
        draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}
        assert type(compile_schema(draft7)).__name__ == "Draft7Validator"
        assert type(compile_schema({"type": "object"})).__name__ == "Draft202012Validator"

    def test_a_copy_with_another_schema_validates_against_that_schema(self) -> None:
        declared = spec()
        copied = declared.model_copy(update={"input_schema": {"type": "object", "required": ["x"]}})
        without = declared.model_copy(update={"input_schema": None})
        broken = declared.model_copy(update={"input_schema": {"type": "strnig"}})

        assert declared.schema_violation({"limit": 3}) == "/required"
        assert copied.schema_violation({"query": "a"}) == "/required"
        assert copied.schema_violation({"x": 1}) is None
        assert without.schema_violation({"anything": 1}) is None
        assert broken.schema_violation({"query": "a"}) == "/"

    def test_schema_paths_are_json_pointers(self) -> None:
        assert schema_path(["properties", "limit", "maximum"]) == "/properties/limit/maximum"
        assert schema_path(["properties", "a/b~c"]) == "/properties/a~1b~0c"
        assert schema_path([]) == "/"


class TestPreflight:
    def test_arguments_that_match_are_accepted(self) -> None:
        checked = check({"query": "timeout", "limit": 3, "since": "2026-12-01"})
        assert isinstance(checked, Accepted)

    @pytest.mark.parametrize(
        ("arguments", "path"),
        [
            ({"limit": 3}, "/required"),
            ({"query": NEEDLE, "limit": 51}, "/properties/limit/maximum"),
            ({"query": NEEDLE, "limit": "3"}, "/properties/limit/type"),
            ({"query": NEEDLE, "limit": True}, "/properties/limit/type"),
            ({"query": NEEDLE * 5}, "/properties/query/maxLength"),
            ({"query": NEEDLE, "since": NEEDLE}, "/properties/since/format"),
            ({"query": "x", NEEDLE: 1}, "/additionalProperties"),
        ],
    )
    def test_a_mismatch_is_invalid_arguments_naming_only_the_schema_path(
        self, arguments: dict[str, Any], path: str
    ) -> None:
        checked = check(arguments)
        assert checked == Rejected(ErrorCode.INVALID_ARGUMENTS, path=path)
        assert NEEDLE not in repr(checked)

    def test_without_a_schema_any_object_passes(self) -> None:
        assert isinstance(check({"anything": [1, {"x": None}]}, schema=None), Accepted)

    def test_an_unauthorized_call_learns_nothing_of_the_schema(self) -> None:
        registry = ToolRegistry([spec()])
        checked = preflight(
            envelope(arguments={"limit": 99}), make_run(tools=()), registry, Limits()
        )
        assert checked == Rejected(ErrorCode.UNAUTHORIZED)

    def test_json_that_is_not_strict_is_refused_before_the_schema(self) -> None:
        checked = check('{"query": "a", "query": "b"}')
        assert checked == Rejected(ErrorCode.INVALID_ARGUMENTS)


def search(query: str, limit: int = 10, *, levels: list[str] | None = None) -> dict[str, Any]:
    """Finds lines containing a text.

    Longer explanation that the model does not need.
    """
    return {"query": query, "limit": limit, "levels": levels}


class TestFromFunction:
    def test_name_description_and_schema_come_from_the_function(self) -> None:
        declared = ToolSpec.from_function(search, projector=FakeProjector(), read_only=True)
        assert declared.name == "search"
        assert declared.description == "Finds lines containing a text."
        schema = declared.arguments_schema
        assert schema["required"] == ["query"]
        assert schema["additionalProperties"] is False
        assert schema["properties"]["limit"]["type"] == "integer"
        assert set(schema["properties"]) == {"query", "limit", "levels"}

    def test_the_executor_calls_the_function_with_typed_keywords(self) -> None:
        declared = ToolSpec.from_function(search, projector=FakeProjector(), read_only=True)
        assert declared.executor({"query": "x", "levels": ["ERROR"]}) == {
            "query": "x",
            "limit": 10,
            "levels": ["ERROR"],
        }
        assert declared.schema_violation({"query": "x", "limit": "many"}) == (
            "/properties/limit/anyOf"
            if "anyOf" in declared.arguments_schema["properties"]["limit"]
            else "/properties/limit/type"
        )

    def test_variadic_parameters_cannot_be_declared(self) -> None:
        def loose(*args: Any, **kwargs: Any) -> None:
            return None

        with pytest.raises(TypeError):
            ToolSpec.from_function(loose, projector=FakeProjector(), read_only=True)


class TestExampleTools:
    def test_every_example_tool_declares_a_description_and_a_schema(self) -> None:
        for declared in example_tools.registry:
            assert declared.description
            assert declared.input_schema is not None
            assert declared.input_schema["additionalProperties"] is False

    @pytest.mark.parametrize(
        ("tool", "arguments"),
        [
            ("search_docs", {}),
            ("search_docs", {"query": ""}),
            ("search_docs", {"query": "   "}),
            ("search_docs", {"query": 42}),
            ("search_docs", {"query": "x" * 201}),
            ("search_docs", {"query": "ok", "limit": 0}),
            ("search_docs", {"query": "ok", "limit": True}),
            ("search_docs", {"query": "ok", "limit": 51}),
            ("search_docs", {"query": "ok", "filter": "drop"}),
            ("search_logs", {"query": "x", "level": "DEBUG"}),
            ("search_logs", {"query": "x", "regex": ".*"}),
            ("sql_read", {"sql": "SELECT 1", "params": "1"}),
            ("sql_read", {"sql": "SELECT ?", "params": [[1]]}),
            ("sql_read", {"sql": "SELECT 1", "timeout": 5}),
            ("dump_table", {"table": ""}),
        ],
    )
    def test_what_a_tool_refuses_its_schema_refuses_first(
        self, tool: str, arguments: dict[str, Any]
    ) -> None:
        declared = example_tools.registry.get(tool)
        assert declared is not None
        assert declared.schema_violation(arguments) is not None
        with pytest.raises(ValueError):
            declared.executor(arguments)

    @pytest.mark.parametrize(
        ("tool", "arguments"),
        [
            ("search_docs", {"query": "upstream timeout", "limit": 3}),
            ("search_logs", {"query": "timeout", "level": "error", "service": "api"}),
            ("sql_read", {"sql": "SELECT ?, ?, ?, ?", "params": [1, "a", None, 2.5]}),
            ("dump_table", {"table": "services"}),
        ],
    )
    def test_what_a_tool_accepts_its_schema_accepts(
        self, tool: str, arguments: dict[str, Any]
    ) -> None:
        declared = example_tools.registry.get(tool)
        assert declared is not None
        assert declared.schema_violation(arguments) is None
        declared.executor(arguments)
