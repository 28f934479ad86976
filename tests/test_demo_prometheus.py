"""``groupkit demo`` on the real broker, scraped by a real Prometheus (Debian's package).

1. Prometheus starts on a free loopback port, scraping every second whatever members the demo
   lists in its ``file_sd`` target file.
2. The demo runs 3 members, adds a 4th at 6 s and removes the oldest at 12 s, while its producer
   writes faster than the members process (so lag builds), and stops producing at 18 s.
3. Once the producer has stopped and the group is stable, every PromQL expression of the
   Grafana dashboard must return data from Prometheus' HTTP API.
4. The members' lag, summed in Prometheus, must equal the group's lag measured independently
   with an AdminClient. Lag moves, so the two are compared without a tolerance by a sandwich:
   with the producer stopped, the group's lag can only fall (commits only grow). So the sum
   scraped *before* the AdminClient measurement must be >= it, and the sum scraped *after*
   must be <= it; both sums must also come from one stable generation covering all 12
   partitions (otherwise the check is taken again).
5. The members run with ``kafka_exporter_names``: the lag panels of a widely used kafka_exporter
   dashboard and a widely used kafka_exporter alert rule (:data:`KAFKA_EXPORTER_PANELS`,
   :data:`KAFKA_EXPORTER_ALERT`), run unchanged but for their variables, return the group's lag
   and pass the same sandwich; the time-lag panels of kafka-lag-exporter's dashboard
   (:data:`KAFKA_LAG_EXPORTER_PANELS`) show every partition and agree on the group's largest.
6. Ctrl-C (SIGINT) stops the demo: every member leaves cleanly, exit code 0.

A second test stops one member's consumption (the demo worker's SIGUSR1) and writes a garbage
record into the group's control partition, and the shipped alert rules fire in Prometheus.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient, OffsetSpec

from groupkit.dev.broker import free_port
from groupkit.dev.harness import wait_for
from groupkit.runtime.control_topic import partition_for_group
from groupkit.runtime.lag_status import LAG_STATUS_MINIMUM_COMPLETE, LAG_STATUS_WINDOW
from tests.test_deploy import dashboard_exprs, instantiate

pytestmark = [pytest.mark.broker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 12
#: Prometheus stamps a sample with its scrape's start; the member reads the offsets during the
#: scrape, which Prometheus abandons after this long (the fixture's ``scrape_timeout``).
SCRAPE_TIMEOUT_S = 1.0

#: The consumer-group panels of Grafana dashboard 7589, "Kafka Exporter Overview", as
#: kafka_exporter ships it (github.com/danielqsj/kafka_exporter, kafka_exporter_overview.json;
#: its README names the dashboard). ``$instance`` there is the one kafka_exporter: here every
#: member is a target, so the variable must select them all (All, with ``=~``).
KAFKA_EXPORTER_PANELS = {
    "Lag by  Consumer Group": 'sum(kafka_consumergroup_lag{instance="$instance",'
    'topic=~"$topic"}) by (consumergroup, topic) ',
    "Message consume per minute": "sum(delta(kafka_consumergroup_current_offset{"
    "instance=~'$instance',topic=~\"$topic\"}[5m])/5) by (consumergroup, topic)",
}
#: The time-lag panels of kafka-lag-exporter's own Grafana dashboard
#: (github.com/seglo/kafka-lag-exporter, grafana/Kafka_Lag_Exporter_Dashboard.json).
#: ``$namespace`` and ``$cluster_name`` select labels its deployment adds (Kubernetes, its
#: cluster config) that groupkit's series do not carry: set empty, ``label=""`` matches a series
#: without the label, as it would for a Prometheus that adds neither.
_KLE = 'namespace="$namespace",cluster_name="$cluster_name",group=~"$consumer_group"'
KAFKA_LAG_EXPORTER_PANELS = {
    "Consumer Group Max Lag Seconds": f"kafka_consumergroup_group_max_lag_seconds{{{_KLE}}}",
    "Consumer Group Lag Partition Seconds": f"kafka_consumergroup_group_lag_seconds{{{_KLE}}}",
    "$consumer_group": f"max(kafka_consumergroup_group_lag_seconds{{{_KLE}}}) by (group)",
}
#: The consumer-group rule of Awesome Prometheus Alerts for kafka_exporter
#: (github.com/samber/awesome-prometheus-alerts, dist/rules/kafka/danielqsj-kafka-exporter.yml,
#: alert KafkaConsumersGroup).
KAFKA_EXPORTER_ALERT = "sum(kafka_consumergroup_lag) by (consumergroup) > 50"


def exporter_expr(expr: str, topic: str) -> str:
    """A kafka_exporter dashboard's expression with its variables set as Grafana would with
    ``$instance`` on All (every member) and ``$topic`` on the demo's topic."""
    assert re.fullmatch(r"[A-Za-z0-9_-]+", topic)  # a regex matching only itself
    expr = expr.replace('instance="$instance"', 'instance=~"$instance"')
    return expr.replace("$instance", ".+").replace("$topic", topic)


def lag_exporter_expr(expr: str, group: str) -> str:
    """A kafka-lag-exporter dashboard's expression with ``$consumer_group`` on ``group`` and
    the deployment's labels empty (see :data:`KAFKA_LAG_EXPORTER_PANELS`)."""
    assert re.fullmatch(r"[A-Za-z0-9_-]+", group)  # a regex matching only itself
    expr = expr.replace("$namespace", "").replace("$cluster_name", "")
    return expr.replace("$consumer_group", group)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                doc = json.load(resp)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{expr}: {e.read().decode(errors='replace')}") from e
        assert doc["status"] == "success", doc
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        r = self.query(expr, at)
        return float(r[0]["value"][1]) if r else None


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[Prometheus, Path]]:
    with run_prometheus(tmp_path) as running:
        yield running


@contextlib.contextmanager
def run_prometheus(
    tmp_path: Path, rule_files: Sequence[Path] = ()
) -> Iterator[tuple[Prometheus, Path]]:
    """Prometheus scraping the demo of ``tmp_path / "demo"`` every second, evaluating
    ``rule_files`` every second; yields its API and the demo's state directory."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("Prometheus is not installed: apt-get install prometheus (.ci/run does)")
    demo_dir = tmp_path / "demo"
    (demo_dir / "prometheus").mkdir(parents=True)
    cfg = tmp_path / "prometheus.yml"
    rules = "".join(f"  - '{f}'\n" for f in rule_files)
    cfg.write_text(
        f"global:\n  scrape_interval: 1s\n  scrape_timeout: {SCRAPE_TIMEOUT_S:g}s\n"
        "  evaluation_interval: 1s\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n  - job_name: groupkit-demo\n    file_sd_configs:\n"
        f"      - files: ['{demo_dir / 'prometheus' / 'targets.json'}']\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    # The binary itself, no service manager: a temp config, storage and loopback port.
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return proc.poll() is not None  # exited: fail below, not by timeout

    try:
        wait_for(ready, 60, "Prometheus to be ready", step=0.2)
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield Prometheus(url), demo_dir
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def stop_demo(demo: subprocess.Popen[Any]) -> int:
    """Ctrl-C for a demo still running; its exit status. The demo's stop is bounded by design:
    members get 20 s to leave (then SIGKILL), the broker 30 s for its controlled shutdown (then
    SIGKILL); past 60 s it is killed."""
    if demo.poll() is None:
        demo.send_signal(signal.SIGINT)
    try:
        return demo.wait(60)
    except subprocess.TimeoutExpired:
        demo.kill()
        return demo.wait()


def hung(demo_dir: Path) -> str:
    """The end of each log with a stack dump: the demo sends SIGQUIT to a process that did not
    stop in time, before killing it."""
    tails = []
    for log in sorted(demo_dir.glob("*.log")):
        text = log.read_text(errors="replace")
        if "most recent call first" in text:
            tails.append(f"\n--- {log.name}:\n{text[-6000:]}")
    return "".join(tails)


def admin_lags(admin: AdminClient, group: str, topic: str) -> dict[int, int]:
    """The lag of each partition by the AdminClient: log end minus committed (earliest if
    none)."""
    tps = [KTP(topic, p) for p in range(PARTITIONS)]
    latest = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=10)
    ends = {tp.partition: f.result().offset for tp, f in latest.items()}
    fut = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])
    committed = {tp.partition: tp.offset for tp in fut[group].result().topic_partitions}
    missing = [KTP(topic, p) for p, o in committed.items() if o < 0]
    starts: dict[int, int] = {}
    if missing:
        earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in missing})
        starts = {tp.partition: f.result().offset for tp, f in earliest.items()}
    return {
        p: max(0, ends[p] - (committed[p] if committed[p] >= 0 else starts[p]))
        for p in range(PARTITIONS)
    }


def scraped_lags(prom: Prometheus, group: str, at: float) -> str:
    """Each partition's lag and committed offset as scraped at ``at``, by member: what a
    failed comparison with the AdminClient's measurement is read against."""
    rows: dict[str, dict[str, str]] = {}
    for name in ("lag", "committed_offset"):
        for r in prom.query(f'groupkit_consumergroup_{name}{{group="{group}"}}', at):
            m = r["metric"]
            key = f"p{m['partition']:>2} {m['member']}"
            rows.setdefault(key, {})[name] = f"{r['value'][1]}@{r['value'][0]}"
    return "\n".join(f"{k}: {v}" for k, v in sorted(rows.items()))


def test_demo_scraped_by_prometheus(
    prometheus: tuple[Prometheus, Path], bootstrap: str, admin: AdminClient, tmp_path: Path
) -> None:
    prom, demo_dir = prometheus
    out_path = tmp_path / "demo.out"
    out = out_path.open("wb")
    # Started with SIGINT ignored, as a script's background job (a CI runner's, say) starts it:
    # the demo must still stop on it (step 5).
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        demo = subprocess.Popen(
            [sys.executable, "-m", "groupkit.cli", "demo", "--bootstrap-servers", bootstrap,
             "--members", "3", "--partitions", str(PARTITIONS), "--rate", "300",
             "--max-rate", "50", "--churn-interval", "6", "--churn-for", "13",
             "--produce-seconds", "18", "--duration", "120", "--metrics-port", "0",
             "--state-dir", str(demo_dir), "--no-table", "--kafka-exporter-names"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, handler)  # this process's Ctrl-C, whatever Popen did

    def status() -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads((demo_dir / "status.json").read_text())
            return doc
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def why() -> str:
        return out_path.read_text(errors="replace")[-3000:]

    try:
        wait_for(lambda: demo.poll() is None and len(prom.query(
            'up{job="groupkit-demo"} == 1')) >= 3, 60,
            "Prometheus to scrape 3 members")  # fmt: skip
        doc = status()
        group, topic = doc["group"], doc["topic"]
        g = f'group="{group}"'
        # The churn (a 4th member at 6 s, the oldest removed at 12 s) and the producer's end.
        wait_for(lambda: (status().get("producer") or {}).get("done") is True, 60,
                 f"the producer to stop:\n{why()}")  # fmt: skip
        #: after the producer's last record: only samples from scrapes begun later have a
        #: log end that no longer moves
        produced_by = time.time()

        def stable() -> bool:
            members = len(status().get("members", {}))
            return (
                members == 3
                and prom.scalar(f"sum(groupkit_consumergroup_assigned_partitions{{{g}}})")
                == PARTITIONS
                and prom.scalar(f"max(groupkit_consumergroup_members{{{g}}})") == members
                and prom.scalar(f"count(groupkit_consumergroup_generation{{{g}}})") == members
                and prom.scalar(
                    f"max(groupkit_consumergroup_generation{{{g}}}) - "
                    f"min(groupkit_consumergroup_generation{{{g}}})"
                )
                == 0
            )

        wait_for(stable, 30, f"a stable group of 3 in Prometheus:\n{why()}", step=0.5)
        assert demo.poll() is None, why()

        # -- every member was scraped, including the one added and the one removed --------
        instances = prom.query(
            'count by (instance) (count_over_time(up{job="groupkit-demo"}[10m]))'
        )
        assert len(instances) == 4, instances

        # -- every dashboard query returns data ---------------------------------------------
        empty = []
        assert re.fullmatch(r"[A-Za-z0-9_-]+", group)  # a regex matching only itself
        for title, expr in dashboard_exprs():
            q = instantiate(expr, group_regex=group, rate_interval="1m")
            if not prom.query(q):
                empty.append(f"{title}: {q}")
        assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

        # -- kafka_exporter's names: the members, and the consumption panel -----------------
        cg = f'consumergroup="{group}"'
        wait_for(lambda: prom.scalar(f"sum(kafka_consumergroup_members{{{cg}}})") == 3, 15,
                 "kafka_consumergroup_members to count the 3 members")  # fmt: skip
        consume = exporter_expr(KAFKA_EXPORTER_PANELS["Message consume per minute"], topic)
        assert [r for r in prom.query(consume) if r["metric"]["consumergroup"] == group], consume

        # -- kafka-lag-exporter's time-lag panels: every partition, and the group's largest --
        def time_lags() -> tuple[int, float | None, float | None, float | None]:
            """Partitions with a time lag, and the group's largest by the three panels."""
            at = time.time()
            q = {t: prom.query(lag_exporter_expr(e, group), at)
                 for t, e in KAFKA_LAG_EXPORTER_PANELS.items()}  # fmt: skip
            parts = len({(r["metric"]["topic"], r["metric"]["partition"])
                         for r in q["Consumer Group Lag Partition Seconds"]})  # fmt: skip

            def most(rows: list[dict[str, Any]]) -> float | None:
                return max((float(r["value"][1]) for r in rows), default=None)

            per_partition = q["Consumer Group Lag Partition Seconds"]
            return (parts, most(q["Consumer Group Max Lag Seconds"]), most(per_partition),
                    most(q["$consumer_group"]))  # fmt: skip

        # Every partition lags (the producer outran the members), so each has a time lag, and
        # the largest of the members' maxima is the largest over the partitions, both as
        # scraped at the same scrapes.
        wait_for(lambda: time_lags()[0] == PARTITIONS, 15,
                 "kafka_consumergroup_group_lag_seconds of every partition")  # fmt: skip
        parts, max_panel, partition_panel, group_panel = time_lags()
        print(f"\ntime lag: largest {max_panel} s over {parts} partitions")
        assert max_panel is not None and max_panel > 0, max_panel
        assert max_panel == partition_panel == group_panel, (max_panel, partition_panel,
                                                             group_panel)  # fmt: skip

        def exporter_lags(at: float) -> tuple[float | None, float | None]:
            """The group's lag by the dashboard's lag panel and by the alert rule's sum."""
            panel = exporter_expr(KAFKA_EXPORTER_PANELS["Lag by  Consumer Group"], topic)
            rule = KAFKA_EXPORTER_ALERT.removesuffix(" > 50")
            out = []
            for expr in (panel, rule):
                mine = [r for r in prom.query(expr, at) if r["metric"]["consumergroup"] == group]
                out.append(float(mine[0]["value"][1]) if len(mine) == 1 else None)
            return out[0], out[1]

        # -- per-member lag adds up to the group's lag (the sandwich of the docstring) -----
        members_sum = f"sum(groupkit_consumergroup_lag_sum{{{g}}})"
        exporter_series = f"count(kafka_consumergroup_lag{{{cg}}})"
        lag_series = f"groupkit_consumergroup_lag{{{g}}}"
        partitions_sum = f"sum({lag_series})"
        generation = f"max(groupkit_consumergroup_generation{{{g}}})"
        last_scrape = f"min(timestamp(groupkit_consumergroup_lag_sum{{{g}}}))"
        for _attempt in range(3):
            # Query the scrapes that have ended: Prometheus stamps a sample with its scrape's
            # start and ingests it at the scrape's end, so a scrape that began before "now" may
            # land between two queries at "now". Each member is scraped one scrape after
            # another, so no sample stamped at or before every member's newest is still due.
            # A member's newest sample may be seconds old (a slow scrape): its lag would be of
            # a log end the producer has moved since, below the measurement.
            wait_for(lambda: (prom.scalar(last_scrape) or 0) > produced_by, 15,
                     "a scrape of every member begun after the producer stopped")  # fmt: skip
            t1 = prom.scalar(last_scrape) or 0.0
            before = prom.scalar(members_sum, at=t1)
            gen_before = prom.scalar(generation, at=t1)
            # A partition between owners (a handoff needs no new generation) has no lag series
            # at that scrape, and its lag would be missing from the sum.
            series_before = prom.scalar(f"count({lag_series})", at=t1)
            exporter_before = exporter_lags(t1)
            exporter_series_before = prom.scalar(exporter_series, at=t1)
            # The same scrapes, partition by partition, sum to the same number.
            assert before == prom.scalar(partitions_sum, at=t1)
            # A sample stamped at or before t1 may come from a scrape still reading offsets up
            # to SCRAPE_TIMEOUT_S later: measure only once every such scrape has ended, or the
            # "before" sum may be younger than the measurement. Prometheus scrapes a target
            # one scrape after another, so once every member's newest sample is stamped after
            # t1, the scrapes stamped before it are over.
            wait_for(lambda t1=t1: (prom.scalar(last_scrape) or 0) > t1, 15,  # type: ignore[misc]
                     "a scrape of every member begun after the Prometheus sums")  # fmt: skip
            measured_by_partition = admin_lags(admin, group, topic)
            measured = sum(measured_by_partition.values())
            t2 = time.time()
            # Each member's next scrape must ask the brokers after t2 (its offsets are reused
            # for 0.5 s), so wait for scrapes well after it.
            wait_for(lambda t2=t2: (prom.scalar(last_scrape) or 0) > t2 + 1.0, 15,  # type: ignore[misc]
                     "a scrape of every member after the AdminClient measurement")  # fmt: skip
            t3 = time.time()
            after = prom.scalar(members_sum, at=t3)
            gen_after = prom.scalar(generation, at=t3)
            covered = prom.scalar(f"sum(groupkit_consumergroup_assigned_partitions{{{g}}})", t3)
            series_after = prom.scalar(f"count({lag_series})", at=t3)
            exporter_after = exporter_lags(t3)
            exporter_series_after = prom.scalar(exporter_series, at=t3)
            if (gen_before == gen_after
                    and covered == PARTITIONS == series_before == series_after
                    == exporter_series_before == exporter_series_after):  # fmt: skip
                break
        else:
            pytest.fail("the group kept rebalancing during the lag comparison")
        assert before is not None and after is not None
        print(
            f"\nlag: Prometheus before {before:.0f} >= AdminClient {measured} >= after {after:.0f}"
        )
        assert before >= measured >= after, (
            f"{(before, measured, after)}\nAdminClient by partition: {measured_by_partition}"
            f"\nscraped at {t1}:\n{scraped_lags(prom, group, t1)}"
            f"\nscraped at {t3}:\n{scraped_lags(prom, group, t3)}"
        )
        assert measured > 0, "the producer was meant to outrun the members"
        # kafka_exporter's names, read by its dashboard's panel and its alert rule's sum: the
        # same lag (each sample may come from the scrape's own reading of the offsets).
        for i, source in enumerate(("dashboard 7589's panel", "the alert rule's sum")):
            b, a = exporter_before[i], exporter_after[i]
            print(f"lag by {source}: {b} >= {measured} >= {a}")
            assert b is not None and a is not None, source
            assert b >= measured >= a, (source, b, measured, a)
        if after > 50:
            fired = prom.query(KAFKA_EXPORTER_ALERT, at=t3)
            assert [r for r in fired if r["metric"]["consumergroup"] == group], fired
    finally:
        code = stop_demo(demo)
        out.close()
    text = out_path.read_text()
    assert code == 0, text[-3000:]
    assert "stopping ..." in text, text[-3000:]  # by the SIGINT, not by --duration
    assert "exited cleanly" in text and "killed" not in text, text[-3000:] + hung(demo_dir)


def test_alert_rules_fire_in_the_demo(tmp_path: Path, bootstrap: str, admin: AdminClient) -> None:
    """The shipped alert rules fire on the demo, evaluated by the real Prometheus.

    A test copy of deploy/prometheus/groupkit-alerts.yml only shortens the waits: every `for:`
    to 3 s, the 2-minute windows to 15 s, the lag threshold to 1000. With two members that keep
    up with the producer and sample their partitions' Burrow status every second (a window of
    ten seconds):

    1. one member stops handing out records (the demo worker's SIGUSR1) while the producer goes
       on: GroupkitMemberStopped names that member and no other, and GroupkitLagHigh the group;
       the member, whose sampler goes on, sees its partitions lag with no commit for longer
       than their window spans: GroupkitPartitionStatusErr, with partitions of that member only
       and status STOP;
    2. a garbage record in the group's control partition: GroupkitControlRecordsRejected;
    3. GroupkitNoLeader and GroupkitMemberDown stay silent (the stopped member still leads or
       follows: its control thread goes on).
    """
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus" / "groupkit-alerts.yml").read_text())
    for rule in (r for g in doc["groups"] for r in g["rules"]):
        if "for" in rule:
            rule["for"] = "3s"
        rule["expr"] = rule["expr"].replace("[2m]", "[15s]").replace("> 10000", "> 1000")
    rules = tmp_path / "groupkit-alerts.yml"
    rules.write_text(yaml.safe_dump(doc))
    with contextlib.ExitStack() as stack:
        prom, demo_dir = stack.enter_context(run_prometheus(tmp_path, [rules]))
        out_path = tmp_path / "demo.out"
        out = stack.enter_context(out_path.open("wb"))
        demo = subprocess.Popen(
            [sys.executable, "-m", "groupkit.cli", "demo", "--bootstrap-servers", bootstrap,
             "--members", "2", "--partitions", str(PARTITIONS), "--rate", "200",
             "--max-rate", "0", "--churn-interval", "0", "--duration", "150",
             "--metrics-port", "0", "--state-dir", str(demo_dir), "--no-table",
             "--lag-status-interval-ms", "1000"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

        def why() -> str:
            return out_path.read_text(errors="replace")[-3000:]

        def firing() -> list[dict[str, str]]:
            return [r["metric"] for r in prom.query('ALERTS{alertstate="firing"}')]

        try:
            wait_for(lambda: demo.poll() is None and len(prom.query(
                'up{job="groupkit-demo"} == 1')) >= 2, 60,
                f"Prometheus to scrape 2 members:\n{why()}")  # fmt: skip
            status = json.loads((demo_dir / "status.json").read_text())
            group = status["group"]
            g = f'group="{group}"'
            wait_for(lambda: prom.scalar(f"sum(groupkit_consumergroup_assigned_partitions{{{g}}})")
                     == PARTITIONS and prom.scalar(f"max(groupkit_consumergroup_members{{{g}}})")
                     == 2, 30, f"2 members owning the {PARTITIONS} partitions")  # fmt: skip
            # Burrow judges a window once it holds half its commits (minimum-complete): give
            # the owners' windows that many samples after every partition has one.
            wait_for(lambda: prom.scalar(f"count(groupkit_consumergroup_partition_status{{{g}}}"
                                         " == 1)") == PARTITIONS, 30,
                     "a status of every partition")  # fmt: skip
            time.sleep(LAG_STATUS_MINIMUM_COMPLETE * LAG_STATUS_WINDOW * 1.0 + 1.0)
            status = json.loads((demo_dir / "status.json").read_text())
            name, stopped = sorted(status["members"].items())[0]
            assert stopped["member_id"], status
            assert not firing(), firing()  # a healthy group

            os.kill(stopped["pid"], signal.SIGUSR1)
            n = len(admin.list_topics("__groupkit", timeout=10).topics["__groupkit"].partitions)
            p = Producer({"bootstrap.servers": bootstrap})
            p.produce("__groupkit", b"not a groupkit record", key=b"x",
                      partition=partition_for_group(group, n))  # fmt: skip
            assert p.flush(10) == 0
            expected = {"GroupkitMemberStopped", "GroupkitLagHigh",
                        "GroupkitControlRecordsRejected", "GroupkitPartitionStatusErr"}  # fmt: skip
            wait_for(lambda: {a["alertname"] for a in firing()} >= expected, 90,
                     f"the alerts {sorted(expected)} to fire: {firing()}")  # fmt: skip
            alerts = firing()
            print(f"\nfiring: {sorted((a['alertname'], a.get('member', '')) for a in alerts)}")
            assert {a["alertname"] for a in alerts} == expected, alerts
            assert [a["member"] for a in alerts if a["alertname"] == "GroupkitMemberStopped"] == [
                stopped["member_id"]
            ], (name, alerts)
            assert all(a["group"] == group for a in alerts), alerts
            owned = {(r["metric"]["topic"], r["metric"]["partition"]) for r in prom.query(
                f'groupkit_consumergroup_lag{{{g},member="{stopped["member_id"]}"}}')}  # fmt: skip
            errs = [a for a in alerts if a["alertname"] == "GroupkitPartitionStatusErr"]
            assert {(a["topic"], a["partition"]) for a in errs} <= owned, (owned, errs)
            assert {a["status"] for a in errs} == {"STOP"}, errs
            assert demo.poll() is None, why()
        finally:
            code = stop_demo(demo)
        assert code == 0, why()  # the stopped member too leaves cleanly
