"""The media types (Content-Type values) of the HTTP API, written once for the server and the client.

A chunk upload names its format by its Content-Type (``?format=`` overrides it, e.g. for
``application/octet-stream``); an events batch is JSON. The server accepts the common aliases
of each format; the client (:mod:`ingest.client`) sends the first, canonical one. Kept free of
imports (no FastAPI, no Arrow): the client loads it.
"""

from __future__ import annotations

__all__ = [
    "CSV",
    "FORMAT_MEDIA_TYPES",
    "JSON",
    "JSONL",
    "OCTET_STREAM",
    "PARQUET",
    "UPLOAD_MEDIA_TYPES",
    "media_type",
]

JSONL = "application/x-ndjson"
CSV = "text/csv"
PARQUET = "application/vnd.apache.parquet"
JSON = "application/json"
OCTET_STREAM = "application/octet-stream"

# The media type of each chunk format (the names of :class:`ingest.formats.Format`).
FORMAT_MEDIA_TYPES: dict[str, str] = {"jsonl": JSONL, "csv": CSV, "parquet": PARQUET}

# Every media type a chunk upload may have, and the format it names.
UPLOAD_MEDIA_TYPES: dict[str, str] = {
    JSONL: "jsonl",
    "application/jsonl": "jsonl",
    "application/json-lines": "jsonl",
    "application/jsonlines": "jsonl",
    "application/x-jsonlines": "jsonl",
    CSV: "csv",
    PARQUET: "parquet",
    "application/x-parquet": "parquet",
    "application/parquet": "parquet",
}


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower case, without parameters ("" if none)."""
    return (content_type or "").split(";")[0].strip().lower()
