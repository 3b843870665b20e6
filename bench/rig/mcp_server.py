"""A ``tool-boundary mcp --transport http`` server process, as the MCP benchmark and the MCP
tests start, kill and stop it. Standard library only: the tests import it too."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def server_command(*args: str) -> list[str]:
    """``tool-boundary mcp <args>`` with this interpreter."""
    return [sys.executable, "-m", "tasks.cli", "mcp", *args]


def free_port() -> int:
    """A port nothing listens on now (the system's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HttpServer:
    """One ``tool-boundary mcp --transport http`` process; ``restart`` keeps its port."""

    port: int
    log: Path
    env: dict[str, str]
    args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def launch(self) -> None:
        """Starts the process, its output appended to ``log``; returns at once."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                server_command("--transport", "http", "--port", str(self.port), *self.args),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start(self, timeout_s: float = 30.0) -> float:
        """Starts the process and returns the seconds until it accepts connections."""
        started = time.monotonic()
        self.launch()
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"MCP server exited:\n{self.log.read_text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return time.monotonic() - started
            except OSError:
                if time.monotonic() - started > timeout_s:
                    tail = self.log.read_text()[-3000:]
                    raise RuntimeError(f"MCP server did not start:\n{tail}") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: nothing of the process survives, no shutdown runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, and SIGKILL if the process has not ended ``timeout_s`` later."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> float:
        self.kill()
        return self.start()
