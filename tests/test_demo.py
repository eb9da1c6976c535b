"""`tidelog demo` end to end, as `make demo` runs it: a real 3-node cluster, a killed leader.

The demo must end on `verdict: OK — N acknowledged, N read, 0 lost, 0 duplicated` and the
Spark pipeline's `pipeline verdict: OK — ...` with exit status 0, and leave no broker
running, also when it is stopped with SIGTERM part-way. It names the live page's URL, and
where a headless Chromium can start (`make test` installs it) it leaves a picture of the
page taken mid-demo, `--data-dir`/ui.png; where none can, it says so in one line.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidelog.testing.live import free_base_port
from tidelog.tools.browser import browser_missing
from tidelog.tools.demo import skipped_line

pytestmark = pytest.mark.slow

RECORDS = 2000
DEMO_TIMEOUT_S = 300.0
EXIT_INTERRUPTED = 130
VERDICT_OK = f"verdict: OK — {RECORDS} acknowledged, {RECORDS} read, 0 lost, 0 duplicated"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_BYTES_MIN = 10_000  # a blank 1280x900 page is about 5 kB
PIPELINE_OK = (
    f"pipeline verdict: OK — 100 balances from {RECORDS} transfers read, {RECORDS} "
    "acknowledged, every balance exact to the cent; sink duplicates (at-least-once): 0"
)
# 2,000 transfers are one micro-batch (maxOffsetsPerTrigger 5,000); the offsets also count
# the partitions' control batches.
BATCH_LINE = re.compile(
    rf"^micro-batch 0: {RECORDS} transfers read \({RECORDS} in all\), offsets (\d+) of "
    r"(\d+) committed, 100 balances written, \d+\.\d s$"
)


def demo_argv(directory: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tidelog",
        "demo",
        "--records",
        str(RECORDS),
        "--data-dir",
        str(directory),
        "--base-port",
        str(free_base_port()),
    ]


def broker_pids(directory: Path) -> list[int]:
    record = json.loads((directory / "cluster.json").read_text())
    return [int(node["pid"]) for node in record["nodes"]]


def is_running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def first_admin(directory: Path) -> str:
    record = json.loads((directory / "cluster.json").read_text())
    return str(record["nodes"][0]["admin"])


def test_demo_reads_back_every_acknowledged_record(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    result = subprocess.run(
        demo_argv(directory),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert VERDICT_OK in result.stdout.splitlines(), output
    assert PIPELINE_OK in result.stdout.splitlines(), output
    assert (directory / "pipeline" / "balances.parquet").is_dir(), output
    assert_spark_progress_shown(result.stdout.splitlines())
    assert "kill -9 node" in result.stdout, output
    assert "is ready again" in result.stdout, output
    assert not [pid for pid in broker_pids(directory) if is_running(pid)], output
    lines = result.stdout.splitlines()
    assert f"watch it live: http://{first_admin(directory)}/" in lines, output
    missing = browser_missing()
    if missing is not None:
        assert skipped_line(missing) in lines, output
        return
    picture = directory / "ui.png"
    # Under load the page may not show the failover before the production ends; the line
    # then says so, and the picture is of the page at that moment.
    said = [line for line in lines if line.startswith(f"the live page, mid-demo: {picture}")]
    assert said, output
    assert picture.read_bytes().startswith(PNG_MAGIC), output
    assert picture.stat().st_size >= PNG_BYTES_MIN, output


def assert_spark_progress_shown(lines: list[str]) -> None:
    """Spark's start, then a line for the micro-batch, which read every offset below the
    HWMs, before the pipeline's summary."""
    starting = lines.index("starting Spark (local[2]); its JVM takes a while to start")
    assert re.fullmatch(r"Spark started in \d+\.\d s", lines[starting + 1]), lines[starting:]
    batches = [(n, m) for n, line in enumerate(lines) if (m := BATCH_LINE.match(line))]
    assert len(batches) == 1, lines[starting:]
    ((at, match),) = batches
    summary = next(n for n, line in enumerate(lines) if line.startswith("the streaming query"))
    assert starting < at < summary
    assert match[1] == match[2]  # read up to the HWMs


def test_without_a_browser_the_demo_says_what_installs_one() -> None:
    assert skipped_line("/usr/bin/chromium, /usr/bin/chromedriver") == (
        "screenshot of the live page skipped (no /usr/bin/chromium, /usr/bin/chromedriver): "
        "`make chromium`"
    )
    assert skipped_line("selenium").endswith("(no selenium): `make install`")
    assert browser_missing(chromium="/nonexistent/chromium") is not None


def test_sigterm_stops_the_demo_and_its_cluster(tmp_path: Path) -> None:
    directory = tmp_path / "demo"
    environment = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        demo_argv(directory), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment
    ) as demo:
        try:
            assert demo.stdout is not None
            seen = read_until(demo.stdout.fileno(), "2 · Create topic", timeout_s=DEMO_TIMEOUT_S)
            assert all(is_running(pid) for pid in broker_pids(directory)), seen
            demo.send_signal(signal.SIGTERM)
            status = demo.wait(timeout=DEMO_TIMEOUT_S)
            seen += demo.stdout.read().decode(errors="replace")
        finally:
            if demo.poll() is None:
                demo.kill()
    assert status == EXIT_INTERRUPTED, seen
    assert "stopped nodes: 1, 2, 3" in seen, seen
    assert not [pid for pid in broker_pids(directory) if is_running(pid)], seen


def read_until(fd: int, marker: str, *, timeout_s: float) -> str:
    """What a pipe delivers until `marker` appears in it (or EOF, or the deadline)."""
    received = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while marker.encode() not in received and time.monotonic() < deadline:
            if not selector.select(timeout=deadline - time.monotonic()):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            received += chunk
    text = received.decode(errors="replace")
    assert marker in text, f"no {marker!r} within {timeout_s:g} s:\n{text}"
    return text
