"""Coverage-guided fuzzing of the control-record decoder and the replay with atheris (optional).

Not collected by pytest (the file name does not start with ``test_``). Run::

    pip install atheris
    python tests/fuzz_records_atheris.py -runs=200000          # or -max_total_time=60

Each input is split into one to four records (mostly under valid keys and value headers, so
the JSON and the replay rules are reached), decoded (only ``RecordRejected`` may escape) and
replayed into a fresh ``GroupState`` with and without a group key (nothing may escape).
libFuzzer options (``-runs``, ``-max_total_time``, a corpus folder) pass through.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from groupkit.errors import RecordRejected
    from groupkit.protocol.records import (
        AssignmentKey,
        HmacSigner,
        MemberKey,
        decode,
        encode_key,
    )
    from groupkit.protocol.state import GroupState

SIGNER = HmacSigner(b"k")
#: valid keys and value headers, so most inputs reach the JSON and the replay rules
KEYS = [encode_key(MemberKey("g", "m1")), encode_key(MemberKey("g", "m2")),
        encode_key(AssignmentKey("g"))]  # fmt: skip
HEADS = [b"\x01\x00", b"\x01\x01", b""]


def a_record(fdp: atheris.FuzzedDataProvider) -> tuple[bytes, bytes | None]:
    if fdp.ConsumeBool():
        key = fdp.PickValueInList(KEYS)
    else:
        key = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 40))
    if fdp.ConsumeIntInRange(0, 9) == 0:
        return key, None
    head = fdp.PickValueInList(HEADS)
    return key, head + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4096))


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    records = [a_record(fdp) for _ in range(fdp.ConsumeIntInRange(1, 4))]
    for key, value in records:
        with contextlib.suppress(RecordRejected):
            decode(key, value)
    for verifier in (None, SIGNER):
        state = GroupState("g", 3000, 5000, verifier=verifier)
        for i, (key, value) in enumerate(records):
            state.replay(i, key, value, 1000 + 100 * i)


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
