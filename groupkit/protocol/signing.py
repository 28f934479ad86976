"""Signing control records: the hook the codec calls, and the HMAC signer groupkit ships.

The tag covers the key bytes and the payload (codec.py). A group whose members share a key
signs every record it writes and rejects any record that is unsigned or whose tag does not
verify (``unsigned``, ``bad_signature``); tombstones carry no value, so they cannot be signed.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Protocol


class Signer(Protocol):
    """Signs and verifies record bytes: a group's shared key plugs in here."""

    def sign(self, data: bytes) -> bytes: ...

    def verify(self, data: bytes, tag: bytes) -> bool: ...


class HmacSigner:
    """HMAC-SHA256 with a key shared by the group's members."""

    def __init__(self, key: bytes) -> None:
        if not key:
            raise ValueError("HMAC key must not be empty")
        self._key = key

    def sign(self, data: bytes) -> bytes:
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def verify(self, data: bytes, tag: bytes) -> bool:
        return hmac.compare_digest(self.sign(data), tag)
