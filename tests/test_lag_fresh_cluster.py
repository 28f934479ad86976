"""Lag fetching on a cluster whose group coordinator is not ready must not crash the process.

librdkafka's admin client dereferences a NULL consumer group when an OffsetFetch is answered
NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE (librdkafka#5040): ``list_consumer_group_offsets``
then kills the whole process with SIGSEGV. That answer is what a freshly started broker gives
(``__consumer_offsets`` is created on the first group request) and what a cluster gives while a
group coordinator moves. ``committed_offsets`` therefore reads offsets with a consumer when it
can. The check runs in a subprocess against a broker of its own that no group has touched yet,
so a crash is a failed test, not a dead test run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from groupkit.dev.broker import LocalBroker

CHECK = """
import sys
from groupkit.runtime.admin import connect_admin, create_topic
from groupkit.runtime.lag import fetch_lags
from groupkit.types import TopicPartition
admin = connect_admin({"bootstrap.servers": sys.argv[1]})
create_topic(admin, "t", 2)
import time
from groupkit.errors import BrokerError
for _ in range(40):  # a just-created partition may answer NOT_LEADER for a moment
    try:
        lags = fetch_lags(admin, "a-group-nobody-used",
                          [TopicPartition("t", 0), TopicPartition("t", 1)], "earliest")
        break
    except BrokerError as e:
        print(e, file=sys.stderr)
        time.sleep(0.25)
print(lags)
"""


def test_lag_of_a_group_on_a_fresh_broker(tmp_path: Path) -> None:
    with LocalBroker(tmp_path / "fresh") as broker:
        proc = subprocess.run([sys.executable, "-c", CHECK, broker.bootstrap],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.strip().splitlines()[-1] == (
        "{TopicPartition(topic='t', partition=0): 0, TopicPartition(topic='t', partition=1): 0}"
    )
