"""Size-prefixed frames, shared by the Kafka and the peer codecs.

A frame is a 4-byte big-endian signed size followed by that many bytes of payload (Kafka's
framing; the peer protocol uses the same). `FrameBuffer` reassembles frames from chunks of
any size. Rules: a frame size is checked against the buffer's named limit as soon as its
4 bytes arrive, before any of its payload is buffered; a size out of range raises
`ProtocolError`, after which the connection is unusable and must be closed.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Final, Literal, TypeVar

from tidelog.errors import TidelogError

FRAME_SIZE = struct.Struct(">i")
FRAME_HEADER_SIZE: Final = FRAME_SIZE.size
_T = TypeVar("_T")


class ProtocolError(TidelogError):
    """The peer sent bytes that do not follow the protocol: close that one connection."""


class _NeedData(enum.Enum):
    NEED_DATA = "NEED_DATA"


NEED_DATA: Final = _NeedData.NEED_DATA
"""Returned by `next_*()` when more bytes must be received first (h11's sentinel)."""

NeedData = Literal[_NeedData.NEED_DATA]


class FrameBuffer:
    """Reassembles size-prefixed frames of at most `frame_size_max` payload bytes."""

    def __init__(self, *, frame_size_max: int, name: str) -> None:
        assert frame_size_max > 0
        self._buffer = bytearray()
        self._frame_size_max = frame_size_max
        self._name = name
        self._failed = False

    @property
    def buffered_size_bytes(self) -> int:
        return len(self._buffer)

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; frames come out of `next_frame()`."""
        if self._failed:
            raise ProtocolError(f"{self._name}: data after a protocol error")
        self._buffer += data

    def next_frame(self) -> bytes | None:
        """The payload of the next complete frame, or None until more bytes arrive."""
        return self.next_frame_with(bytes)

    def next_frame_with(self, decode: Callable[[memoryview], _T]) -> _T | None:
        """`decode(payload)` of the next complete frame, or None until more bytes arrive.

        `payload` is a view into the receive buffer, valid only during the call: decode
        must copy what it keeps. This saves copying each frame out of the buffer.
        """
        if self._failed:
            raise ProtocolError(f"{self._name}: the stream failed earlier")
        buffer = self._buffer
        if len(buffer) < FRAME_HEADER_SIZE:
            return None
        (size,) = FRAME_SIZE.unpack_from(buffer, 0)
        if size < 0 or size > self._frame_size_max:
            self._failed = True
            raise ProtocolError(
                f"{self._name}: frame of {size} bytes outside [0, {self._frame_size_max}]"
            )
        end = FRAME_HEADER_SIZE + size
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view, view[FRAME_HEADER_SIZE:end] as payload:
            result = decode(payload)
        # Deleting from the front of a bytearray is amortized O(1) in CPython.
        del buffer[:end]
        return result

    def fail(self) -> None:
        """Mark the stream unusable after the caller found a malformed frame."""
        self._failed = True


def frame(payload: bytes | bytearray) -> bytes:
    """`payload` with its size prefix."""
    return FRAME_SIZE.pack(len(payload)) + payload
