"""Where the demo's bundled data lies (``tasks/demo/data``, installed with the package): read in
place by the demo's tools, never written."""

from __future__ import annotations

from pathlib import Path

#: The bundled data, resolved from this file so it also works from an installed package.
DATA_DIR = Path(__file__).parent / "data"
DOCS_DIR = DATA_DIR / "docs"
LOG_PATH = DATA_DIR / "orbit.log"
DB_PATH = DATA_DIR / "orbit.db"
