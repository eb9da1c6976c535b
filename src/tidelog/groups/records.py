"""The records a coordinator writes to `__consumer_offsets`: keys and values as JSON.

Rules of this file:
- A key names what a record is about: `{"type": "offset", "group", "topic", "partition"}`
  or `{"type": "group", "group"}`; a null value is a tombstone (compaction's delete).
- JSON is written with sorted keys and no spaces, so equal contents are equal bytes; bytes
  (subscriptions, assignments) are base64.
- Records read back from our own log (the replication core checked their CRC) that are
  not such JSON are skipped by the coordinator, never trusted: `member_of` raises
  KeyError, TypeError, ValueError or binascii.Error on anything it cannot read.

Record format:
    key {"type": "offset", "group": G, "topic": T, "partition": P}
        value {"offset": O, "leader_epoch": E, "metadata": M, "commit_ms": MS} | null
    key {"type": "group", "group": G}
        value {"protocol_type", "protocol", "generation", "leader", "state_ms",
               "members": [{member_id, group_instance_id, client_id, client_host,
                            session_timeout_ms, rebalance_timeout_ms, subscription (base64),
                            assignment (base64)}]} | null
"""

from __future__ import annotations

import base64
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


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int) -> bytes:
    return encode_json(
        {
            "offset": offset,
            "leader_epoch": leader_epoch,
            "metadata": metadata,
            "commit_ms": commit_ms,
        }
    )


def group_value(
    *,
    protocol_type: str | None,
    protocol: str | None,
    generation: int,
    leader: str | None,
    state_ms: int,
    members: list[dict[str, Any]],
) -> bytes:
    """A group's generation; each member's `subscription` and `assignment` are bytes."""
    stored = [
        {
            **member,
            "protocol": protocol,
            "subscription": base64.b64encode(member["subscription"]).decode(),
            "assignment": base64.b64encode(member["assignment"]).decode(),
        }
        for member in members
    ]
    return encode_json(
        {
            "protocol_type": protocol_type,
            "protocol": protocol,
            "generation": generation,
            "leader": leader,
            "state_ms": state_ms,
            "members": stored,
        }
    )


def member_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A member read back from a group record, its fields checked and typed."""
    group_instance_id = entry.get("group_instance_id")
    return {
        "member_id": str(entry["member_id"]),
        "group_instance_id": None if group_instance_id is None else str(group_instance_id),
        "client_id": str(entry.get("client_id", "")),
        "client_host": str(entry.get("client_host", "")),
        "session_timeout_ms": int(entry["session_timeout_ms"]),
        "rebalance_timeout_ms": int(entry["rebalance_timeout_ms"]),
        "subscription": base64.b64decode(entry.get("subscription", ""), validate=True),
        "assignment": base64.b64decode(entry.get("assignment", ""), validate=True),
    }
