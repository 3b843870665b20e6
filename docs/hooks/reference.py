"""The site's generated pages, as an MkDocs hook (``hooks:`` in ``mkdocs.yml``).

- ``README.md`` becomes the landing page (``index.md``): its ``docs/`` links lose that prefix.
- A reference page holds a marker, ``<!-- reference: NAME -->``, that this hook replaces with
  text generated from the code, so the reference cannot drift from it:

  ``api-boundary`` / ``api-tasks``: one mkdocstrings block per name of the package's
  ``__all__`` (mkdocstrings renders it from the docstrings); ``cli``: every command of the
  ``tool-boundary`` console script with its arguments and options (from its click
  definition); ``exit-codes``: the ``EXIT_*`` constants of ``tasks.exits``; ``settings``:
  every field of the pydantic settings classes with its variable, default and the ``#:``
  comment above it; ``error-codes``: ``ErrorCode`` with its fixed sentence, retryability and
  when it occurs; ``record``: the fields of ``CanonicalRecord``.

A marker this hook does not know, or a setting without its ``#:`` comment, fails the build.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- reference: (?P<name>[a-z-]+) -->")


class ReferenceError(Exception):
    """The code and the reference disagree (a setting without its ``#:`` comment...)."""


# --- ``#:`` comments -------------------------------------------------------------------------


def doc_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment block right above each annotated field of ``cls`` (its own body,
    not its bases'), joined into one paragraph."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    comments: dict[str, str] = {}
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            block: list[str] = []
            row = node.lineno - 2
            while row >= 0 and lines[row].strip().startswith("#:"):
                block.insert(0, lines[row].strip()[2:].strip())
                row -= 1
            if block:
                comments[node.target.id] = " ".join(block).replace("``", "`")
    return comments


def module_doc_comments(path: Path) -> dict[str, str]:
    """The ``#:`` comment block above each module-level assignment of the file at ``path``."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    comments: dict[str, str] = {}
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        block: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].strip().startswith("#:"):
            block.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        for target in targets:
            if block:
                comments[target] = " ".join(block).replace("``", "`")
    return comments


def field_comment(cls: type, name: str) -> str | None:
    """The ``#:`` comment of field ``name`` where a class of ``cls``'s MRO declares it."""
    for klass in cls.__mro__:
        if name in inspect.get_annotations(klass):
            return doc_comments(klass).get(name)
    return None


def cell(text: str) -> str:
    """Text fit for one cell of a Markdown table: a pipe outside a code span is escaped (one
    inside a code span is not a cell's end, and its escape would show)."""
    pieces = text.replace("\n", " ").split("`")
    return "`".join(
        piece if number % 2 else piece.replace("|", "\\|") for number, piece in enumerate(pieces)
    )


def type_name(annotation: Any) -> str:
    """A field's type as a reader writes it: ``str | None``, ``ErrorCode``, ``SecretStr``."""
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation)
    text = re.sub(r"<(?:class|enum) '([\w.]+)'>", r"\1", text).replace("NoneType", "None")
    return re.sub(r"\b(?:[a-z_]\w*\.)+(\w+)", r"\1", text)


# --- settings --------------------------------------------------------------------------------


def settings_classes() -> list[tuple[str, type]]:
    """Every settings class and its variables' prefix."""
    from tasks.mcp_server.settings import MCPSettings
    from tasks.settings import Settings

    return [("TOOL_BOUNDARY_", Settings), ("TOOL_BOUNDARY_MCP_", MCPSettings)]


def setting_default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)):
        import json

        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def settings_rows() -> Iterator[tuple[str, str, str, str]]:
    """(variable, type, default, what it does) for every setting, in declaration order."""
    for prefix, cls in settings_classes():
        for name, field in cls.model_fields.items():  # type: ignore[attr-defined]
            comment = field_comment(cls, name)
            if not comment:
                raise ReferenceError(
                    f"{cls.__name__}.{name} has no '#:' comment: say above the field what "
                    "the setting does and why its default"
                )
            yield (
                prefix + name.upper(),
                type_name(field.annotation),
                setting_default(field),
                comment,
            )


def render_settings() -> str:
    out = ["| variable | type | default | what it does |", "|---|---|---|---|"]
    for variable, kind, default, comment in settings_rows():
        out.append(f"| `{variable}` | {cell(f'`{kind}`')} | {cell(default)} | {cell(comment)} |")
    return "\n".join(out)


# --- the CLI ---------------------------------------------------------------------------------


def render_cli() -> str:
    import typer

    from tasks.cli.main import cli

    # Typer builds click commands (its own vendored click: duck typing, not isinstance).
    root = typer.main.get_command(cli)
    out: list[str] = []

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "list_commands"):
            if path:
                out.extend(describe(command, path))
            context = command.context_class(command)
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is not None and not sub.hidden:
                    walk(sub, [*path, name])
        else:
            out.extend(describe(command, path))

    walk(root, [])
    return "\n".join(out)


def describe(command: Any, path: list[str]) -> list[str]:
    name = " ".join(["tool-boundary", *path])
    usage = " ".join(command.collect_usage_pieces(command.context_class(command)))
    usage = re.sub(r"\{(\w+)\}", lambda m: m[1].upper(), usage)
    out = [f"### `{name}`", "", f"```text\n{name} {usage}\n```", ""]
    if command.help:
        out += [inspect.cleandoc(command.help).split("\f")[0].strip().replace("``", "`"), ""]
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    options = [
        p
        for p in command.params
        if p.param_type_name == "option" and not getattr(p, "hidden", False)
    ]
    if arguments:
        out += ["| argument | required | what it is |", "|---|---|---|"]
        out += [
            f"| `{str(p.metavar or p.name).upper()}` | {'yes' if p.required else 'no'} "
            f"| {cell(getattr(p, 'help', None) or '')} |"
            for p in arguments
        ]
        out.append("")
    if options:
        out += ["| option | default | what it does |", "|---|---|---|"]
        for option in options:
            flags = ", ".join(f"`{flag}`" for flag in [*option.opts, *option.secondary_opts])
            default = option.default
            if option.is_flag and not option.secondary_opts:
                shown = "on" if default else "off"
            elif default is None or default in ((), []):
                shown = "required" if option.required else ""
            elif isinstance(default, bool):
                shown = f"`{flags.split(', ')[0 if default else -1].strip('`')}`"
            else:
                shown = f"`{getattr(default, 'value', default)}`"
            out.append(f"| {flags} | {cell(shown)} | {cell(option.help or '')} |")
        out.append("")
    return out


def render_exit_codes() -> str:
    from tasks import exits

    comments = module_doc_comments(Path(exits.__file__))
    out = ["| code | name | meaning |", "|---|---|---|"]
    for name, value in vars(exits).items():
        if name.startswith("EXIT_") and isinstance(value, int):
            if name not in comments:
                raise ReferenceError(f"tasks.exits.{name} has no '#:' comment")
            out.append(f"| {value} | `{name}` | {cell(comments[name])} |")
    return "\n".join(out)


# --- error codes and the record --------------------------------------------------------------


def render_error_codes() -> str:
    from boundary import ErrorCode
    from boundary.errors import PREFLIGHT_CODES, SEAL_CODES

    comments = doc_comments(ErrorCode)
    source = inspect.getsource(ErrorCode)
    comments |= {
        node.targets[0].id: comment
        for node in ast.parse(textwrap.dedent(source)).body[0].body  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and (comment := _assign_comment(source, node.lineno))
    }
    out = [
        "| code | retryable | when | the fixed sentence (what an agent reads) |",
        "|---|---|---|---|",
    ]
    for code in ErrorCode:
        when = []
        if code in PREFLIGHT_CODES:
            when.append("refused (no record)")
        if code in SEAL_CODES:
            when.append("sealed `ERROR`")
        if not when:
            when.append("lookup")
        sentence = code.message
        if code.name in comments:
            sentence += f" *{comments[code.name]}*"
        out.append(
            f"| `{code.value}` | {'yes' if code.retryable else 'no'} | {', '.join(when)} "
            f"| {cell(sentence)} |"
        )
    return "\n".join(out)


def _assign_comment(source: str, lineno: int) -> str:
    lines = textwrap.dedent(source).splitlines()
    block: list[str] = []
    row = lineno - 2
    while row >= 0 and lines[row].strip().startswith("#:"):
        block.insert(0, lines[row].strip()[2:].strip())
        row -= 1
    return " ".join(block).replace("``", "`")


def render_record() -> str:
    from boundary import CanonicalRecord

    comments = doc_comments(CanonicalRecord)
    out = ["| field | type | what it holds |", "|---|---|---|"]
    for name, field in CanonicalRecord.model_fields.items():
        kind = type_name(field.annotation)
        out.append(f"| `{name}` | {cell(f'`{kind}`')} | {cell(comments.get(name, ''))} |")
    return "\n".join(out)


# --- the public API --------------------------------------------------------------------------


def render_api(package: str) -> str:
    import importlib

    module = importlib.import_module(package)
    out = []
    for name in module.__all__:
        out += [f"::: {package}.{name}", ""]
    return "\n".join(out)


RENDERERS: dict[str, Callable[[], str]] = {
    "api-boundary": lambda: render_api("boundary"),
    "api-tasks": lambda: render_api("tasks"),
    "cli": render_cli,
    "exit-codes": render_exit_codes,
    "settings": render_settings,
    "error-codes": render_error_codes,
    "record": render_record,
}


def expand(markdown: str) -> str:
    """``markdown`` with every reference marker replaced by its generated text."""

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise ReferenceError(f"unknown reference marker {name!r}")
        return RENDERERS[name]()

    return MARKER.sub(replace, markdown)


def readme_as_index() -> str:
    """README.md, with its links into ``docs/`` made relative to the site's root."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\(docs/", "](", text)


# --- MkDocs events ---------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md", content=readme_as_index()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown)
