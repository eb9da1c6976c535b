"""The records a coordinator writes to `__consumer_offsets`: keys and values as JSON.

Rules of this file:
- A key names what a record is about: `{"type": "offset", "group", "topic", "partition"}`
  or `{"type": "group", "group"}`; a null value is a tombstone (compaction's delete).
- JSON is written with sorted keys and no spaces, so equal contents are equal bytes.
- Records read back from our own log (the replication core checked their CRC) that are
  not such JSON are skipped by the coordinator, never trusted.
"""

from __future__ import annotations

import json
from typing import Any


def encode_json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return encode_json(
        {"type": "offset", "group": group_id, "topic": topic, "partition": partition}
    )


def group_key(group_id: str) -> bytes:
    return encode_json({"type": "group", "group": group_id})

