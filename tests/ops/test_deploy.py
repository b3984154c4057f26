"""The deploy pack names only metrics a real server exports: every PromQL expression in the
Grafana dashboard (panels and template variables) and in the Prometheus alert rules is
reduced to the metric names it selects, and each must be a sample name of the session's
scrape (`_bucket`/`_sum`/`_count` included, so a histogram is only ever named through its
series). Function names must be PromQL's, so a typo there fails too. Plus the structure
Grafana, Prometheus and systemd need."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from tests.ops.conftest import Scrape

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "seglog.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
UNIT = ROOT / "deploy" / "systemd" / "seglog.service"

PROMQL_FUNCTIONS = frozenset(
    [
        "abs",
        "absent",
        "absent_over_time",
        "avg",
        "avg_over_time",
        "bottomk",
        "ceil",
        "changes",
        "clamp",
        "clamp_max",
        "clamp_min",
        "count",
        "count_over_time",
        "count_values",
        "delta",
        "deriv",
        "exp",
        "floor",
        "group",
        "histogram_quantile",
        "holt_winters",
        "idelta",
        "increase",
        "irate",
        "label_join",
        "label_replace",
        "last_over_time",
        "ln",
        "log2",
        "log10",
        "max",
        "max_over_time",
        "min",
        "min_over_time",
        "predict_linear",
        "quantile",
        "quantile_over_time",
        "rate",
        "resets",
        "round",
        "scalar",
        "sgn",
        "sort",
        "sort_desc",
        "sqrt",
        "stddev",
        "stddev_over_time",
        "stdvar",
        "sum",
        "sum_over_time",
        "time",
        "timestamp",
        "topk",
        "vector",
    ]
)
PROMQL_KEYWORDS = frozenset(["and", "or", "unless", "bool", "offset", "group_left", "group_right"])
# node_exporter's, used by the disk rule only (seglog exports nothing about filesystems)
NODE_EXPORTER = frozenset({"node_filesystem_avail_bytes", "node_filesystem_size_bytes"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names `expr` selects. Raises on an identifier that is neither a metric
    name nor a known PromQL function or keyword (a function must be followed by `(`)."""
    e = _STRING.sub(" ", expr)
    e = _MATCHERS.sub(" ", e)
    e = _RANGE.sub(" ", e)
    e = _GROUPING.sub(" ", e)
    e = _VARIABLE.sub(" ", e)
    names: set[str] = set()
    for ident, call in _IDENT.findall(e):
        if call:
            if ident not in PROMQL_FUNCTIONS:
                raise ValueError(f"unknown PromQL function {ident!r} in {expr!r}")
        elif ident in PROMQL_KEYWORDS:
            continue
        elif ident in PROMQL_FUNCTIONS:
            raise ValueError(f"function {ident!r} without a call in {expr!r}")
        else:
            names.add(ident)
    return names


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def dashboard_exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query template variable."""
    out = [
        (f"panel {p['title']!r} {t['refId']}", t["expr"])
        for p in _panels(dash["panels"])
        for t in p.get("targets", [])
    ]
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        q = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q)
        assert m, f"variable {var['name']}: {q!r} is not label_values(selector, label)"
        out.append((f"variable {var['name']!r}", m.group(1)))
    return out


def alert_rules(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in doc["groups"] for rule in group["rules"]]


def unknown(names: set[str], scrape: Scrape, allowed: frozenset[str] = frozenset()) -> set[str]:
    return {n for n in names if n not in scrape.series and n not in allowed}


# ------------------------------------------------------------------------- the checker


def test_metric_names_of_expressions() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (instance, le) (rate(x_bucket{a="b",c=~"$v"}[5m])))'
        " / on (instance) group_left sum(y offset 1h) > bool 5e3 and z[$__rate_interval]"
    )
    assert metric_names(expr) == {"x_bucket", "y", "z"}
    assert metric_names('label_values(q{instance=~"$instance"}, topic)'[13:-7]) == {"q"}
    for bad in ("rte(x[5m])", "sum(rate x)"):
        try:
            metric_names(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} passed")


def test_checker_rejects_a_name_the_server_does_not_export(scrape: Scrape) -> None:
    assert (
        unknown({"topics_wal_frames_total", "topics_wal_fsync_latency_us_bucket"}, scrape) == set()
    )
    assert unknown({"topics_wal_frames"}, scrape) == {"topics_wal_frames"}  # family, not series
    assert unknown({"topics_wal_fsync_latency_us"}, scrape) == {"topics_wal_fsync_latency_us"}
    assert unknown({"node_filesystem_avail_bytes"}, scrape) == {"node_filesystem_avail_bytes"}


# ------------------------------------------------------------------------- Grafana


def test_dashboard_queries_name_only_exported_metrics(scrape: Scrape) -> None:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = dashboard_exprs(dash)
    missing = {where: sorted(unknown(metric_names(e), scrape)) for where, e in exprs}
    assert {w: m for w, m in missing.items() if m} == {}
    used = set().union(*(metric_names(e) for _, e in exprs))
    # the brief's panels: write rate, live records/bytes, queues, fsync latency, read-only,
    # replay, SSE/watch, delivery pressure
    assert {
        "topics_wal_frames_total",
        "topics_topic_head_seq",
        "topics_topic_records_live",
        "topics_topic_bytes_live",
        "topics_topic_queue_ready",
        "topics_topic_queue_in_flight",
        "topics_wal_fsync_latency_us_bucket",
        "topics_wal_read_only",
        "topics_recovery_progress",
        "topics_sse_connections",
        "topics_watch_sessions",
        "topics_delivery_pressure_level",
    } <= used


def test_dashboard_structure() -> None:
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dash["uid"] == "seglog" and isinstance(dash["schemaVersion"], int)
    panels = list(_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dash["templating"]["list"]}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for t in p.get("targets", []):
            assert t["expr"].strip(), p["title"]
            used = {v.lstrip("${").rstrip("}") for v in _VARIABLE.findall(t["expr"])}
            assert used <= variables | {"__rate_interval", "__interval", "__range"}, used
    # rows are laid out without overlapping
    cells = [
        (x, y)
        for p in panels
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    ]
    assert len(cells) == len(set(cells)), "panels overlap"


# ------------------------------------------------------------------------- Prometheus


def test_alert_rules_load_and_name_only_exported_metrics(scrape: Scrape) -> None:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    rules = alert_rules(doc)
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names must be unique"
    used: set[str] = set()
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, r
        assert r["labels"]["severity"] and r["annotations"]["summary"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r.get("for", "0m")), r["alert"]
        got = metric_names(r["expr"])
        assert unknown(got, scrape, NODE_EXPORTER) == set(), r["alert"]
        used |= got
    # the list: WAL read-only, fsync latency, replay stuck, disk, dropped watchers
    assert {
        "topics_wal_read_only",
        "topics_wal_fsync_latency_us_bucket",
        "topics_ready",
        "topics_recovery_progress",
        "node_filesystem_avail_bytes",
        "topics_sse_connections",
        "topics_delivery_pressure_level",
    } <= used


def test_only_the_disk_rule_uses_node_exporter() -> None:
    rules = alert_rules(yaml.safe_load(ALERTS.read_text(encoding="utf-8")))
    users = {r["alert"] for r in rules if metric_names(r["expr"]) & NODE_EXPORTER}
    assert users == {"SeglogDiskNearlyFull"}
    assert "node_exporter" in ALERTS.read_text(encoding="utf-8")


# ------------------------------------------------------------------------- systemd


def _unit() -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(UNIT.read_text(encoding="utf-8"))
    return cp


def test_systemd_unit_runs_serve_with_real_flags() -> None:
    svc = _unit()["Service"]
    assert svc["Restart"] == "on-failure"
    assert svc["Type"] == "simple"  # the server does not speak sd_notify
    assert "/v0/ready" in svc["ExecStartPost"]
    assert int(svc["LimitNOFILE"]) >= 65536
    assert svc["StateDirectory"] == "seglog"
    argv = svc["ExecStart"].split()
    assert argv[0].startswith("/") and argv[1] == "serve", argv
    flags = [a.split("=")[0] for a in argv[2:] if a.startswith("--")]
    assert "--data-dir" in flags
    helptext = subprocess.run(
        [sys.executable, "-m", "seglog", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    ).stdout
    offered = set(re.findall(r"--[a-z][a-z-]*", helptext))
    assert set(flags) <= offered, set(flags) - offered
    data_dir = argv[argv.index("--data-dir") + 1]
    assert data_dir.startswith("/var/lib/seglog")
