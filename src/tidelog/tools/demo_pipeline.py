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

Rules of this file: it knows the transfers only as (payer, payee, cents) from the demo's
ledger; the brokers stay the demo's to start and stop; its files live in `DIR/pipeline/`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.table import Table

from tidelog.errors import TidelogError
from tidelog.tools.client_kafka import ClientSettings, admin_client, create_topic, kafka_errors
from tidelog.tools.groups_cmd import describe_group, offset_rows, print_offset_rows

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

    @property
    def ok(self) -> bool:
        return not self.wrong and self.read == self.acknowledged and self.malformed == 0

    def line(self) -> str:
        counts = (
            f"{self.accounts} balances from {self.read} transfers read, "
            f"{self.acknowledged} acknowledged"
        )
        if self.ok:
            return f"pipeline verdict: OK — {counts}, every balance exact to the cent"
        problems = [
            f"{len(self.wrong)} balances differ" if self.wrong else "",
            f"{self.malformed} values are not transfers" if self.malformed else "",
        ]
        return f"pipeline verdict: FAILED — {', '.join([counts, *filter(None, problems)])}"


def judge_balances(
    expected: dict[str, int], found: dict[str, int], *, acknowledged: int, read: int, malformed: int
) -> PipelineVerdict:
    accounts = sorted(set(expected) | set(found))
    wrong = [a for a in accounts if expected.get(a) != found.get(a)]
    return PipelineVerdict(acknowledged, read, malformed, len(found), wrong)


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


def run_pipeline_stage(
    console: Console, bootstrap: str, directory: Path, *, topic: str, transfers: list[Transfer]
) -> PipelineVerdict:
    from pyspark.errors import PySparkException  # noqa: PLC0415

    from tidelog.spark.balances import Pipeline  # noqa: PLC0415 - pyspark is heavy
    from tidelog.spark.session import master_of, spark_session  # noqa: PLC0415

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
    master = master_of(None)  # TIDELOG_SPARK_MASTER, else local[2]
    console.print(f"Spark master: {master}")
    spark = spark_session("tidelog-demo", master)
    try:
        pipeline = Pipeline(
            bootstrap,
            transfers=topic,
            balances=BALANCES_TOPIC,
            directory=directory / PIPELINE_DIR,
            group=GROUP,
        )
        run = pipeline.run(spark)
    except (PySparkException, TimeoutError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise PipelineError(f"the Spark pipeline failed: {first_line}") from error
    finally:
        spark.stop()
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
    )
    console.print(verdict.line(), style="bold green" if verdict.ok else "bold red")
    return verdict
