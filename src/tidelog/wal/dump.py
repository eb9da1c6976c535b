"""`dump-log`: what a segment file or a partition directory holds, batch by batch.

Rules of this file:
- Reads the files directly, never through DiskStorage: a dump must show a log that the
  storage refuses to open or serve, corrupt batches included (`isValid: false`).
- Text lines follow kafka-dump-log; `--json` prints JSON Lines (one object per batch, with
  its records in "records" when asked). A batch whose framing is broken ends the file's
  dump with an error line (text) or object with "error" (JSON).
- A missing or unreadable path raises StorageError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from tidelog.errors import CorruptBatch, StorageError
from tidelog.records import crc_of
from tidelog.wal.fs import FileSystem, OsFileSystem
from tidelog.wal.kafka_records import DefaultRecordBatch
from tidelog.wal.segment import LOG_SUFFIX, ChunkReader

COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def segment_files(path: str) -> list[str]:
    """The segment files `path` names: itself, or the .log files of a directory."""
    if os.path.isdir(path):
        names = sorted(name for name in os.listdir(path) if name.endswith(LOG_SUFFIX))
        if not names:
            raise StorageError(f"{path}: no segment (.log) files in this directory")
        return [os.path.join(path, name) for name in names]
    if not os.path.isfile(path):
        raise StorageError(f"{path}: no such file or directory")
    return [path]


def dump(path: str, *, records: bool, as_json: bool) -> Iterator[str]:
    """The lines of the dump of `path` (a segment file or a partition directory)."""
    fs = OsFileSystem()
    try:
        for file in segment_files(path):
            if not as_json:
                yield f"Dumping {file}"
            for batch in describe_batches(fs, file, records=records):
                yield json.dumps(batch) if as_json else format_batch(batch)
    except OSError as error:
        raise StorageError(f"{path}: {error.strerror or error}") from error
    finally:
        fs.close()


def describe_batches(fs: FileSystem, path: str, *, records: bool) -> Iterator[dict[str, Any]]:
    """One dict per batch of the file at `path`, CRC checked; a last one with "error" when
    the framing breaks."""
    end = fs.size(path)
    reader = ChunkReader(fs, path, end)
    position = 0
    while position < end:
        try:
            header = reader.header(position)
        except CorruptBatch as error:
            yield {"file": path, "position": position, "error": str(error)}
            return
        data = fs.pread(path, position, header.size_bytes)
        valid = crc_of(data, 0, header.size_bytes) == header.crc
        batch: dict[str, Any] = {
            "file": path,
            "baseOffset": header.base_offset,
            "lastOffset": header.last_offset,
            "count": header.records_count,
            "baseSequence": header.base_sequence,
            "producerId": header.producer_id,
            "producerEpoch": header.producer_epoch,
            "partitionLeaderEpoch": header.epoch,
            "isControl": header.is_control,
            "position": position,
            "CreateTime": header.max_timestamp,
            "size": header.size_bytes,
            "magic": header.magic,
            "compresscodec": COMPRESSION_NAMES.get(header.attributes & 0x07, "unknown"),
            "crc": f"{header.crc:#010x}",
            "isValid": valid,
        }
        if records and valid:
            batch["records"] = describe_records(data)
        yield batch
        position += header.size_bytes


def describe_records(data: bytes) -> list[dict[str, Any]]:
    return [
        {
            "offset": record.offset,
            "CreateTime": record.timestamp,
            "keySize": -1 if record.key is None else len(record.key),
            "valueSize": -1 if record.value is None else len(record.value),
            "key": None if record.key is None else record.key.decode("utf-8", "replace"),
            "payload": None if record.value is None else record.value.decode("utf-8", "replace"),
        }
        for record in DefaultRecordBatch(data)
    ]


def format_batch(batch: dict[str, Any]) -> str:
    """kafka-dump-log's line: `key: value` pairs; records on indented lines below."""
    if "error" in batch:
        return f"error at position {batch['position']}: {batch['error']}"
    fields = [
        f"{key}: {_text(value)}" for key, value in batch.items() if key not in ("file", "records")
    ]
    lines = [" ".join(fields)]
    for record in batch.get("records", []):
        lines.append("| " + " ".join(f"{key}: {_text(value)}" for key, value in record.items()))
    return "\n".join(lines)


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
