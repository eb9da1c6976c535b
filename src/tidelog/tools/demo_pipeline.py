"""The Spark stage of `tidelog demo`: balances per account from the committed transfers.

After the brokers' story (a killed leader, every acknowledged record read back), a Spark
session (local[2], or the standalone master TIDELOG_SPARK_MASTER names) runs
`tidelog.spark.balances`: a Structured Streaming query with Trigger.AvailableNow reads the
transfers through the tidelog source, sums them per account and writes the balances to topic
`balances` through the tidelog sink; a batch job keeps each account's last balance and writes
it to Parquet. The check: those balances equal the ones
computed from the producer's acknowledged transfers, for every account, to the cent (nothing
lost, no ghost transfer from a killed leader's uncommitted log), and the streaming query read
exactly as many transfers as were acknowledged. The query's consumer group shows its lag.
The sink is at least once: the verdict counts its duplicates (balance records in topic
`balances` beyond those the micro-batches emitted); they never fail it, a missing one does.

While Spark works, its progress is shown (`tools/spark_progress.py`): the session's start,
a bar of the offsets read against the HWMs, the micro-batch and stage running, a line per
finished micro-batch. On a standalone cluster (`SparkPlace.kill_in`), one executor JVM is
killed with SIGKILL in the middle of a micro-batch: the query must go on, exact.

Rules of this file: it knows the transfers only as (payer, payee, cents) from the demo's
ledger; the brokers stay the demo's to start and stop; its files live in `DIR/pipeline/`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rich.console import Console
from rich.table import Table

from tidelog.errors import TidelogError
from tidelog.spark.standalone import SparkCluster
from tidelog.tools.client_kafka import ClientSettings, admin_client, create_topic, kafka_errors
from tidelog.tools.groups_cmd import describe_group, offset_rows, print_offset_rows

if TYPE_CHECKING:
    from tidelog.spark.balances import PipelineRun

PIPELINE_DIR: Final = "pipeline"
BALANCES_TOPIC: Final = "balances"
BALANCES_PARTITIONS: Final = 3
GROUP: Final = "demo-balances"
ACCOUNTS_SHOWN: Final = 8

Transfer = tuple[str, str, int]  # paying account, paid account, cents


class PipelineError(TidelogError):
    """The Spark pipeline could not run to its end (a failed or stuck query)."""


def expected_balances(transfers: Iterable[Transfer]) -> dict[str, int]:
    balances: dict[str, int] = {}
    for payer, payee, cents in transfers:
        balances[payer] = balances.get(payer, 0) - cents
        balances[payee] = balances.get(payee, 0) + cents
    return balances


@dataclass(frozen=True)
class PipelineVerdict:
    acknowledged: int  # transfers the producer had acknowledged
    read: int  # transfers the streaming query read
    malformed: int
    accounts: int
    wrong: list[str]  # accounts whose balance differs (or is missing on one side)
    sink_duplicates: int  # balance records the sink wrote twice; negative: missing ones

    @property
    def ok(self) -> bool:
        exact = self.read == self.acknowledged and self.malformed == 0
        return not self.wrong and exact and self.sink_duplicates >= 0

    def line(self) -> str:
        counts = (
            f"{self.accounts} balances from {self.read} transfers read, "
            f"{self.acknowledged} acknowledged"
        )
        duplicates = f"sink duplicates (at-least-once): {max(self.sink_duplicates, 0)}"
        if self.ok:
            return f"pipeline verdict: OK — {counts}, every balance exact to the cent; {duplicates}"
        missing = -self.sink_duplicates
        problems = [
            f"{len(self.wrong)} balances differ" if self.wrong else "",
            f"{self.malformed} values are not transfers" if self.malformed else "",
            f"{missing} balance records missing in topic {BALANCES_TOPIC}" if missing > 0 else "",
        ]
        return (
            f"pipeline verdict: FAILED — {', '.join([counts, *filter(None, problems)])}; "
            f"{duplicates}"
        )


def judge_balances(
    expected: dict[str, int],
    found: dict[str, int],
    *,
    acknowledged: int,
    read: int,
    malformed: int,
    sink_duplicates: int = 0,
) -> PipelineVerdict:
    accounts = sorted(set(expected) | set(found))
    wrong = [a for a in accounts if expected.get(a) != found.get(a)]
    return PipelineVerdict(acknowledged, read, malformed, len(found), wrong, sink_duplicates)


def print_balances(console: Console, expected: dict[str, int], found: dict[str, int]) -> None:
    table = Table(title="balances (cents)", title_justify="left")
    for column in ("ACCOUNT", "FROM ACKNOWLEDGED TRANSFERS", "FROM SPARK", ""):
        table.add_column(column)
    accounts = sorted(set(expected) | set(found))
    for account in accounts[:ACCOUNTS_SHOWN]:
        want, got = expected.get(account), found.get(account)
        table.add_row(account, str(want), str(got), "ok" if want == got else "DIFFERS")
    table.add_row(
        f"... {len(accounts)} in all",
        f"sum {sum(expected.values())}",
        f"sum {sum(found.values())}",
        "",
    )
    console.print(table)


def print_group_lag(console: Console, bootstrap: str) -> None:
    console.print(f"$ tidelog groups describe {GROUP}")
    client = ClientSettings(bootstrap)
    with admin_client(client) as admin, kafka_errors(client, needs="consumer groups"):
        rows = offset_rows(admin, describe_group(admin, GROUP))
    print_offset_rows(rows)


@dataclass(frozen=True)
class SparkPlace:
    """Where the pipeline runs: a master, and the standalone cluster whose executor the
    demo kills mid-batch (`kill_in`), if it is to kill one."""

    master: str | None = None  # None: TIDELOG_SPARK_MASTER, else local[2]
    kill_in: SparkCluster | None = None


def run_pipeline_stage(
    console: Console,
    bootstrap: str,
    directory: Path,
    *,
    topic: str,
    transfers: list[Transfer],
    place: SparkPlace | None = None,
) -> PipelineVerdict:
    from tidelog.spark.session import master_of  # noqa: PLC0415 - pyspark is heavy

    place = place or SparkPlace()
    console.rule("6 · The pipeline on Spark: balances per account")
    console.print(
        "Structured Streaming, Trigger.AvailableNow: transfers (tidelog source) -> sum per\n"
        f"account -> topic {BALANCES_TOPIC} (tidelog sink); the last balance of each account\n"
        f"-> Parquet in {directory / PIPELINE_DIR}. Checked against the acknowledged transfers."
    )
    create_topic(
        ClientSettings(bootstrap),
        BALANCES_TOPIC,
        partitions=BALANCES_PARTITIONS,
        replication_factor=3,
        configs={},
    )
    master = master_of(place.master)
    run = run_on_spark(console, bootstrap, directory, topic=topic, master=master, place=place)
    console.print(
        f"the streaming query read {run.transfers_read} transfers in {run.batches} "
        f"micro-batches; {len(run.balances)} balances written to {run.parquet}"
    )
    expected = expected_balances(transfers)
    print_balances(console, expected, run.balances)
    print_group_lag(console, bootstrap)
    verdict = judge_balances(
        expected,
        run.balances,
        acknowledged=len(transfers),
        read=run.transfers_read,
        malformed=run.malformed,
        sink_duplicates=run.sink_duplicates,
    )
    # One line however wide: scripts and tests look for it whole.
    console.print(verdict.line(), style="bold green" if verdict.ok else "bold red", soft_wrap=True)
    return verdict


def run_on_spark(
    console: Console, bootstrap: str, directory: Path, *, topic: str, master: str, place: SparkPlace
) -> PipelineRun:
    """Start the session (saying so: the JVM takes a while), run the pipeline with its
    progress shown, stop the session; PipelineError when Spark fails."""
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from tidelog.spark.balances import Pipeline  # noqa: PLC0415 - pyspark is heavy
    from tidelog.spark.failures import tidelog_cause  # noqa: PLC0415
    from tidelog.spark.session import spark_session  # noqa: PLC0415
    from tidelog.tools.spark_progress import ExecutorKiller, StreamProgress  # noqa: PLC0415

    console.print(f"starting Spark ({master}); its JVM takes a while to start")
    started = time.monotonic()
    spark = spark_session("tidelog-demo", master)
    console.print(f"Spark started in {time.monotonic() - started:.1f} s")
    pipeline = Pipeline(
        bootstrap,
        transfers=topic,
        balances=BALANCES_TOPIC,
        directory=directory / PIPELINE_DIR,
        group=GROUP,
    )
    killer = None if place.kill_in is None else ExecutorKiller(console, place.kill_in)
    try:
        with StreamProgress(console, spark, killer) as progress:
            run = pipeline.run(spark, progress.watch)
        said = progress.summary()
        if said is not None:
            console.print(said, soft_wrap=True)
    except (PySparkException, TimeoutError) as error:
        cause = tidelog_cause(error) if isinstance(error, PySparkException) else None
        raise PipelineError(f"the Spark pipeline failed: {cause or first_line(error)}") from error
    finally:
        spark.stop()
    return run


def first_line(error: BaseException) -> str:
    """What a failure says first (Spark's errors go on for pages)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else repr(error)
