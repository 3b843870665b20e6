"""The store's Lua scripts, loaded once with the package (``lua/``)."""

from __future__ import annotations

from importlib import resources


def load_script(name: str) -> str:
    """The source of ``lua/<name>.lua``."""
    return resources.files("boundary.store").joinpath("lua", f"{name}.lua").read_text("utf-8")


def record_script(name: str) -> str:
    """A record script as it is run: the shared ``lua/_prelude.lua`` (the return codes, the
    clock, the status guard), then ``lua/<name>.lua``."""
    return load_script("_prelude") + "\n" + load_script(name)
