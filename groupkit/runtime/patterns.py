"""Regex subscriptions: topics named by a pattern, as librdkafka spells them (``^orders-.*``).

The control log knows only concrete topics: a member's record lists the topics it subscribes
to, and the leader plans over their partitions. So a pattern never reaches the log. Each member
resolves its own patterns against the cluster's topics and announces the result as its
subscription (``Coordinator.set_subscription``: its next record says so); when the set of
matching topics changes, it announces the new set, and the leader plans for what changed, as for
any change of subscription. With the cooperative protocol only the partitions of the topics that
came or went move; the others keep their owners and are never paused.

- A topic starting with ``^`` is a pattern, the rest are names (mixing both works, as in
  librdkafka). A name is subscribed whether or not it exists now; a pattern subscribes the topics
  that match it now, and the member looks again every ``topic.metadata.refresh.interval.ms``
  (librdkafka's setting for the same purpose, default 5 minutes; ``<= 0``: never again), so a
  topic created later joins and a deleted one leaves within that interval.
- Members look each on their own clock, so one finds a new topic first. Its record says so in
  the log every member reads, and a member whose patterns match a topic a peer subscribes to
  (or no longer subscribes to) looks at once (:class:`TopicWatcher`, ``peers``): the group's
  subscriptions differ for a moment, not for up to an interval.
- Matching is Python's ``re.search`` of the whole pattern (``^`` included) in the topic name,
  the way librdkafka calls ``regexec`` (POSIX extended syntax, or its bundled engine where libc
  has none). They agree on the common subset: literals, ``.``, ``[...]``, ``*``, ``+``, ``?``,
  ``{m,n}``, ``|``, ``(...)``, ``$``. Python-only syntax (``\\d``, ``(?:...)``, lazy
  quantifiers, look-arounds) is accepted here but is not librdkafka's; keep patterns to the
  common subset if other (librdkafka) consumers use them too.
- As in librdkafka, a topic whose metadata carries an error is not matched, and a topic matching
  ``topic.blacklist`` (librdkafka's comma-separated list of patterns) never is. Nothing else is
  excluded: like librdkafka (and unlike Java's ``exclude.internal.topics``), ``^.*`` matches
  internal topics, groupkit's control topic included.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from groupkit.errors import ConfigError
from groupkit.log import get_logger

_log = get_logger("groupkit.consumer")

#: librdkafka's default ``topic.metadata.refresh.interval.ms``
DEFAULT_REFRESH_MS = 300_000
#: how often the peers' subscriptions in the log are compared (in memory: cheap)
_PEEK_S = 0.1


def is_pattern(topic: str) -> bool:
    """Whether ``topic`` is a regex subscription (librdkafka: it starts with ``^``)."""
    return topic.startswith("^")


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise ConfigError(f"{what} {pattern!r} is not a valid regular expression: {e}") from e


class Subscription:
    """What the application subscribed to: ``names`` and compiled ``patterns``.

    ``blacklist``: librdkafka's ``topic.blacklist`` (comma-separated patterns), if set.
    """

    def __init__(self, topics: Iterable[str], blacklist: str | None = None) -> None:
        topics = sorted(set(topics))
        self.names = [t for t in topics if not is_pattern(t)]
        self.patterns = [_compile(t, "topic pattern") for t in topics if is_pattern(t)]
        self._blacklist = [
            _compile(p.strip(), "topic.blacklist pattern")
            for p in (blacklist or "").split(",")
            if p.strip()
        ]
        self._matches: dict[str, bool] = {}  # topic -> matches (a cache: peers repeat)

    def matches(self, topic: str) -> bool:
        """Whether a pattern (not a name) takes ``topic``, if it exists without error."""
        hit = self._matches.get(topic)
        if hit is None:
            hit = any(p.search(topic) for p in self.patterns) and not any(
                b.search(topic) for b in self._blacklist
            )
            if len(self._matches) > 100_000:  # bounded, whatever the cluster's churn
                self._matches.clear()
            self._matches[topic] = hit
        return hit

    def resolve(self, topics: Mapping[str, Any]) -> list[str]:
        """The concrete topics subscribed to, given the cluster's ``topics`` (name ->
        ``TopicMetadata``): every name, and every error-free topic a pattern matches."""
        matched = {t for t, md in topics.items()
                   if getattr(md, "error", None) is None and self.matches(t)}  # fmt: skip
        return sorted(matched.union(self.names))


class TopicWatcher:
    """Resolves a subscription's patterns again every ``interval_s`` (a daemon thread) and calls
    ``on_change(topics)`` when the concrete topics differ from the last ones (``current``).

    ``list_topics`` is the admin client's (thread-safe; the data consumer's handle belongs to
    the ``poll`` thread). A failed look-up changes nothing: it is tried again next time.
    ``peers`` gives the topics the group's live members subscribe to (from the log): when the
    ones among them that a pattern matches change, it looks at once (every ``_PEEK_S``).
    """

    def __init__(
        self,
        subscription: Subscription,
        current: Sequence[str],
        list_topics: Callable[[], Mapping[str, Any]],
        on_change: Callable[[list[str]], None],
        interval_s: float,
        peers: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.subscription = subscription
        self._peers = peers
        self.current = list(current)
        self._list_topics = list_topics
        self._on_change = on_change
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="groupkit-topic-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait: float = 0.5) -> None:
        """Stop looking; wait up to ``wait`` seconds for the thread to end, so that it lets go
        of the admin client (a look-up under way may take longer; it changes nothing once
        stopped)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(wait)

    def check(self) -> bool:
        """Resolve now; tell ``on_change`` if the topics changed. True if they did."""
        try:
            topics = self.subscription.resolve(self._list_topics())
        except Exception as e:  # a broker away: the next look tries again
            _log.warning("subscription.metadata_unavailable", error=str(e))
            return False
        if topics == self.current or self._stop.is_set():
            return False
        _log.info("subscription.changed", added=sorted(set(topics) - set(self.current)),
                  removed=sorted(set(self.current) - set(topics)))  # fmt: skip
        self.current = topics
        self._on_change(topics)
        return True

    def _peer_matches(self) -> frozenset[str] | None:
        if self._peers is None:
            return None
        try:
            return frozenset(t for t in self._peers() if self.subscription.matches(t))
        except Exception as e:  # (a member that is leaving: the next peek sees)
            _log.debug("subscription.peers_unavailable", error=str(e))
            return None

    def _run(self) -> None:
        due = time.monotonic() + self._interval
        seen = self._peer_matches()
        while not self._stop.wait(max(0.0, min(_PEEK_S, due - time.monotonic()))):
            peers = self._peer_matches()
            moved = peers is not None and seen is not None and peers != seen
            seen = peers if peers is not None else seen
            if moved or time.monotonic() >= due:
                self.check()
                due = time.monotonic() + self._interval
