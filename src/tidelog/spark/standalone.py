"""A Spark standalone cluster on 127.0.0.1 from the installed PySpark: a master and workers.

`tidelog spark cluster up|down|status` (tools/spark_cmd.py) runs it; tests and benchmarks use
it to run the tidelog source and sink as users do, with executors in their own JVMs.

Rules of this file:
- Nothing is downloaded: SPARK_HOME is the installed pyspark package's directory, and each
  daemon is `SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master` (or
  `...worker.Worker`). spark-class execs the JVM, so the PID recorded is the JVM's.
- A cluster lives in one directory: `DIR/spark-cluster.json` records the master URL, every
  daemon (role, pid, ports, log file) and the environment they were started with;
  `DIR/master.log`, `DIR/worker-N.log` are their stdout and stderr, and `DIR/worker-N/` a
  worker's work directory (its executors' logs: `app-*/ID/stderr`; its JVMs' temporary
  files: `tmp/`, through JDK_JAVA_OPTIONS). The file is replaced atomically.
- Ports, from base P: the master P, its web UI P+1; worker N (from 1) P+2N, its web UI
  P+2N+1. Everything binds 127.0.0.1 (`--host` and SPARK_LOCAL_IP, which Spark's web UIs
  bind to); the master's UI is what `up` and `status` read (`GET /json/`).
- The environment is explicit and recorded: SPARK_HOME, SPARK_LOCAL_IP, SPARK_DAEMON_MEMORY,
  PYSPARK_PYTHON (the interpreter that runs this code), and PYTHONPATH with the directory
  this tidelog is imported from first. Executors are the workers' children and inherit it,
  so their Python workers run this interpreter and import this tidelog (an editable install
  elsewhere, such as another worktree's, does not win). Sessions add their own
  (`session.spark_session` sets spark.pyspark.python and spark.executorEnv.PYTHONPATH).
- Only recorded PIDs are signalled, and only while /proc/PID/cmdline still shows that
  daemon (its class and its port): a PID reused by an unrelated process is never touched.
  Stopping is SIGTERM, then SIGKILL for what is left after STOP_TIMEOUT_S. A worker's
  executors exit with it (they watch their worker); `executor_pids` finds them by parent.
- Ready means the master's `/json/` lists every recorded worker ALIVE. Every wait polls with
  a deadline; every HTTP request has a short timeout.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Final

import tidelog
from tidelog import clock
from tidelog.errors import TidelogError

STATE_FILE: Final = "spark-cluster.json"
MASTER_ENV: Final = "TIDELOG_SPARK_MASTER"  # names the master of tidelog's jobs (session.py)
HOST: Final = "127.0.0.1"
MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS: Final = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
WORKERS_DEFAULT: Final = 2
WORKERS_MAX: Final = 16
WORKER_CORES: Final = 1  # one task at a time per worker: the machine has 2 cores
WORKER_MEMORY_DEFAULT: Final = "1g"  # what a worker may grant executors (512m each)
DAEMON_MEMORY: Final = "256m"  # the master's and each worker's own heap
PORT_MIN: Final = 20_000
PORT_MAX: Final = 32_000  # below Linux's ephemeral range, as the brokers' test ports
PORT_TRIES_MAX: Final = 50
READY_TIMEOUT_S_DEFAULT: Final = 90.0
STOP_TIMEOUT_S: Final = 30.0
POLL_INTERVAL_S: Final = 0.2
HTTP_TIMEOUT_S: Final = 2.0
PPID_FIELD: Final = 1  # of /proc/PID/stat after the command's closing parenthesis


class SparkClusterError(TidelogError):
    """The Spark cluster directory or a daemon cannot do what was asked."""


@dataclass(frozen=True)
class Daemon:
    """One process of the cluster: the master, or worker N."""

    role: str  # "master" or "worker-N"
    pid: int
    port: int
    ui_port: int
    log: str

    @property
    def main_class(self) -> str:
        return MASTER_CLASS if self.role == "master" else WORKER_CLASS


@dataclass(frozen=True)
class SparkCluster:
    """The whole of `spark-cluster.json`."""

    directory: str
    master_url: str
    master: Daemon
    workers: tuple[Daemon, ...]
    worker_memory: str
    environment: dict[str, str]

    @property
    def daemons(self) -> tuple[Daemon, ...]:
        return (self.master, *self.workers)

    @property
    def master_ui(self) -> str:
        return f"http://{HOST}:{self.master.ui_port}"

    def with_pid(self, role: str, pid: int) -> SparkCluster:
        if role == self.master.role:
            return replace(self, master=replace(self.master, pid=pid))
        workers = tuple(replace(w, pid=pid) if w.role == role else w for w in self.workers)
        return replace(self, workers=workers)


def spark_home() -> Path:
    """The installed pyspark package's directory (it holds bin/spark-class and jars/)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterError("pyspark is not installed: pip install -e '.[spark]'")
    home = Path(spec.origin).parent
    if not (home / "bin" / "spark-class").is_file():
        raise SparkClusterError(f"{home} has no bin/spark-class: reinstall pyspark")
    return home


def tidelog_root() -> Path:
    """The directory this tidelog package is imported from (PYTHONPATH for executors)."""
    return Path(tidelog.__file__).resolve().parents[1]


def daemon_environment() -> dict[str, str]:
    """What every daemon, and through them every executor, runs with (recorded)."""
    inherited = os.environ.get("PYTHONPATH", "")
    paths = [str(tidelog_root()), *(p for p in inherited.split(os.pathsep) if p)]
    environment = {
        "SPARK_HOME": str(spark_home()),
        "SPARK_LOCAL_IP": HOST,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
        # The master's REST submission server would listen on a fixed port (6066) too.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    if os.environ.get("JAVA_HOME"):
        environment["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return environment


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def ports_of(base: int, workers: int) -> list[int]:
    return list(range(base, base + 2 + 2 * workers))


def free_base_port(workers: int, rng: random.Random | None = None) -> int:
    """A base port whose whole range (master, workers, their UIs) is free on 127.0.0.1."""
    rng = rng or random.Random()
    for _ in range(PORT_TRIES_MAX):
        base = rng.randrange(PORT_MIN, PORT_MAX - 2 - 2 * workers)
        if all(port_free(port) for port in ports_of(base, workers)):
            return base
    raise SparkClusterError("no free port range on 127.0.0.1")


def plan_cluster(
    directory: Path, *, workers: int, base_port: int | None, worker_memory: str
) -> SparkCluster:
    """A new cluster's record (no PIDs yet); SparkClusterError for a bad request."""
    if not 1 <= workers <= WORKERS_MAX:
        raise SparkClusterError(f"--workers {workers}: from 1 to {WORKERS_MAX}")
    base = free_base_port(workers) if base_port is None else base_port
    if not 1024 <= base <= 65_535 - 2 - 2 * workers:
        raise SparkClusterError(f"--base-port {base}: its ports must lie in 1024..65535")
    directory = directory.resolve()
    master = Daemon("master", 0, base, base + 1, str(directory / "master.log"))
    nodes = tuple(
        Daemon(f"worker-{n}", 0, base + 2 * n, base + 2 * n + 1, str(directory / f"worker-{n}.log"))
        for n in range(1, workers + 1)
    )
    return SparkCluster(
        directory=str(directory),
        master_url=f"spark://{HOST}:{base}",
        master=master,
        workers=nodes,
        worker_memory=worker_memory,
        environment=daemon_environment(),
    )


def read_cluster(directory: Path) -> SparkCluster:
    """The cluster recorded in `directory`; SparkClusterError when there is none or it is bad."""
    path = directory / STATE_FILE
    if not path.is_file():
        raise SparkClusterError(f"no Spark cluster in {directory} (run `tidelog spark cluster up`)")
    try:
        data = json.loads(path.read_text())
        record = SparkCluster(
            directory=str(data["directory"]),
            master_url=str(data["master_url"]),
            master=Daemon(**data["master"]),
            workers=tuple(Daemon(**worker) for worker in data["workers"]),
            worker_memory=str(data["worker_memory"]),
            environment={str(k): str(v) for k, v in data["environment"].items()},
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise SparkClusterError(f"{path} is not a Spark cluster file: {error!r}") from None
    if not record.workers:
        raise SparkClusterError(f"{path} lists no workers")
    return record


def write_cluster(record: SparkCluster) -> None:
    """Replace `spark-cluster.json` atomically (write a temporary file, then rename)."""
    directory = Path(record.directory)
    temporary = directory / f".{STATE_FILE}.tmp"
    try:
        temporary.write_text(json.dumps(asdict(record), indent=2) + "\n")
        os.replace(temporary, directory / STATE_FILE)
    except OSError as error:
        raise SparkClusterError(f"cannot write {directory / STATE_FILE}: {error}") from None


def daemon_argv(record: SparkCluster, daemon: Daemon) -> list[str]:
    """The command line that starts `daemon` (the same on every restart)."""
    spark_class = str(Path(record.environment["SPARK_HOME"]) / "bin" / "spark-class")
    ports = ["--host", HOST, "--port", str(daemon.port), "--webui-port", str(daemon.ui_port)]
    if daemon.role == "master":
        return [spark_class, MASTER_CLASS, *ports]
    work = Path(record.directory) / daemon.role
    return [
        spark_class,
        WORKER_CLASS,
        *ports,
        "--cores",
        str(WORKER_CORES),
        "--memory",
        record.worker_memory,
        "--work-dir",
        str(work),
        record.master_url,
    ]


def command_line(pid: int) -> list[str]:
    """/proc/PID/cmdline as words; [] for no such process (or a zombie)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [word.decode(errors="replace") for word in raw.split(b"\0") if word]


def is_our_daemon(daemon: Daemon) -> bool:
    """Whether `daemon.pid` is still that daemon: its class and its `--port` on the line."""
    if daemon.pid <= 0:
        return False
    reap(daemon.pid)
    words = command_line(daemon.pid)
    if daemon.main_class not in words or "--port" not in words:
        return False
    return words[words.index("--port") + 1 : words.index("--port") + 2] == [str(daemon.port)]


def reap(pid: int) -> None:
    """Collect the exit status if `pid` is our child (when the CLI runs in-process)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def parent_of(pid: int) -> int | None:
    """The parent PID from /proc/PID/stat, or None if there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[PPID_FIELD])


def has_exited(pid: int) -> bool:
    reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def executor_pids(worker: Daemon) -> list[int]:
    """The executor JVMs (CoarseGrainedExecutorBackend) that `worker` launched: its children."""
    if not is_our_daemon(worker):
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if parent_of(pid) == worker.pid and EXECUTOR_CLASS in command_line(pid):
            found.append(pid)
    return sorted(found)


def start_daemon(record: SparkCluster, daemon: Daemon) -> int:
    """Start `daemon` in its own session, output appended to its log; the new pid.

    posix_spawn rather than subprocess.Popen: the daemon must outlive this command, and a
    Popen object dropped while its child runs warns (ResourceWarning)."""
    argv = daemon_argv(record, daemon)
    environment = {**os.environ, **record.environment}
    environment.pop("SPARK_ENV_LOADED", None)  # load-spark-env.sh runs for each daemon
    if daemon.role != "master":
        temporary = Path(record.directory) / daemon.role / "tmp"
        temporary.mkdir(parents=True, exist_ok=True)
        # The worker's JVMs (its executors: their native libraries, snappy's and lz4's)
        # write their temporary files here, not in /tmp, where an executor killed before
        # its exit hooks ran would leave them.
        environment["JDK_JAVA_OPTIONS"] = f"-Djava.io.tmpdir={temporary}"
    try:
        with Path(daemon.log).open("a") as log:
            log.write(f"--- tidelog spark cluster: starting {daemon.role}: {' '.join(argv)}\n")
    except OSError as error:
        raise SparkClusterError(f"{daemon.role}: cannot write {daemon.log}: {error}") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, daemon.log, flags, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(argv[0], argv, environment, file_actions=actions, setsid=True)


def master_state(record: SparkCluster) -> dict[str, Any] | None:
    """The master's `/json/` (workers, cores, memory, applications), or None if it does not
    answer."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{record.master_ui}/json/", timeout=HTTP_TIMEOUT_S) as reply:
            state: dict[str, Any] = json.loads(reply.read())
    except (OSError, ValueError):  # URLError and timeouts are OSErrors
        return None
    return state


def alive_workers(record: SparkCluster, state: dict[str, Any] | None) -> list[str]:
    """The recorded workers the master lists ALIVE (a restarted worker's old entry is DEAD)."""
    if state is None:
        return []
    alive = {(w.get("host"), w.get("port")) for w in state.get("workers", [])
             if w.get("state") == "ALIVE"}  # fmt: skip
    return [w.role for w in record.workers if (HOST, w.port) in alive]


def wait_until(condition: Callable[[], bool], *, timeout_s: float) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; whether it held."""
    return clock.wait_until(condition, timeout_s=timeout_s, interval_s=POLL_INTERVAL_S)


def log_tail(daemon: Daemon, lines: int = 10) -> str:
    try:
        text = Path(daemon.log).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_ready(record: SparkCluster, *, timeout_s: float) -> None:
    """Until the master lists every recorded worker ALIVE; SparkClusterError with the logs'
    tails if a daemon exits or the time runs out."""

    def ready() -> bool:
        gone = [d for d in record.daemons if has_exited(d.pid)]
        if gone:
            raise SparkClusterError(
                f"{gone[0].role} exited; the end of {gone[0].log}:\n{log_tail(gone[0])}"
            )
        return len(alive_workers(record, master_state(record))) == len(record.workers)

    if not wait_until(ready, timeout_s=timeout_s):
        alive = alive_workers(record, master_state(record))
        raise SparkClusterError(
            f"the master at {record.master_ui} lists {len(alive)} of {len(record.workers)} "
            f"workers alive after {timeout_s:.0f} s; see the logs in {record.directory}"
        )


def start_stopped(record: SparkCluster, *, timeout_s: float) -> SparkCluster:
    """Start every daemon that is not running (the master first), record the PIDs, wait
    until ready."""
    stopped = [d for d in record.daemons if not is_our_daemon(d)]
    busy = [p for d in stopped for p in (d.port, d.ui_port) if not port_free(p)]
    if busy:
        raise SparkClusterError(f"ports {busy} on {HOST} are in use (choose --base-port)")
    deadline = time.monotonic() + timeout_s
    for daemon in stopped:
        record = record.with_pid(daemon.role, start_daemon(record, daemon))
        write_cluster(record)  # at once: `down` must find every started PID
        if daemon.role == "master":
            # A worker that calls before the master listens retries only seconds later; one
            # started now takes longer to boot than the master takes to become ALIVE.
            wait_master_listening(record, timeout_s=deadline - time.monotonic())
    wait_ready(record, timeout_s=max(deadline - time.monotonic(), 0.0))
    return record


def wait_master_listening(record: SparkCluster, *, timeout_s: float) -> None:
    def listening() -> bool:
        if has_exited(record.master.pid):  # not is_our_daemon: it may not have exec'd yet
            raise SparkClusterError(
                f"the master exited; the end of {record.master.log}:\n{log_tail(record.master)}"
            )
        with socket.socket() as sock:
            sock.settimeout(HTTP_TIMEOUT_S)
            return sock.connect_ex((HOST, record.master.port)) == 0

    if not wait_until(listening, timeout_s=timeout_s):
        raise SparkClusterError(f"the master does not listen on {record.master_url}")


def signal_daemon(daemon: Daemon, signum: signal.Signals) -> bool:
    """Send `signum` to `daemon` if it is still that daemon; whether it was sent."""
    if not is_our_daemon(daemon):
        return False
    try:
        os.kill(daemon.pid, signum)
    except ProcessLookupError:
        return False
    return True


def stop_daemons(record: SparkCluster, *, timeout_s: float = STOP_TIMEOUT_S) -> list[str]:
    """SIGTERM the workers, then the master; SIGKILL what is left after `timeout_s`; the
    roles stopped."""
    stopped = [d for d in (*record.workers, record.master) if signal_daemon(d, signal.SIGTERM)]

    def all_gone() -> bool:
        return all(has_exited(d.pid) for d in stopped)

    if not wait_until(all_gone, timeout_s=timeout_s):
        for daemon in stopped:
            signal_daemon(daemon, signal.SIGKILL)
        wait_until(all_gone, timeout_s=timeout_s)
    return [d.role for d in stopped]


def describe(record: SparkCluster) -> dict[str, Any]:
    """`status`: each daemon up or down (with its executors), and the master's view."""
    state = master_state(record)
    alive = alive_workers(record, state)
    daemons = [
        {
            **asdict(d),
            "up": is_our_daemon(d),
            "alive": d.role in alive if d.role != "master" else state is not None,
            "executors": executor_pids(d) if d.role != "master" else [],
        }
        for d in record.daemons
    ]
    applications = [
        {"id": a.get("id"), "name": a.get("name"), "cores": a.get("cores"), "state": a.get("state")}
        for a in (state or {}).get("activeapps", [])
    ]
    return {
        "master_url": record.master_url,
        "master_ui": record.master_ui,
        "healthy": all(d["up"] and d["alive"] for d in daemons),
        "daemons": daemons,
        "applications": applications,
        "environment": record.environment,
    }
