"""Result fingerprints: results compared across evaluators and engines without keeping them."""

from __future__ import annotations

import hashlib


class Digest:
    """An order-independent fingerprint of a multiset of results."""

    def __init__(self, keep: int = 0):
        self.count = 0
        self.sum = 0
        self.keep = keep
        self.items: list[str] = []

    def add(self, result) -> None:
        text = canonical_result(result)
        self.count += 1
        self.sum = (self.sum + int.from_bytes(hashlib.blake2b(text.encode(), digest_size=16).digest(), "big")) \
            & ((1 << 128) - 1)
        if len(self.items) < self.keep:
            self.items.append(text)

    def to_json(self) -> dict:
        return {"count": self.count, "hash": f"{self.sum:032x}"}


def canonical_result(result) -> str:
    """One result as a string that is equal across evaluators when the result is."""
    if result.bindings is not None:
        body = ";".join(f"{k}={v}" for k, v in sorted(result.bindings.items()))
    else:
        body = "|".join(sorted(str(t) for t in result.triples or ()))
    events = ",".join(f"{e.stream}@{e.time}" for e in result.events)
    return f"{result.time}|{body}|{events}"
