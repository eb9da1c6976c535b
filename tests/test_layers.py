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
BASE_MODULES = {
    "tidelog.status",
    "tidelog",
    "tidelog.types",
    "tidelog.errors",
    "tidelog.records",
    "tidelog.clock",
    "tidelog.address",
    "tidelog.client_config",
}

# What each package may import from tidelog besides the base modules.
ALLOWED = {
    "core": {"core"},
    "wal": {"core", "wal"},
    "protocol": {"core", "protocol"},
    "node": {"core", "wal", "protocol", "node"},
    "server": {"core", "wal", "protocol", "node", "groups", "server"},
    "testing": {"core", "wal", "protocol", "node", "groups", "testing"},
    "groups": {"groups", "protocol"},  # protocol: the Kafka error codes it answers with
    "spark": {"core", "protocol", "spark"},
}

# The packages held to the core's rules: no IO, no clock, no randomness.
PURE = {"core", "groups"}

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
        if package in PURE and top in FORBIDDEN_IN_CORE:
            wrong.append(f"{name}: {package}/ does no IO")
        if package in PURE and name.startswith("tidelog.clock"):
            wrong.append(f"{name}: core/ is handed the time, it reads no clock")
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


# ------------------------------------------------------------------ no import cycles ------
ROOT = SRC.parents[1]


def module_name(path: Path) -> str:
    """`tidelog.server.broker` for src/tidelog/server/broker.py, `bench.fuzz` for bench/."""
    base = SRC.parent if SRC in path.parents else ROOT
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the modules of `paths` it imports, function-local imports included (an
    import inside a function is still an arrow)."""
    modules = {module_name(path): path for path in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    # `from package import submodule` imports the submodule.
                    full = f"{node.module}.{alias.name}"
                    if full in modules:
                        edges.add(full)
                    elif node.module in modules:
                        edges.add(node.module)
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles_in_the_package_the_tools_and_the_benchmarks() -> None:
    """One place wires the broker (server/app.py); nothing imports upwards again, not even
    inside a function. Covers src/tidelog (core to cli.py and tools/) and bench/."""
    paths = sorted(SRC.rglob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))
    graph = import_graph(paths)
    assert "tidelog.server.app" in graph and "tidelog.cli" in graph
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_core_reads_no_clock() -> None:
    assert layer_violations("core", "from tidelog.clock import wall_ms\n") != []


# ------------------------------------------------------------------ the core's face -----
# What code outside core/ and testing/ may touch on a Replica: its inputs, its Ready
# round, and the frozen `status()`; everything else is the core's own (the simulator's
# checker, in testing/, reads the log itself on purpose).
REPLICA_API = {
    "status",
    "high_watermark",  # status().hwm alone, on a round's hot path
    "read_committed",
    "fetch",
    "fetch_bounds",
    "latest_offset",
    "propose",
    "step",
    "tick",
    "has_ready",
    "ready",
    "advance",
    "delete_records",
    "note_log_start",
    "producer_snapshot",
    "transfer_leadership",
    "campaign",  # a new partition's preferred replica starts its election at once
    "end_offset_for_epoch",
    "set_min_insync_replicas",
    "set_members",
    "set_throttle",
    # ISR mode (core/mode/isr.py): the controller's records and answers in, and
    # whether the replica is in ISR mode (`isr` is None in quorum mode).
    "isr",
    "on_partition_record",
    "on_isr_answer",
    "partition_record",
    "declines_leadership",
    # Quiescence (core/quiesce.py): whether it sleeps (only the partitions awake tick),
    # the nodes it shares a copy with, and node liveness's news of one of them.
    "quiesced",
    "peers",
    "on_node_change",
    # A round's check whether to log a role or repair change, without building a status.
    "role",
    "epoch",
    "leader_id",
    "repair_floor",
}


def replica_uses(source: str) -> set[str]:
    """The attributes read on any name or attribute called `replica`."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
            if name == "replica":
                used.add(node.attr)
    return used


@pytest.mark.parametrize("package", ["server", "node", "spark", "tools"])
def test_outside_the_core_a_replica_is_seen_through_its_status(package: str) -> None:
    stray = {
        str(path.relative_to(SRC)): sorted(replica_uses(path.read_text()) - REPLICA_API)
        for path in sorted((SRC / package).rglob("*.py"))
        if replica_uses(path.read_text()) - REPLICA_API
    }
    assert stray == {}


def test_the_replica_face_check_sees_a_stray_read() -> None:
    assert replica_uses("x = runner.replica.log.log_end_offset\n") == {"log"}


# ------------------------------------------------------------------ the runner's door ---
# A partition's replica and its disk log are the runner's (server/partition.py, and the
# small modules that are part of it): every other server module gives the runner typed
# inputs and reads it through its typed queries, never through `runner.replica`,
# `runner.storage` or `runner.busy`, and never builds or names a replica or a disk log.
RUNNER_MODULES = {
    "server/partition.py",
    "server/partition_inputs.py",  # its inputs, and the steps that carry them out
    "server/disk_health.py",  # where its rounds fsync, whether the disk takes writes
    "server/round_lines.py",  # the log lines of what its Ready says was lost
}
RUNNER_INSIDES = {"replica", "storage", "busy"}
# What only the runner may import: the replica and its opener, the disk log.
RUNNER_ONLY_IMPORTS = {
    "tidelog.core.replica.Replica",
    "tidelog.core.mode",
    "tidelog.node.driver.open_replica",
    "tidelog.node.driver.apply_committed",
    "tidelog.wal.DiskStorage",
    "tidelog.wal.log",
}


def door_violations(source: str) -> list[str]:
    """Where a module reaches past a partition runner's door (see above)."""
    wrong = [
        f"imports {name}"
        for name in sorted(imported_modules(source))
        if any(name == only or name.startswith(f"{only}.") for only in RUNNER_ONLY_IMPORTS)
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in RUNNER_INSIDES:
            wrong.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id.endswith("Replica"):
            wrong.append(f"line {node.lineno}: names {node.id}")
    return wrong


def test_no_server_module_but_the_runner_reaches_a_replica_or_a_disk_log() -> None:
    outside = [
        path for path in modules_of("server") if str(path.relative_to(SRC)) not in RUNNER_MODULES
    ]
    assert len(outside) > 20
    problems = {
        str(path.relative_to(SRC)): found
        for path in outside
        if (found := door_violations(path.read_text()))
    }
    assert problems == {}


def test_the_runners_modules_exist() -> None:
    assert all((SRC / module).exists() for module in RUNNER_MODULES)


@pytest.mark.parametrize(
    "line",
    [
        "status = runner.replica.status()\n",
        "end = runner.storage.log_end_offset\n",
        "if runner.busy:\n    pass\n",
        "from tidelog.core.replica import ACKS_ALL, Replica\n",
        "from tidelog.core.mode.isr import IsrMode\n",
        "from tidelog.wal import DiskStorage, WalConfig\n",
        "from tidelog.node.driver import apply_committed\n",
        "quorum = not isinstance(replica, IsrReplica)\n",
    ],
)
def test_the_door_check_sees_a_reach_past_the_runner(line: str) -> None:
    assert door_violations(line) != []


def test_the_door_check_accepts_the_runners_api() -> None:
    source = (
        "from tidelog.core.replica import ACKS_ALL, ReplicaStatus, Role\n"
        "from tidelog.wal import WalConfig\n"
        "status = runner.status()\n"
        "bounds, records = runner.read(offset, current_leader_epoch=None, max_bytes=1, now_ms=0)\n"
        "quorum = not runner.isr_mode\n"
    )
    assert door_violations(source) == []
