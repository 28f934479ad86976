"""docker-compose.yml, deploy/ and the Grafana dashboard, checked without a Docker engine.

Every file they mount or copy exists, the commands they run parse with the demo's own argument
parser, the services point at each other by the right names and ports, and every metric a
dashboard panel uses is one groupkit exports (``groupkit.metrics.METRICS``). The PromQL itself
is checked by ``promtool`` here and run against a real Prometheus in test_demo_prometheus.py.
The alert rules (deploy/prometheus/groupkit-alerts.yml) are checked by ``promtool check rules``
and evaluated by ``promtool test rules`` on series made for each alert; one fires for real in
test_demo_prometheus.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from groupkit.dev.demo_worker import build_parser
from groupkit.metrics import METRICS

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "groupkit.json"

#: PromQL words that are not metric names
_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}  # fmt: skip


def dashboard_exprs(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel."""
    doc = json.loads(path.read_text())
    out = []
    for panel in doc["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def instantiate(expr: str, group_regex: str = ".+", rate_interval: str = "1m") -> str:
    """An expression as Grafana would send it, with the dashboard's variables filled in."""
    return expr.replace("$__rate_interval", rate_interval).replace("$group", group_regex)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (histogram series map to their metric)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\[[^\]]*\]", "", e)  # range selectors
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function or a keyword
        names.add(re.sub(r"_(bucket|sum|count)$", "", word) if word not in METRICS else word)
    return names


def _compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return doc


def _mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for v in service.get("volumes", []):
        src, dst = v.split(":")[:2]
        out.append((src, dst))
    return out


def test_compose_services_and_official_kafka_image() -> None:
    services = _compose()["services"]
    assert set(services) >= {"kafka", "producer", "worker", "prometheus", "grafana"}
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}  # KRaft
    assert "CONTROLLER" in env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 1  # one node
    # --scale worker=N: no fixed container name or host port on the worker
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker
    for name in ("producer", "worker"):
        assert services[name]["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_every_mounted_or_copied_file_exists() -> None:
    services = _compose()["services"]
    for name, service in services.items():
        for src, _dst in _mounts(service):
            if src.startswith((".", "/")):
                assert (ROOT / src).exists(), f"{name} mounts {src}, which does not exist"
        build = service.get("build")
        if build:
            dockerfile = ROOT / build["context"] / build["dockerfile"]
            assert dockerfile.exists(), f"{name} builds from missing {dockerfile}"
            for line in dockerfile.read_text().splitlines():
                if line.startswith("COPY "):
                    for src in line.split()[1:-1]:
                        assert (ROOT / build["context"] / src).exists(), f"COPY {src}"


def test_compose_commands_parse_with_the_demo_worker() -> None:
    services = _compose()["services"]
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["python", "-m", "groupkit.dev.demo_worker"]' in dockerfile
    worker = build_parser().parse_args(services["worker"]["command"])
    producer = build_parser().parse_args(services["producer"]["command"])
    assert (worker.role, producer.role) == ("worker", "produce")
    assert worker.topic == producer.topic
    assert worker.bootstrap_servers == producer.bootstrap_servers == "kafka:9092"
    assert producer.partitions == 12
    # Prometheus scrapes the workers where they listen.
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    sd = prom["scrape_configs"][0]["dns_sd_configs"][0]
    assert sd["names"] == ["worker"] and sd["port"] == worker.metrics_port
    assert str(worker.metrics_port) in services["worker"]["expose"]


def test_grafana_provisioning_matches_compose_and_dashboard() -> None:
    services = _compose()["services"]
    by_target = {dst: src for src, dst in _mounts(services["grafana"])}
    prov = ROOT / by_target["/etc/grafana/provisioning"]
    dashboards_dir = next(dst for dst, src in by_target.items() if src.endswith("dashboards"))
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"][0]
    assert ds["type"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"
    assert "9090:9090" in services["prometheus"]["ports"]
    providers = yaml.safe_load((prov / "dashboards" / "groupkit.yml").read_text())["providers"]
    # The provider loads from where compose mounts the dashboards folder, which holds ours.
    assert providers[0]["options"]["path"] == dashboards_dir
    assert (ROOT / by_target[dashboards_dir]).resolve() == DASHBOARD.parent
    dash = json.loads(DASHBOARD.read_text())
    uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p["targets"]}
    assert uids == {ds["uid"]}
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dashboards_dir}/{DASHBOARD.name}"


def test_every_panel_metric_is_one_groupkit_exports() -> None:
    used: set[str] = set()
    for title, expr in dashboard_exprs():
        names = metric_names(expr)
        assert names, f"panel {title!r}: no metric in {expr}"
        unknown = names - set(METRICS)
        assert not unknown, f"panel {title!r} uses {unknown}, which groupkit does not export"
        used |= names
    # The panels an operator needs.
    for needed in (
        "groupkit_consumergroup_lag_sum",  # per-member total lag
        "groupkit_consumergroup_lag",  # per-partition lag by owner
        "groupkit_consumergroup_assigned_partitions",  # partitions per member
        "groupkit_rebalances_total",
        "groupkit_rebalance_duration_seconds",
        "groupkit_consumergroup_generation",
        "groupkit_consumergroup_is_leader",
        "groupkit_paused_partition_seconds_total",
        "groupkit_control_records_rejected_total",
        "groupkit_consumergroup_lag_seconds",  # time lag per partition by owner
        "groupkit_consumergroup_max_lag_seconds",
        "groupkit_consumergroup_partition_status",  # Burrow's status
        "groupkit_consumergroup_status",
    ):
        assert needed in used, f"no panel shows {needed}"


def test_metric_names_parser() -> None:
    assert metric_names(
        "histogram_quantile(0.95, sum by (le) (rate(groupkit_rebalance_duration_seconds_bucket"
        '{group=~"$group"}[$__rate_interval])))'
    ) == {"groupkit_rebalance_duration_seconds"}
    assert metric_names('max by (member) (groupkit_consumergroup_is_leader{a="b"}) == 1') == {
        "groupkit_consumergroup_is_leader"
    }
    assert metric_names("sum(up) / sum(foo_total)") == {"up", "foo_total"}


def test_promtool_accepts_the_configs_and_every_panel_query(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None
    cfg = ROOT / "deploy" / "prometheus" / "prometheus.yml"
    run = subprocess.run([promtool, "check", "config", str(cfg)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    # Recording rules are the one place promtool parses PromQL offline.
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:panel{i}", "expr": instantiate(expr)}
                    for i, (_title, expr) in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    run = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


ALERTS = ROOT / "deploy" / "prometheus" / "groupkit-alerts.yml"


def test_alert_rules_are_wired_and_read_only_exported_metrics() -> None:
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert [(ROOT / "deploy" / "prometheus" / f).resolve() for f in prom["rule_files"]] == [ALERTS]
    # compose mounts the rules file beside the config, where rule_files finds it
    mounts = dict(_mounts(_compose()["services"]["prometheus"]))
    config_dir = Path(mounts["./deploy/prometheus/prometheus.yml"]).parent
    assert mounts["./deploy/prometheus/groupkit-alerts.yml"] == f"{config_dir}/{ALERTS.name}"
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {
        "GroupkitMemberStopped", "GroupkitMemberDown", "GroupkitLagHigh", "GroupkitNoLeader",
        "GroupkitAssignorFallback", "GroupkitControlRecordsRejected",
        "GroupkitPartitionStatusErr",
    }  # fmt: skip
    for r in rules:
        unknown = metric_names(r["expr"]) - set(METRICS) - {"up"}
        assert not unknown, f"{r['alert']} reads {unknown}, which groupkit does not export"
        assert r["labels"]["severity"] in {"warning", "critical"} and r["annotations"]["summary"]
    promtool = shutil.which("promtool")
    assert promtool is not None
    run = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _series(name: str, values: str, member: str = "m1", **labels: str) -> dict[str, str]:
    lab = {"job": "w", "instance": f"{member}:8000", "group": "g", "member": member, **labels}
    inner = ",".join(f'{k}="{v}"' for k, v in lab.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")


def _status(member: str, values: dict[str, str]) -> list[dict[str, str]]:
    """Partition t-0's status enum: ``values`` by status value, ``0x40`` for the rest."""
    return [
        _series("groupkit_consumergroup_partition_status", values.get(s, "0x40"), member,
                topic="t", partition="0", status=s)
        for s in STATUSES
    ]  # fmt: skip


def _healthy(member: str, leader: bool, lag: str = "10x40") -> list[dict[str, str]]:
    """A member that consumes, holds a steady lag, its partition OK, and has nothing
    rejected or failed."""
    return [
        *_status(member, {"OK": "1x40"}),
        {"series": f'up{{job="w",instance="{member}:8000"}}', "values": "1x40"},
        _series("groupkit_consumergroup_generation", "3x40", member),
        _series("groupkit_consumergroup_is_leader", f"{int(leader)}x40", member),
        _series("groupkit_consumergroup_lag_sum", lag, member),
        _series("groupkit_records_consumed_total", "0+100x40", member, topic="t"),
        _series("groupkit_control_records_rejected_total", "0x40", member, reason="bad_bytes"),
        _series("groupkit_assignor_failures_total", "0x40", member, assignor="fair",
                reason="raised"),
    ]  # fmt: skip


def _replace(series: list[dict[str, str]], name: str, values: str) -> list[dict[str, str]]:
    return [{**s, "values": values} if s["series"].startswith(name + "{") else s for s in series]


#: (case, input series of two members m1 and m2 sampled every 15 s, alerts firing at 8 min)
ALERT_CASES: list[tuple[str, list[dict[str, str]], set[str]]] = [
    ("healthy", _healthy("m1", True) + _healthy("m2", False), set()),
    ("a member consumes nothing while its lag grows",
     _replace(_replace(_healthy("m1", False), "groupkit_records_consumed_total", "500x40"),
              "groupkit_consumergroup_lag_sum", "0+50x40") + _healthy("m2", True),
     {"GroupkitMemberStopped"}),
    ("a member's lag grows while it consumes: slow, not stopped",
     _replace(_healthy("m1", False), "groupkit_consumergroup_lag_sum", "0+50x40")
     + _healthy("m2", True), set()),
    ("a member's process stops answering",
     [{"series": 'up{job="w",instance="m1:8000"}', "values": "1x10 0x30"},
      _series("groupkit_consumergroup_generation", "3x10 _x30"), *_healthy("m2", True)],
     {"GroupkitMemberDown"}),
    ("the group's lag stays high",
     _healthy("m1", True, lag="6000x40") + _healthy("m2", False, lag="5000x40"),
     {"GroupkitLagHigh"}),
    ("no member leads", _healthy("m1", False) + _healthy("m2", False), {"GroupkitNoLeader"}),
    ("the assignor fell back",
     _replace(_healthy("m1", True), "groupkit_assignor_failures_total", "0x20 1x20")
     + _healthy("m2", False), {"GroupkitAssignorFallback"}),
    ("control records rejected",
     _replace(_healthy("m1", True), "groupkit_control_records_rejected_total", "0x20 2x20")
     + _replace(_healthy("m2", False), "groupkit_control_records_rejected_total", "0x20 2x20"),
     {"GroupkitControlRecordsRejected"}),
    *[(f"a partition turns {s}",
       [x for x in _healthy("m1", True) if "partition_status" not in x["series"]]
       + _status("m1", {"OK": "1x10 0x30", s: "0x10 1x30"}) + _healthy("m2", False),
       {"GroupkitPartitionStatusErr"}) for s in ("STOP", "STALL", "REWIND")],
    ("a partition turns WARN: slow, not an error",
     [x for x in _healthy("m1", True) if "partition_status" not in x["series"]]
     + _status("m1", {"OK": "1x10 0x30", "WARN": "0x10 1x30"}) + _healthy("m2", False), set()),
    ("a partition is STALL for less than a minute",
     [x for x in _healthy("m1", True) if "partition_status" not in x["series"]]
     + _status("m1", {"OK": "1x29 0x3 1x8", "STALL": "0x29 1x3 0x8"}) + _healthy("m2", False),
     set()),
]  # fmt: skip


def test_alert_rules_fire_on_their_conditions_only(tmp_path: Path) -> None:
    """``promtool test rules``: each case's series, evaluated by Prometheus' own rule engine,
    fire exactly the alerts named (the `for:` of each already elapsed at 8 minutes)."""
    tests = [
        {
            "name": case,
            "interval": "15s",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": 'count by (alertname) (ALERTS{alertstate="firing"})',
                    "eval_time": "8m",
                    "exp_samples": [
                        {"labels": f'{{alertname="{a}"}}', "value": 1} for a in sorted(firing)
                    ],
                }
            ],
        }
        for case, series, firing in ALERT_CASES
    ]
    path = tmp_path / "alerts_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [str(ALERTS)], "evaluation_interval": "15s",
                                    "tests": tests}))  # fmt: skip
    promtool = shutil.which("promtool")
    assert promtool is not None
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
