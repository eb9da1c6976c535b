"""The import direction of the layers (shared/docs/style.md): core/ does no IO at all.

Each layer may import only the layers beneath it. The check reads the import statements of
every module with `ast`, so it sees what the code says, not what happens to be loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "tidelog"

# Modules in the package root that every layer may use.
BASE_MODULES = {"tidelog", "tidelog.types", "tidelog.errors", "tidelog.records"}

# What each package may import from tidelog besides the base modules.
ALLOWED = {
    "core": {"core"},
    "wal": {"core", "wal"},
    "protocol": {"core", "protocol"},
    "node": {"core", "wal", "protocol", "node"},
    "server": {"core", "wal", "protocol", "node", "server"},
    "testing": {"core", "wal", "protocol", "node", "testing"},
    "spark": {"core", "protocol", "spark"},
}

# What the pure core may never import: IO, clocks, randomness, concurrency.
FORBIDDEN_IN_CORE = {
    "asyncio",
    "socket",
    "os",
    "time",
    "random",
    "threading",
    "selectors",
    "subprocess",
    "io",
    "pathlib",
    "shutil",
    "signal",
    "multiprocessing",
    "concurrent",
    "datetime",
}


def imported_modules(source: str) -> set[str]:
    """Every module an import statement in `source` names (absolute names only)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            names.add("<relative import>")
    return names


def layer_violations(package: str, source: str) -> list[str]:
    """What is wrong with the imports of one module of `package`."""
    wrong: list[str] = []
    for name in sorted(imported_modules(source)):
        if name == "<relative import>":
            wrong.append("relative import (use absolute tidelog.* imports)")
            continue
        top = name.split(".")[0]
        if package == "core" and top in FORBIDDEN_IN_CORE:
            wrong.append(f"{name}: core/ does no IO")
        if top != "tidelog" or name in BASE_MODULES:
            continue
        parts = name.split(".")
        if len(parts) == 2 and f"tidelog.{parts[1]}" in BASE_MODULES:
            continue
        layer = parts[1]
        if layer not in ALLOWED[package] and f"tidelog.{layer}" not in BASE_MODULES:
            wrong.append(f"{name}: {package}/ may not import {layer}")
    return wrong


def modules_of(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_layer_imports_point_downwards(package: str) -> None:
    problems = {
        str(path.relative_to(SRC)): found
        for path in modules_of(package)
        if (found := layer_violations(package, path.read_text()))
    }
    assert problems == {}


def test_core_exists_and_is_checked() -> None:
    assert len(modules_of("core")) >= 4


@pytest.mark.parametrize(
    "line",
    [
        "import os",
        "import time",
        "from random import Random",
        "import asyncio",
        "from socket import socket",
        "import threading",
        "from tidelog.wal import segment",
        "from tidelog.server.app import serve",
        "from tidelog import cli",
    ],
)
def test_the_check_fails_when_core_imports_io_or_upper_layers(line: str) -> None:
    """The test of the test: adding any such import to a core module is caught."""
    source = (SRC / "core" / "replica.py").read_text() + "\n" + line + "\n"
    assert layer_violations("core", source) != []


def test_the_check_accepts_base_modules_in_core() -> None:
    source = "from tidelog.records import stamp\nfrom tidelog.errors import NotLeader\n"
    assert layer_violations("core", source) == []
