"""The process's budget of open descriptors (wal/fs.py `OpenFiles`): thousands of
partitions' files stay within it, and no call ever loses its descriptor to another."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from test_wal_storage import SMALL, Clock, read_all
from tidelog.wal import DiskStorage
from tidelog.wal.batches import build_batches
from tidelog.wal.fs import OpenFiles, OsFileSystem


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_files_past_the_budget_are_closed_and_opened_again(tmp_path: Path) -> None:
    files = OpenFiles(limit=4)
    systems = [OsFileSystem(files), OsFileSystem(files)]
    before = open_descriptors()
    for number in range(10):
        fs = systems[number % 2]
        fs.append(str(tmp_path / f"f{number}"), f"first {number}\n".encode())
        fs.fdatasync(str(tmp_path / f"f{number}"))
        assert files.held() <= 4
    assert open_descriptors() - before <= 4
    for number in range(10):
        fs = systems[number % 2]
        path = str(tmp_path / f"f{number}")
        fs.append(path, f"then {number}\n".encode())
        assert fs.pread(path, 0, 100) == f"first {number}\nthen {number}\n".encode()
        assert fs.size(path) == len(f"first {number}\nthen {number}\n")
    for fs in systems:
        fs.close()
    assert files.held() == 0
    assert open_descriptors() == before


def test_a_descriptor_in_use_is_never_closed_under_its_call(tmp_path: Path) -> None:
    files = OpenFiles(limit=1)
    fs = OsFileSystem(files)
    pinned = files.pin(0, str(tmp_path / "held"))  # as a call in another thread holds it
    fs.append(str(tmp_path / "other"), b"x")  # past the budget: the pinned one stays
    assert os.fstat(pinned.fd).st_size == 0
    files.forget(0, str(tmp_path / "held"))  # renamed while in use: closed by its user
    os.fstat(pinned.fd)
    files.unpin(pinned)
    assert files.held() == 1
    fs.close()


def test_threads_share_a_small_budget_without_crossing_files(tmp_path: Path) -> None:
    files = OpenFiles(limit=3)
    errors: list[BaseException] = []

    def work(number: int) -> None:
        fs = OsFileSystem(files)
        path = str(tmp_path / f"t{number}")
        try:
            for round_ in range(200):
                fs.append(path, bytes([number]) * 7)
                fs.fdatasync(path)
                assert fs.pread(path, 0, 1 << 16) == bytes([number]) * 7 * (round_ + 1)
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)
        finally:
            fs.close()

    threads = [threading.Thread(target=work, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert files.held() == 0


def test_many_logs_hold_few_descriptors(tmp_path: Path) -> None:
    files = OpenFiles(limit=16)
    logs = [
        DiskStorage(
            str(tmp_path / f"p-{number}"), clock=Clock(), config=SMALL, fs=OsFileSystem(files)
        )
        for number in range(40)
    ]
    written = []
    for number, log in enumerate(logs):
        batches = build_batches([1 + number % 3] * 4)
        log.append(batches)
        log.sync()
        written.append(batches)
        assert files.held() <= 16
    for log, batches in zip(logs, written, strict=True):
        assert read_all(log) == batches
        log.release()
    assert files.held() == 0
