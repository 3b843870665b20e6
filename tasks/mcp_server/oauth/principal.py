"""What a checked token says about its bearer, as the MCP handlers use it: whose runs and
tasks it sees (``owner``), its fairness key (``tenant``) and the tools it may call.

No JWT library here: the handlers import it whether or not OAuth is configured.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from boundary.models import is_safe_id

#: The ASGI scope key the resource server puts the request's ``Principal`` under.
PRINCIPAL_KEY = "tool_boundary.principal"

#: The scope that allows every tool, and the prefix of the scope that allows one.
CALL_ANY_SCOPE = "tools:call"
CALL_ONE_PREFIX = "tools:call:"

#: What a claim value that is not a safe id becomes: ``t-`` and 32 hex digits of its SHA-256.
#: A safe value of this very shape is hashed too, so no two values share a tenant.
_HASHED_TENANT = re.compile(r"^t-[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class Principal:
    """The bearer of a checked token.

    Attributes:
        owner: the requester id MCP tasks and runs are bound to: a digest of the issuer and
            the tenant claim's value, so equal values from two issuers are two requesters.
        tenant: ``RunContext.tenant`` of its calls (``tenant_id`` of the claim's value).
        tools: the tools it may call; ``None`` for every tool (the ``tools:call`` scope).
    """

    owner: str
    tenant: str
    tools: frozenset[str] | None

    def may_call(self, tool_name: str) -> bool:
        return self.tools is None or tool_name in self.tools


def tenant_id(value: str) -> str:
    """The claim's value when it is a safe id, else ``t-`` + 32 hex digits of its SHA-256:
    stable (the same value always gives the same tenant) and never equal to a safe value."""
    if is_safe_id(value) and _HASHED_TENANT.fullmatch(value) is None:
        return value
    return "t-" + hashlib.sha256(value.encode()).hexdigest()[:32]


def owner_id(issuer: str, value: str) -> str:
    """The requester id of a claim value from an issuer (hex, usable in key names)."""
    digest = hashlib.sha256(json.dumps([issuer, value]).encode()).hexdigest()[:32]
    return f"oauth-{digest}"


def tools_of(scopes: set[str]) -> frozenset[str] | None:
    """The tools a set of scopes allows: ``None`` for all, else the ``tools:call:<name>`` names
    (possibly none)."""
    if CALL_ANY_SCOPE in scopes:
        return None
    return frozenset(
        scope[len(CALL_ONE_PREFIX) :]
        for scope in scopes
        if scope.startswith(CALL_ONE_PREFIX) and len(scope) > len(CALL_ONE_PREFIX)
    )


def principal_of_scope(scope: Any) -> Principal | None:
    """The principal the resource server put in an ASGI scope, if any."""
    found = scope.get(PRINCIPAL_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Principal) else None
