"""Decompressing the records of a Kafka record batch, with a bound on the output (sans-IO).

The codecs are Kafka's (attributes bits 0-2): 1 gzip, 2 snappy, 3 lz4, 4 zstd; 0 is none.
Rules of this file:
- `decompress` returns the whole decompressed records section or raises CodecError with
  what is wrong; it never returns more than `size_max` bytes and never inflates a stream
  much past that (a compressed bomb is refused once size_max + 1 bytes came out).
- A stream must end where the records section ends: bytes after it, or a stream cut
  short, are an error.
- snappy is read in both forms Kafka's clients write: the xerial framing of the Java
  clients (a 16-byte header, then blocks each prefixed by its length) and plain snappy
  (librdkafka), as Kafka's own reader (snappy-java's SnappyInputStream) accepts both.
- lz4 is the LZ4 frame format (Kafka's KafkaLZ4BlockInputStream, magic v2).
- zstd is one or more zstd frames (RFC 8878); their block headers are walked before
  anything is decompressed, so a stream cut short is caught (the zstd reader would stop
  quietly) and a frame that is not zstd (a skippable frame) is refused.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import lz4.frame
import snappy
import zstandard

GZIP: Final = 1
SNAPPY: Final = 2
LZ4: Final = 3
ZSTD: Final = 4
CODEC_NAMES: Final = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS  # a gzip header and trailer, not zlib's
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE: Final = 16  # magic, version i32, compatible version i32
_XERIAL_BLOCK_LENGTH: Final = struct.Struct(">i")
_SNAPPY_PREAMBLE_BYTES_MAX: Final = 5  # the uncompressed length: an unsigned 32-bit varint
ZSTD_WINDOW_SIZE_MAX: Final = 1 << 24
"""The largest zstd window accepted: bounds the memory one frame may ask for."""
_ZSTD_READ_BYTES: Final = 1 << 20
_ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_HEADER_SIZE: Final = 3
_ZSTD_BLOCK_RLE: Final = 1
_ZSTD_BLOCK_RESERVED: Final = 3
_ZSTD_CHECKSUM_SIZE: Final = 4
_ZSTD_DICTIONARY_ID_SIZES: Final = (0, 1, 2, 4)
_ZSTD_CONTENT_SIZE_SIZES: Final = (0, 2, 4, 8)


class CodecError(ValueError):
    """A records section that does not decompress, or decompresses to too much."""


def decompress(codec: int, data: bytes, *, size_max: int) -> bytes:
    """The decompressed records of a batch compressed with `codec` (1-4).

    Raises CodecError when the stream is malformed, cut short, followed by other bytes, or
    longer than `size_max` once decompressed.
    """
    assert codec in (GZIP, SNAPPY, LZ4, ZSTD)
    if codec == GZIP:
        return _gunzip(data, size_max)
    if codec == SNAPPY:
        return _unsnappy(data, size_max)
    if codec == LZ4:
        return _unlz4(data, size_max)
    return _unzstd(data, size_max)


def _too_large(size_max: int) -> CodecError:
    return CodecError(f"decompresses to more than {size_max} bytes")


def _gunzip(data: bytes, size_max: int) -> bytes:
    stream = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = stream.decompress(data, size_max + 1)
    except zlib.error as error:
        raise CodecError(f"gzip: {error}") from None
    if len(out) > size_max:
        raise _too_large(size_max)
    if not stream.eof:
        raise CodecError("gzip: the stream is cut short")
    if stream.unused_data:
        raise CodecError(f"gzip: {len(stream.unused_data)} bytes after the stream")
    return out


def _unsnappy(data: bytes, size_max: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return _unsnappy_block(data, size_max)
    if len(data) < _XERIAL_HEADER_SIZE:
        raise CodecError("snappy: the xerial header is cut short")
    blocks: list[bytes] = []
    size = 0
    position = _XERIAL_HEADER_SIZE
    while position < len(data):
        if position + _XERIAL_BLOCK_LENGTH.size > len(data):
            raise CodecError("snappy: a block length is cut short")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += _XERIAL_BLOCK_LENGTH.size
        if length < 0 or position + length > len(data):
            raise CodecError(f"snappy: a block of {length} bytes, {len(data) - position} left")
        block = _unsnappy_block(data[position : position + length], size_max - size)
        blocks.append(block)
        size += len(block)
        position += length
    return b"".join(blocks)


def _unsnappy_block(block: bytes, size_max: int) -> bytes:
    """One plain snappy block; its preamble (the decompressed length) is checked against
    `size_max` before anything is decompressed."""
    length, shift = 0, 0
    for position, byte in enumerate(block[:_SNAPPY_PREAMBLE_BYTES_MAX]):
        length |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            break
        if position == _SNAPPY_PREAMBLE_BYTES_MAX - 1:
            raise CodecError("snappy: the length preamble is too long")
    else:
        raise CodecError("snappy: the length preamble is cut short")
    if length > size_max:
        raise _too_large(size_max)
    try:
        out: bytes = snappy.uncompress(block)
    except snappy.UncompressError as error:
        raise CodecError(f"snappy: {error.__cause__ or error}") from None
    return out


def _unlz4(data: bytes, size_max: int) -> bytes:
    stream = lz4.frame.LZ4FrameDecompressor()
    try:
        out: bytes = stream.decompress(data, max_length=size_max + 1)
    except RuntimeError as error:
        raise CodecError(f"lz4: {error}") from None
    if len(out) > size_max:
        raise _too_large(size_max)
    if not stream.eof:
        raise CodecError("lz4: the frame is cut short")
    if stream.unused_data:
        raise CodecError(f"lz4: {len(stream.unused_data)} bytes after the frame")
    return out


def _unzstd(data: bytes, size_max: int) -> bytes:
    position = 0
    while position < len(data):
        position = _zstd_frame_end(data, position)
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_WINDOW_SIZE_MAX)
    chunks: list[bytes] = []
    size = 0
    try:
        with decompressor.stream_reader(data, read_across_frames=True) as reader:
            while chunk := reader.read(min(_ZSTD_READ_BYTES, size_max + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
                if size > size_max:
                    raise _too_large(size_max)
    except zstandard.ZstdError as error:
        raise CodecError(f"zstd: {error}") from None
    return b"".join(chunks)


def _zstd_frame_end(data: bytes, position: int) -> int:
    """Where the zstd frame at `position` ends (RFC 8878 section 3.1.1), from its header and
    block headers only. Raises CodecError when it is no zstd frame or is cut short."""
    if data[position : position + 4] != _ZSTD_MAGIC:
        raise CodecError(f"zstd: no zstd frame at byte {position}")
    if position + 5 > len(data):
        raise CodecError("zstd: a frame header is cut short")
    descriptor = data[position + 4]
    single_segment = descriptor >> 5 & 1
    content_size_flag = descriptor >> 6
    position += (
        5
        + (0 if single_segment else 1)  # window descriptor
        + _ZSTD_DICTIONARY_ID_SIZES[descriptor & 3]
        + (1 if single_segment and content_size_flag == 0 else 0)
        + _ZSTD_CONTENT_SIZE_SIZES[content_size_flag]
    )
    last = False
    while not last:
        if position + _ZSTD_BLOCK_HEADER_SIZE > len(data):
            raise CodecError("zstd: the stream is cut short")
        header = int.from_bytes(data[position : position + _ZSTD_BLOCK_HEADER_SIZE], "little")
        last, kind, size = bool(header & 1), header >> 1 & 3, header >> 3
        if kind == _ZSTD_BLOCK_RESERVED:
            raise CodecError(f"zstd: a block of the reserved type at byte {position}")
        position += _ZSTD_BLOCK_HEADER_SIZE + (1 if kind == _ZSTD_BLOCK_RLE else size)
    position += _ZSTD_CHECKSUM_SIZE if descriptor >> 2 & 1 else 0
    if position > len(data):
        raise CodecError("zstd: the stream is cut short")
    return position
