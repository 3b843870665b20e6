"""The Grafana dashboard queries only metrics the workers export, by their Prometheus names."""

from __future__ import annotations

import json
import re
from pathlib import Path

from boundary.telemetry import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "tool-boundary.json"


def test_every_metric_the_dashboard_queries_is_exported() -> None:
    exported = set()
    for metric in METRICS.values():
        exported.add(metric.prometheus)
        if metric.kind == "histogram":
            exported |= {f"{metric.prometheus}_{s}" for s in ("bucket", "sum", "count")}
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(?:tool_boundary|gen_ai)_[a-z_]+", target["expr"])
    }
    assert queried, "the dashboard queries nothing"
    assert queried <= exported, queried - exported
    # and it shows every metric at least once
    assert {m.prometheus for m in METRICS.values()} <= {
        re.sub(r"_(bucket|sum|count)$", "", name) for name in queried
    }
