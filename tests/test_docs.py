"""Every shell and Python snippet of README.md and docs/*.md runs, as written, against a live
cluster, so the documents cannot drift from the code.

Rules:
- A page is read top to bottom; its fenced blocks tagged `sh` run with bash (`-e -o
  pipefail`), those tagged `python` with the virtual environment's interpreter, each in a
  process of its own, in the page's order, in one sandbox directory per page: a directory
  whose entries are links to the checkout's (`.venv`, `src`, `tests`, `Makefile`, ...), so
  `.venv/bin/tidelog` and repository paths work as on the page, while the `data` a page
  makes is the sandbox's own. A page that needs a cluster starts it in a block and stops it
  in its last one, as a reader would.
- Every block must exit 0. Blocks of other languages (`text`, `yaml`, `toml`, `json`,
  `properties`) are not code; a fence without a language is refused, so no snippet can
  hide from this test.
- One annotation changes how a block runs: `<!-- doc-test: make -n (why) -->` on the line
  before it runs each of its `make` lines as `make -n` (the README's `make demo` and `make
  test`: the demo is tests/test_demo.py's, and `make test` runs this very test).
- The blocks run with the environment of a user who did not activate the virtual
  environment: no `.venv/bin` on PATH, no VIRTUAL_ENV, PYSPARK_PYTHON or TIDELOG_*
  variables. The pages name Kafka's default ports (9092 and up), so they must be free.
- Whatever a page left running is stopped afterwards by its own tools (`cluster down` and
  `spark cluster down` on the directories the page made), which end recorded PIDs only.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

ROOT: Final = Path(__file__).resolve().parent.parent
PAGES: Final = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN: Final = {"sh", "python"}
NOT_CODE: Final = {"text", "yaml", "toml", "json", "properties"}
FENCE: Final = re.compile(r"^(\s*)```(\S*)\s*$")
"""A fence, indented or not (a block in a list item)."""
ANNOTATION: Final = re.compile(r"^<!-- doc-test: (.+?) -->$")
DRY_RUN: Final = "make -n"
BLOCK_TIMEOUT_S: Final = 420
PAGE_TIMEOUT_S: Final = 900
KAFKA_PORTS: Final = (9092, 9093, 9094, 9192, 9193, 9194, 9292, 9293, 9294)
"""A local cluster at the default base port: Kafka, peer and admin listeners of 3 nodes."""
PORTS_WAIT_S: Final = 60.0
"""How long a page waits for those ports (another test's cluster may hold them a moment)."""
LEFT_OUT: Final = {".git", "data", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


@dataclass(frozen=True, slots=True)
class Block:
    page: Path
    line: int
    language: str
    text: str
    annotation: str | None

    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{name}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of a page, in order; ValueError for an untagged fence."""
    lines = page.read_text().split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        indent, language = opening.group(1), opening.group(2)
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith("```"):
            line = lines[index]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            index += 1
        if not language:
            raise ValueError(f"{page.name}:{start + 1}: a fence without a language")
        before = ANNOTATION.match(lines[start - 1]) if start > 0 else None
        found.append(
            Block(
                page=page,
                line=start + 1,
                language=language,
                text="\n".join(body) + "\n",
                annotation=before.group(1) if before else None,
            )
        )
        index += 1
    return found


def user_environment() -> dict[str, str]:
    venv_bin = str(ROOT / ".venv" / "bin")
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("TIDELOG_", "PYSPARK_", "PYTEST_"))
        and name not in {"VIRTUAL_ENV", "PYTHONPATH"}
    }
    path = [p for p in environment.get("PATH", "").split(os.pathsep) if p and p != venv_bin]
    environment["PATH"] = os.pathsep.join(path or ["/usr/local/bin", "/usr/bin", "/bin"])
    return environment


def make_sandbox(directory: Path) -> Path:
    """A directory whose entries link to the checkout's, but for its own `data`."""
    directory.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in LEFT_OUT:
            (directory / entry.name).symlink_to(entry)
    return directory


def command_of(block: Block, sandbox: Path) -> list[str]:
    if block.annotation is not None:
        assert block.annotation.startswith(DRY_RUN), f"{block.where()}: {block.annotation}"
        lines = block.text.strip().split("\n")
        assert all(line.startswith("make ") for line in lines), block.where()
        script = "\n".join(
            DRY_RUN + " " + line.split("#")[0].strip()[len("make ") :] for line in lines
        )
        return ["bash", "-e", "-o", "pipefail", "-c", script]
    if block.language == "sh":
        return ["bash", "-e", "-o", "pipefail", "-c", block.text]
    script = sandbox / f"block_{block.line}.py"
    script.write_text(block.text)
    return [str(sandbox / ".venv" / "bin" / "python"), str(script)]


def stop_what_was_left(sandbox: Path, environment: dict[str, str]) -> None:
    tidelog = str(ROOT / ".venv" / "bin" / "tidelog")
    for record in sandbox.rglob("cluster.json"):
        if record.is_file() and not record.is_symlink():
            subprocess.run(
                [tidelog, "cluster", "down", "--data-dir", str(record.parent)],
                env=environment,
                capture_output=True,
                timeout=120,
                check=False,
            )
    for record in sandbox.rglob("spark-cluster.json"):
        subprocess.run(
            [tidelog, "spark", "cluster", "down", "--dir", str(record.parent)],
            env=environment,
            capture_output=True,
            timeout=120,
            check=False,
        )


def listenable(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now, as the brokers do: with
    SO_REUSEADDR, so the connections a page before left in TIME_WAIT do not count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def run_page(page: Path, tmp_path: Path) -> Iterator[str]:
    """Run every block of `page`; yields a description of each failure."""
    blocks = [b for b in blocks_of(page) if b.language in RUN]
    if not blocks:
        return
    deadline = time.monotonic() + PORTS_WAIT_S
    while taken := [port for port in KAFKA_PORTS if not listenable(port)]:
        assert time.monotonic() < deadline, f"the pages use Kafka's default ports; in use: {taken}"
        time.sleep(0.5)
    sandbox = make_sandbox(tmp_path / "sandbox")
    environment = user_environment()
    try:
        for block in blocks:
            try:
                done = subprocess.run(
                    command_of(block, sandbox),
                    cwd=sandbox,
                    env=environment,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=BLOCK_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                yield f"{block.where()}: still running after {BLOCK_TIMEOUT_S} s"
                return
            if done.returncode != 0:
                yield (
                    f"{block.where()}: exit {done.returncode}\n--- block\n{block.text}"
                    f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-6000:]}"
                )
                return
    finally:
        stop_what_was_left(sandbox, environment)


def test_every_page_tags_its_fences() -> None:
    for page in PAGES:
        for block in blocks_of(page):
            assert block.language in RUN | NOT_CODE, (
                f"{block.where()}: fence language {block.language!r}: tag code sh or python, "
                f"anything else one of {sorted(NOT_CODE)}"
            )


def test_the_readme_is_a_door() -> None:
    lines = (ROOT / "README.md").read_text().split("\n")
    assert len(lines) <= 300
    assert lines[0] == "# tidelog"
    first = blocks_of(ROOT / "README.md")[0]
    assert first.text.split("\n")[:2] == [
        "make demo   # installs, starts a local 3-node cluster and runs the main job end to end",
        "make test   # installs, then runs ruff, mypy --strict and the whole test suite",
    ]
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / link).exists(), link


def test_the_runner_refuses_an_untagged_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("text\n\n```\nls\n```\n")
    with pytest.raises(ValueError, match="without a language"):
        blocks_of(page)


def test_the_runner_reports_a_failing_block(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```sh\ntrue\n```\n\n```sh\necho to stderr >&2; exit 3\n```\n")
    (failure,) = list(run_page(page, tmp_path))
    assert "exit 3" in failure
    assert "to stderr" in failure


@pytest.mark.slow
@pytest.mark.timeout(PAGE_TIMEOUT_S)
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_snippet_runs(page: Path, tmp_path: Path) -> None:
    failures = list(run_page(page, tmp_path))
    assert not failures, failures[0]


if __name__ == "__main__":  # one page by hand: python tests/test_docs.py docs/spark.md
    import tempfile

    for name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as scratch:
            for failure in run_page((ROOT / name).resolve(), Path(scratch)):
                print(failure)
                raise SystemExit(1)
        print(f"{name}: every block ran")
