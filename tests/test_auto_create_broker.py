"""Against a broker with Kafka's default ``auto.create.topics.enable=true``: groupkit's own
clients never have it create a topic they merely ask about, and the data consumer does only
where the user allows it (``allow.auto.create.topics``).

librdkafka lets producer-type handles, the admin client among them, ask the broker to create
any topic they look up. Such a broker would then create a missing control topic with its own
defaults (deleted by time, not compacted) before groupkit creates it as it must be, and the
member would refuse it. The session's broker does not auto-create (a typo'd topic must not
spring into being), so this module starts its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import ConfigResource

from groupkit import GroupConsumer
from groupkit.dev.broker import LocalBroker
from groupkit.errors import ConfigError
from groupkit.runtime.config import LIVENESS_TOPIC_SUFFIX
from tests.conftest import ReleasedAdmin, create_topic, local_version, unique_name
from tests.groupharness import pump

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module")
def auto_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = LocalBroker(tmp_path_factory.mktemp("auto-create-broker"), version=local_version(),
                         extra_properties={"auto.create.topics.enable": "true"})  # fmt: skip
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture
def looker(auto_bootstrap: str) -> Iterator[Any]:
    """An admin client of the test's own that does not create what it looks up."""
    admin = ReleasedAdmin({"bootstrap.servers": auto_bootstrap, "allow.auto.create.topics": False})
    yield admin
    admin.release()  # before the module's broker stops


def _exists(admin: Any, name: str) -> bool:
    t = admin.list_topics(topic=name, timeout=10).topics.get(name)
    return t is not None and t.error is None


def _config(admin: Any, name: str) -> dict[str, str]:
    res = ConfigResource(ConfigResource.Type.TOPIC, name)
    return {k: v.value for k, v in admin.describe_configs([res])[res].result(30).items()}


@pytest.fixture
def bootstrap(auto_bootstrap: str) -> str:
    """This module's broker, for the shared ``conf`` fixture (tests/conftest.py)."""
    return auto_bootstrap


def test_a_new_control_topic_is_created_as_groupkit_needs_it(
    conf: dict[str, Any], looker: Any
) -> None:
    topic = create_topic(looker, unique_name("data"), 2)
    c = GroupConsumer(conf)  # refused its own control topic when a look-up had created it
    try:
        control = conf["groupkit.control.topic"]
        assert _config(looker, control)["cleanup.policy"] == "compact"
        assert _config(looker, control)["message.timestamp.type"] == "LogAppendTime"
        liveness = _config(looker, control + LIVENESS_TOPIC_SUFFIX)
        assert liveness["message.timestamp.type"] == "LogAppendTime"
        c.subscribe([topic])
        pump([c], lambda: len(c.assignment()) == 2, 30, "the member to own the topic")
    finally:
        c.close()


def test_subscribe_creates_a_missing_topic_only_where_the_user_allows_it(
    conf: dict[str, Any], looker: Any
) -> None:
    absent = unique_name("absent")
    c = GroupConsumer({**conf, "topic.metadata.propagation.max.ms": 300})
    try:
        with pytest.raises(ConfigError, match="do not exist"):
            c.subscribe([absent])
        assert not _exists(looker, absent)  # nobody's look-up created it
    finally:
        c.close()

    wanted = unique_name("wanted")
    c = GroupConsumer({**conf, "group.id": unique_name("g"), "allow.auto.create.topics": True})
    try:
        c.subscribe([wanted])  # the data consumer's look-up creates it; subscribe waits for it
        assert _exists(looker, wanted)
        pump([c], lambda: len(c.assignment()) >= 1, 30, "the member to own the created topic")
    finally:
        c.close()
