"""Refusing a group whose members speak another protocol version (docs/protocol-v2.md).

Each version's replay refuses the other's member records (``other_version``), so two members
of different versions in one group would each see the other as absent and hand out the same
partitions. A member therefore refuses to take part once its replay has met a member record of
the other version less than a session older than the log's time: that member is in the group.
An older record is a member long gone whose record the compacted log still keeps (a group that
changed its version), which must not keep the new version out. Nor does a record that poses as a
live member of this version (``Replayed.posing``): its process writes this version's records, so
another wrote it, and a forged record must not stop a group.
"""

from __future__ import annotations

import time

from groupkit.errors import ConfigError
from groupkit.protocol.records import LeaseKey, MemberKey, VerdictKey
from groupkit.protocol.state import Replayed
from groupkit.protocol.vocab import RejectReason


class VersionGuard:
    """Remembers the newest record of the other version a replay refused, and says whether
    it means a live member of that version (:meth:`check`)."""

    def __init__(self, group_id: str, version: int, session_timeout_ms: int) -> None:
        self.group_id = group_id
        self.version = version
        self.session_timeout_ms = session_timeout_ms
        #: (who wrote it, its broker time, why it was refused) of the newest one
        self._other: tuple[str, int, str] | None = None

    def rejected(self, res: Replayed, ts: int) -> None:
        """Note a record the main log's replay refused."""
        if res.reason != RejectReason.OTHER_VERSION or res.posing:
            return  # (posing: a forged or corrupted record, counted by the replay alone)
        # a member's record; in a version-2 group also its leader's lease and its judges'
        # verdicts, which only a running group writes
        if isinstance(res.key, MemberKey | VerdictKey):
            who = res.key.member_id
        elif isinstance(res.key, LeaseKey):
            who = "the leader"
        else:
            return
        if self._other is None or ts >= self._other[1]:
            self._other = (who, ts, res.detail or "")

    def check(self, log_time: int) -> None:
        """Raise :class:`ConfigError` if a member of the other version is in the group: its
        newest record is less than a session older than the log's time and the wall clock (a
        group nobody writes to any more has a log time that stands still)."""
        other = self._other
        now = max(log_time, int(time.time() * 1000))
        if other is not None and now - other[1] < self.session_timeout_ms:
            raise ConfigError(
                f"group {self.group_id!r}: {other[0]} speaks another protocol version "
                f"({other[2]}); this member speaks version {self.version} "
                "(groupkit.protocol.version): every member of a group must speak the same one"
            )
