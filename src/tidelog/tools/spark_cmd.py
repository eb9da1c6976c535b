"""`tidelog spark cluster up|down|status`: a Spark standalone cluster on 127.0.0.1.

The master and its workers run from the installed PySpark (`tidelog.spark.standalone`, which
states the rules: ports, files, environment, which PIDs are ever signalled). `up` prints the
master URL on stdout, for `TIDELOG_SPARK_MASTER`; what it did goes to stderr.

Rules of this file: expected failures (no pyspark, ports in use, a daemon that exits, no
cluster in the directory) print `error: ...` on stderr and exit 1; `status` exits 1 when a
daemon is down or a worker is not ALIVE. pyspark is never imported here (`--help` stays fast).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, NoReturn

import click

from tidelog.errors import TidelogError
from tidelog.spark.standalone import (
    MASTER_ENV,
    READY_TIMEOUT_S_DEFAULT,
    STATE_FILE,
    WORKER_MEMORY_DEFAULT,
    WORKERS_DEFAULT,
    WORKERS_MAX,
    SparkCluster,
    SparkClusterError,
    describe,
    plan_cluster,
    read_cluster,
    start_stopped,
    stop_daemons,
)

DIRECTORY_DEFAULT: Final = Path("spark-cluster")
EXIT_ERROR: Final = 1


def fail(error: TidelogError) -> NoReturn:
    click.echo(f"error: {error}", err=True)
    raise SystemExit(EXIT_ERROR) from error


directory_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DIRECTORY_DEFAULT,
    show_default=True,
    help=f"The cluster's directory (holds {STATE_FILE}, the daemons' logs, the work dirs).",
)


@click.group("spark")
def spark() -> None:
    """Spark for tidelog's jobs: a standalone cluster on 127.0.0.1."""


@spark.group("cluster")
def spark_cluster() -> None:
    """A Spark standalone master and workers from the installed PySpark (no download)."""


@spark_cluster.command("up")
@directory_option
@click.option(
    "--workers",
    type=click.IntRange(1, WORKERS_MAX),
    default=None,
    help=f"How many workers, 1 core each (a new cluster; default {WORKERS_DEFAULT}).",
)
@click.option(
    "--base-port",
    type=int,
    default=None,
    help="The master's port; its UI is +1, worker N's ports +2N and +2N+1 (default: a free range).",
)
@click.option(
    "--worker-memory",
    default=WORKER_MEMORY_DEFAULT,
    show_default=True,
    help="What each worker may grant its executors (sessions ask 512m each).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=READY_TIMEOUT_S_DEFAULT,
    show_default=True,
    help="Seconds to wait until the master lists every worker ALIVE.",
)
def up(
    directory: Path,
    workers: int | None,
    base_port: int | None,
    worker_memory: str,
    timeout_s: float,
) -> None:
    """Start a master and workers (or the stopped daemons of an existing cluster), wait until
    every worker is ALIVE, print the master URL."""
    try:
        if (directory / STATE_FILE).exists():
            record = read_cluster(directory)
            if workers is not None and workers != len(record.workers):
                raise SparkClusterError(
                    f"--workers {workers}, but {directory} holds a cluster of "
                    f"{len(record.workers)} workers"
                )
        else:
            directory.mkdir(parents=True, exist_ok=True)
            record = plan_cluster(
                directory,
                workers=workers or WORKERS_DEFAULT,
                base_port=base_port,
                worker_memory=worker_memory,
            )
        record = start_stopped(record, timeout_s=timeout_s)
    except (TidelogError, OSError) as error:
        fail(error if isinstance(error, TidelogError) else SparkClusterError(str(error)))
    for line in usage(record):
        click.echo(line, err=True)
    click.echo(record.master_url)


def usage(record: SparkCluster) -> list[str]:
    return [
        f"spark standalone: master and {len(record.workers)} workers ready in "
        f"{record.directory} (master UI {record.master_ui}, logs *.log there)",
        f"executors run {record.environment['PYSPARK_PYTHON']} with PYTHONPATH "
        f"{record.environment['PYTHONPATH']}",
        f"  {MASTER_ENV}={record.master_url} tidelog verify-replicas TOPIC",
    ]


@spark_cluster.command("down")
@directory_option
def down(directory: Path) -> None:
    """Stop the workers and the master (SIGTERM, then SIGKILL after 30 s)."""
    try:
        record = read_cluster(directory)
    except SparkClusterError as error:
        fail(error)
    stopped = stop_daemons(record)
    for daemon in record.daemons:
        click.echo(
            f"{daemon.role} (pid {daemon.pid}): "
            f"{'stopped' if daemon.role in stopped else 'was not running'}"
        )


@spark_cluster.command("status")
@directory_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def status(directory: Path, as_json: bool) -> None:
    """Each daemon up or down, whether the master lists it ALIVE, each worker's executors;
    the running applications. Exits 1 when a daemon is down or a worker not ALIVE."""
    try:
        record = read_cluster(directory)
    except SparkClusterError as error:
        fail(error)
    state = describe(record)
    if as_json:
        click.echo(json.dumps(state, indent=2))
    else:
        click.echo(f"master {state['master_url']} (UI {state['master_ui']})")
        for daemon in state["daemons"]:
            executors = ", ".join(str(pid) for pid in daemon["executors"]) or "none"
            click.echo(
                f"{daemon['role']:<10} pid {daemon['pid']:<8} port {daemon['port']:<6} "
                f"{'up' if daemon['up'] else 'DOWN':<5} "
                f"{'alive' if daemon['alive'] else 'NOT ALIVE':<10}"
                + ("" if daemon["role"] == "master" else f" executors: {executors}")
            )
        for app in state["applications"]:
            click.echo(f"application {app['id']} {app['name']}: {app['cores']} cores")
    if not state["healthy"]:
        raise SystemExit(EXIT_ERROR)
