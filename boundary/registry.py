"""Tools the boundary may run: each one an executor and the projector of its raw output."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from boundary.errors import ConfigurationError
from boundary.models import Projection

#: Default time a tool may run, in seconds.
DEFAULT_TIMEOUT_S = 30.0

Executor = Callable[[dict[str, Any]], Any]


@runtime_checkable
class Projector(Protocol):
    """Turns a raw response into a small, safe ``Projection``. Must be a pure function."""

    def project(self, raw: Any, request: dict[str, Any]) -> Projection | Mapping[str, Any]: ...


class ToolSpec(BaseModel):
    """One registered tool."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(min_length=1, max_length=128)
    executor: Executor
    projector: Projector
    read_only: bool
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)


class ToolRegistry:
    """Tools by name. Accepts ``read_only=False`` specs so a misconfigured tool is visible;
    preflight refuses calls to them."""

    def __init__(self, specs: list[ToolSpec] | None = None) -> None:
        self._specs: dict[str, ToolSpec] = {}
        for spec in specs or []:
            self.register(spec)

    def register(self, spec: ToolSpec) -> ToolSpec:
        if spec.name in self._specs:
            raise ValueError(f"tool {spec.name!r} is already registered")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str | None) -> ToolSpec | None:
        return self._specs.get(name) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[ToolSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    @property
    def longest_timeout_s(self) -> float:
        return max((spec.timeout_s for spec in self), default=DEFAULT_TIMEOUT_S)


def load_registry(path: str) -> ToolRegistry:
    """Imports a registry from ``"package.module:attribute"``.

    Raises:
        ConfigurationError: the path is malformed, fails to import, or names no registry.
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"tools path {path!r} is not of the form 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
        registry = getattr(module, attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load tools from {path!r}: {exc}") from exc
    if callable(registry) and not isinstance(registry, ToolRegistry):
        registry = registry()
    if not isinstance(registry, ToolRegistry):
        raise ConfigurationError(f"{path!r} is not a ToolRegistry")
    return registry
