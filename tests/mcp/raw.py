"""A raw JSON-RPC client of ``tool-boundary mcp --transport stdio`` (newline-delimited JSON on
the process's pipes, no SDK), and the published 2025-11-25 schema to check what it receives.

``fixtures/schema-2025-11-25.json`` is ``schema/2025-11-25/schema.json`` of
modelcontextprotocol/modelcontextprotocol at b0f60ba5409db7a6582440a7b473cc0398890f15.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from bench.rig.mcp_server import ROOT, server_command

SCHEMA_PATH = Path(__file__).parent / "fixtures" / "schema-2025-11-25.json"
REVISION = "2025-11-25"


@cache
def _schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text("utf-8"))
    return loaded


def check(definition: str, value: Any) -> None:
    """Raises ``jsonschema.ValidationError`` unless ``value`` is a valid ``definition`` of the
    published 2025-11-25 schema."""
    schema = {"$ref": f"#/$defs/{definition}", "$defs": _schema()["$defs"]}
    jsonschema.Draft202012Validator(schema).validate(value)


class RawStdioClient:
    """One server process; requests by id, notifications kept in arrival order."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        with open(os.environ.get("TB_RAW_LOG", os.devnull), "ab") as errors:
            self.proc = subprocess.Popen(
                server_command("--transport", "stdio", *args),
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
            )
        self._next_id = 0
        self._responses: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self.notifications: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            if "id" in message and "method" not in message:
                with self._arrived:
                    self._responses[message["id"]] = message
                    self._arrived.notify_all()
            elif "method" in message and "id" not in message:
                self.notifications.put(message)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request_async(self, method: str, params: dict[str, Any] | None = None) -> int:
        """Sends a request; returns its id (``response(id)`` waits for the answer)."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return self._next_id

    def response(self, request_id: int, timeout_s: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while request_id not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no response to request {request_id}")
                self._arrived.wait(left)
            return self._responses.pop(request_id)

    def request(
        self, method: str, params: dict[str, Any] | None = None, timeout_s: float = 60.0
    ) -> dict[str, Any]:
        return self.response(self.request_async(method, params), timeout_s)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(
        self, capabilities: dict[str, Any] | None = None, revision: str = REVISION
    ) -> dict[str, Any]:
        answer = self.request(
            "initialize",
            {
                "protocolVersion": revision,
                "capabilities": capabilities or {},
                "clientInfo": {"name": "raw-test-client", "version": "0"},
            },
        )
        self.notify("notifications/initialized")
        return answer

    def close_stdin(self) -> None:
        """Closes the server's input, as a client that goes away does."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def close(self, timeout_s: float = 15.0) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
