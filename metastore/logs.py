"""Structured logs of every long-running process (the roll daemon, the HTTP server): one JSON
object per line on standard error.

Every record carries ``ts``, ``level``, ``logger``, ``msg`` and, when given, ``event`` (a
stable dotted name such as ``roll.done``) and the fields passed in ``extra`` (``table``,
``partition``, ``seconds``, …), so log pipelines can filter on fields rather than on text.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from metastore.models import iso

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = _jsonable(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(
            f"{k}={_jsonable(v)}"
            for k, v in record.__dict__.items()
            if k not in _STANDARD and not k.startswith("_") and k != "event"
        )
        ts = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        text = f"{ts}Z {record.levelname:<7} {record.getMessage()}" + (f"  {fields}" if fields else "")
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Send every log record of the process to standard error in ``fmt`` (json or text)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # APScheduler logs every job run at INFO ("Running job …"): noise next to our own events.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    # Alembic narrates every migration step at INFO when the metastore opens.
    logging.getLogger("alembic").setLevel(logging.WARNING)


def event(logger: logging.Logger, level: int, name: str, msg: str, **fields: Any) -> None:
    """Log ``msg`` as the structured event ``name`` with ``fields``."""
    exc_info = fields.pop("exc_info", None)
    logger.log(level, msg, extra={"event": name, **fields}, exc_info=exc_info)
