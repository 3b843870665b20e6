"""Tool argument schemas: checked once when a ``ToolSpec`` is built, applied in preflight.

The validator is ``jsonschema`` (the reference implementation, every draft up to 2020-12), never
a home-made checker. A failed call names at most the JSON Pointer of the schema keyword it
failed (``/properties/limit/maximum``): that path comes from the tool's own schema, so it never
carries a value the model sent (not even an unexpected key's name, which only the instance
path and the message would hold).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_type_hints

from jsonschema import exceptions, validators
from jsonschema.protocols import Validator
from pydantic import BaseModel, ConfigDict, create_model

#: The schema of a tool that declares none: any JSON object (what preflight already enforces).
ANY_OBJECT: dict[str, Any] = {"type": "object"}


class SchemaError(ValueError):
    """A ``ToolSpec.input_schema`` that is not a valid JSON Schema for an arguments object."""


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """Checks ``schema`` against its draft's metaschema and returns a reusable validator.

    The draft is the one ``$schema`` names (2020-12 when absent). Formats are checked, so
    ``"format": "date"`` means something.

    Raises:
        SchemaError: not a JSON object, not a valid schema, or a schema whose top-level
            ``type`` cannot be an object (tool arguments always are one).
    """
    if not isinstance(schema, Mapping):
        raise SchemaError("input_schema must be a JSON Schema object")
    schema = dict(schema)
    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise SchemaError(f"input_schema is not a valid JSON Schema: {exc.message}") from None
    declared = schema.get("type", "object")
    if declared != "object" and not (isinstance(declared, list) and "object" in declared):
        raise SchemaError("input_schema must describe an object (type 'object')")
    validator: Validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return validator


def schema_path(path: Iterable[str | int]) -> str:
    """A schema location as a JSON Pointer (RFC 6901): ``/properties/limit/maximum``."""
    parts = (str(part).replace("~", "~0").replace("/", "~1") for part in path)
    return "".join("/" + part for part in parts) or "/"


def failed_schema_path(validator: Validator, arguments: Mapping[str, Any]) -> str | None:
    """``None`` when ``arguments`` satisfy the schema, else the JSON Pointer of the schema
    keyword they failed (the most relevant one when several did).

    The fast ``is_valid`` path runs first: the full error tree is built only for a failure.
    """
    if validator.is_valid(arguments):
        return None
    error = exceptions.best_match(validator.iter_errors(arguments))
    if error is None:  # pragma: no cover - is_valid said there is one
        return "/"
    return schema_path(error.absolute_schema_path)


def function_arguments(
    fn: Callable[..., Any],
) -> tuple[dict[str, Any], Callable[[dict[str, Any]], Any]]:
    """The JSON Schema of a typed function's parameters and an executor that calls it.

    pydantic builds both from the signature: the schema (unknown keys refused) for preflight and
    the frameworks, and the executor validates an arguments object into the parameters' types
    before calling ``fn`` with them as keywords.

    Raises:
        TypeError: ``fn`` takes ``*args``, ``**kwargs`` or positional-only parameters.
    """
    hints = get_type_hints(fn)
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            raise TypeError(f"{fn.__name__}: every parameter must be nameable in a JSON object")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints.get(parameter.name, Any), default)
    model: type[BaseModel] = create_model(
        f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )

    def execute(arguments: dict[str, Any]) -> Any:
        validated = model.model_validate(arguments)
        return fn(**{name: getattr(validated, name) for name in fields})

    return model.model_json_schema(), execute


def first_paragraph(text: str | None) -> str:
    """A docstring's first paragraph on one line: the description a model reads."""
    paragraph = inspect.cleandoc(text or "").split("\n\n", 1)[0]
    return " ".join(paragraph.split())
