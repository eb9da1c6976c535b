"""One line per event of a simulated run, for `python -m tidelog.testing.sim --trace`.

Rules of this file:
- A message is described by every field it has, named (`prev_offset=3`), so the trace
  follows the message types as they change; batches are shown as `base..last eEPOCH`.
- Describing costs time: callers describe only when a trace is asked for.
"""

from __future__ import annotations

import dataclasses

from tidelog.core.liveness import LivenessMessage
from tidelog.core.messages import Message
from tidelog.records import read_header

# Fields every message has, shown first and in short: `AppendRequest 1->2 e3`.
HEAD_FIELDS = ("sender", "recipient", "epoch")


def describe_batches(batches: tuple[bytes, ...] | list[bytes]) -> str:
    parts = []
    for batch in batches:
        header = read_header(batch)
        parts.append(f"{header.base_offset}..{header.last_offset} e{header.epoch}")
    return "[" + ", ".join(parts) + "]"


def describe_message(msg: Message | LivenessMessage) -> str:
    """`AppendRequest 1->2 e3 prev_offset=2 ... batches=[2..2 e3]`: every field, named."""
    epoch = getattr(msg, "epoch", None)
    head = f"{type(msg).__name__} {msg.sender}->{msg.recipient}"
    head += "" if epoch is None else f" e{epoch}"
    rest = []
    for item in dataclasses.fields(msg):
        if item.name in HEAD_FIELDS:
            continue
        value = getattr(msg, item.name)
        if item.name == "batches":
            rest.append(f"batches={describe_batches(value)}")
        elif item.name == "producers":  # a reset's producer snapshot: how many entries
            rest.append(f"producers={len(value)}")
        else:
            rest.append(f"{item.name}={value}")
    return " ".join([head, *rest])
