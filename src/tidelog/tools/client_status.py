"""A local cluster's `cluster.json`, and each broker's admin `GET /status`.

`tidelog cluster up` writes `cluster.json` into its data directory:
`{"bootstrap": "127.0.0.1:9092,...", "nodes": [{"id": 1, "pid": 123, "kafka": "...",
"peer": "...", "admin": "127.0.0.1:9292", "data_dir": "..."}]}`. Each broker's admin
endpoint answers `GET /status` with JSON: `{"node_id": 1, "ready": true, "metadata_leader": 2,
"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3], "role": "leader",
"leader": 1, "epoch": 3, "hwm": 10, "log_start_offset": 0, "log_end_offset": 10,
"isr": [1, 2, 3]}]}`. A secure cluster's file also says `"secure": true` and names each node's
`ssl` and `sasl` listeners; its directory holds `client-sasl.properties`.

Rules: reading either is best effort. A missing or unreadable `cluster.json` means no
local cluster; a broker whose `/status` does not answer within STATUS_TIMEOUT_MS is left
out (its replicas show as unknown). Neither ever fails a command.
"""

from __future__ import annotations

import contextvars
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tidelog.status import AdminAccess, read_status

CLUSTER_FILE: Final = "cluster.json"
CLIENT_SASL_PROPERTIES: Final = "client-sasl.properties"
"""What a secure local cluster's clients need (the user `admin` over SASL_SSL), in its
directory; written by `tidelog cluster up --secure`."""
DATA_DIR_ENV: Final = "TIDELOG_DATA_DIR"
DEFAULT_DATA_DIR: Final = "data"
STATUS_TIMEOUT_MS: Final = 2_000
"""How long one broker's `/status` may take to answer."""
STATUS_SIZE_MAX: Final = 16 * 1024 * 1024
"""The largest `/status` body read."""


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """One replica of one partition as its own broker reports it."""

    node_id: int
    role: str
    epoch: int
    log_start_offset: int
    hwm: int
    log_end_offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "role": self.role,
            "epoch": self.epoch,
            "log_start_offset": self.log_start_offset,
            "hwm": self.hwm,
            "log_end_offset": self.log_end_offset,
        }


def _pid_alive(pid: object) -> bool:
    """True when `pid` names a live process (or is absent: then nothing says otherwise)."""
    if not isinstance(pid, int):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


chosen_data_dir: contextvars.ContextVar[Path | None] = contextvars.ContextVar(
    "chosen_data_dir", default=None
)
"""A command's `--data-dir`, for the length of the command (`client_options`)."""


def given_data_dir() -> Path | None:
    """The data directory named explicitly: the command's `--data-dir`, else
    `$TIDELOG_DATA_DIR`; None when neither is given."""
    chosen = chosen_data_dir.get()
    if chosen is not None:
        return chosen
    named = os.environ.get(DATA_DIR_ENV)
    return Path(named) if named else None


def local_cluster_directory() -> Path:
    """Where a local cluster is looked for: `given_data_dir()`, else `./data`."""
    return given_data_dir() or Path(DEFAULT_DATA_DIR)


def missing_cluster_file() -> str | None:
    """Why the data directory given explicitly (`--data-dir`, `$TIDELOG_DATA_DIR`) names no
    local cluster, when its `cluster.json` is missing; None when it has one, or when none was
    given (./data is only a guess, never an error)."""
    chosen = given_data_dir()
    if chosen is None or (chosen / CLUSTER_FILE).exists():
        return None
    return (
        f"{chosen} has no {CLUSTER_FILE} (no local cluster there; start one with tidelog "
        f"cluster up --data-dir {chosen}, or give --bootstrap-server)"
    )


def find_local_cluster() -> dict[str, Any] | None:
    """The `cluster.json` of a running local cluster, or None.

    It is looked for in `local_cluster_directory()`. A cluster counts as running when the
    file parses, names a bootstrap, and at least one of its nodes' pids is alive.
    """
    try:
        cluster = json.loads((local_cluster_directory() / CLUSTER_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cluster, dict) or not isinstance(cluster.get("bootstrap"), str):
        return None
    nodes = cluster.get("nodes")
    if not isinstance(nodes, list):
        return None
    if nodes and not any(isinstance(n, dict) and _pid_alive(n.get("pid")) for n in nodes):
        return None
    return cluster


def local_bootstraps(cluster: dict[str, Any]) -> set[str]:
    """The bootstrap of each Kafka listener of a `cluster.json` (PLAINTEXT; SSL and SASL_SSL
    in a secure cluster)."""
    nodes = [n for n in cluster.get("nodes", []) if isinstance(n, dict)]
    listed = {",".join(str(n[kind]) for n in nodes if n.get(kind)) for kind in ("ssl", "sasl")}
    return ({str(cluster["bootstrap"])} | listed) - {""}


def admin_addresses(cluster: dict[str, Any]) -> list[str]:
    """The admin `host:port` of every node of a `cluster.json` that names one."""
    nodes = cluster.get("nodes", [])
    return [str(n["admin"]) for n in nodes if isinstance(n, dict) and n.get("admin")]


def fetch_status(admin: str, access: AdminAccess | None = None) -> dict[str, Any] | None:
    """One broker's `GET /status`, or None when it does not answer in time or sensibly."""
    return read_status(admin, timeout_s=STATUS_TIMEOUT_MS / 1000, access=access)


def _replica_of(node_id: int, entry: dict[str, Any]) -> ReplicaStatus:
    return ReplicaStatus(
        node_id=node_id,
        role=str(entry.get("role", "?")),
        epoch=int(entry["epoch"]),
        log_start_offset=int(entry["log_start_offset"]),
        hwm=int(entry["hwm"]),
        log_end_offset=int(entry["log_end_offset"]),
    )


def replica_statuses(
    admins: list[str], access: AdminAccess | None = None
) -> dict[tuple[str, int, int], ReplicaStatus]:
    """(topic, partition, node id) -> that replica's status, from every answering broker."""
    found: dict[tuple[str, int, int], ReplicaStatus] = {}
    for admin in admins:
        status = fetch_status(admin, access)
        if status is None or not isinstance(status.get("node_id"), int):
            continue
        node_id = int(status["node_id"])
        for entry in status.get("partitions", []):
            try:
                replica = _replica_of(node_id, entry)
                key = (str(entry["topic"]), int(entry["partition"]), node_id)
            except (KeyError, TypeError, ValueError):
                continue
            found[key] = replica
    return found
