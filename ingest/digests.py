"""Digests of chunk content: what an idempotency key committed, to tell a retry from a reuse.

A retry sends the same bytes under the same key and gets the original result; a key reused
for other bytes is a conflict (:class:`~ingest.errors.IdempotencyConflictError`), never a silent
success that drops the new data. The digest is ``sha256:<hex>`` of the bytes as the producer
sent them (file, upload body or events body), so the CLI, the HTTP API and its Python client
agree on it. Kept free of heavy imports: the HTTP client uses it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

PREFIX = "sha256:"


def digest_pieces(pieces: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for piece in pieces:
        h.update(piece)
    return PREFIX + h.hexdigest()


def digest_bytes(data: bytes) -> str:
    return PREFIX + hashlib.sha256(data).hexdigest()
