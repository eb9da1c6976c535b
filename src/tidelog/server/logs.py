"""How a broker logs: one handler on stderr, in the text or the JSON format (`--log-format`).

Rules of this file:
- `configure_logging` is the one place a broker's logging is set up (`tidelog broker` and
  `server.app.run` both call it). Like `logging.basicConfig`, it does nothing when the root
  logger has a handler already: a second call, or a host that set up its own, keeps that.
- `text` is the format brokers have always written: `TIME LEVEL LOGGER: MESSAGE`.
- `json` writes one JSON object per line: `time` (ISO 8601, UTC, milliseconds), `level`,
  `node` (this node's id), `logger`, `event` (the formatted message), then `topic`,
  `partition` and `epoch` when the call site passed them, and `exception` (the formatted
  traceback) when the record carries one. A newline in a message or traceback is escaped,
  so a record is always exactly one line.
- A call site about one partition passes `extra=partition_fields(topic, partition, epoch)`.
  The text format ignores those fields: its lines say the same in their message.
- Standard library only, and nothing of tidelog: anything in the server may import it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The fields `partition_fields` sets on a record, in the order JSON lines carry them.
PARTITION_FIELDS = ("topic", "partition", "epoch")


def partition_fields(topic: str, partition: int, epoch: int | None = None) -> dict[str, object]:
    """The `extra=` of a log call about one partition (`epoch` None: not known there)."""
    fields: dict[str, object] = {"topic": topic, "partition": int(partition)}
    if epoch is not None:
        fields["epoch"] = int(epoch)
    return fields


def iso_time(created_s: float) -> str:
    """A record's time as ISO 8601 in UTC with milliseconds: `2026-01-02T03:04:05.678Z`."""
    moment = datetime.fromtimestamp(created_s, tz=UTC)
    return moment.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module's rules)."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": iso_time(record.created),
            "level": record.levelname,
            "node": self.node_id,
            "logger": record.name,
            "event": record.getMessage(),
        }
        for name in PARTITION_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a field some call site passed that JSON has no type for is still
        # written (as its str), never a record lost to a TypeError.
        return json.dumps(entry, default=str)


def formatter_for(log_format: str, *, node_id: int) -> logging.Formatter:
    """The formatter of `--log-format` (one of LOG_FORMATS, checked by the config)."""
    assert log_format in LOG_FORMATS, log_format
    if log_format == "json":
        return JsonFormatter(node_id)
    return logging.Formatter(TEXT_FORMAT)


def configure_logging(*, log_level: str, log_format: str, node_id: int) -> None:
    """Log records at `log_level` and above to stderr in `log_format` (see the rules)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(log_format, node_id=node_id))
    logging.basicConfig(level=log_level.upper(), handlers=[handler])
