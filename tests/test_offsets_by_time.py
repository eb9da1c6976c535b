"""ListOffsets by timestamp across leader changes, as kafka-python and confluent-kafka ask.

Records are produced with known timestamps, then the leader is restarted twice: each new
leader writes a control batch stamped with its own clock, later than every record. A
lookup finds the first data record at or after the time asked (control batches never
match) and answers that record's timestamp; past the last record it answers -1. The
control records carry KRaft's LeaderChangeMessage, and every client skips them.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from tidelog.testing.live import LiveCluster, create_topic, tidelog

TOPIC = "times"
BASE_MS = 1_700_000_000_000
RECORDS = 20
STEP_MS = 1000


def test_offsets_by_time_skip_control_batches_and_answer_the_record_s_time(
    tmp_path: Path,
) -> None:
    cluster = LiveCluster(tmp_path / "cluster")
    try:
        create_topic(cluster.bootstrap, TOPIC, partitions=1)
        cluster.wait_hosted_everywhere(TOPIC, 1)
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        sent = [
            producer.send(
                TOPIC, f"r{i}".encode(), partition=0, timestamp_ms=BASE_MS + i * STEP_MS
            ).get(timeout=30)
            for i in range(RECORDS)
        ]
        producer.close()
        offsets = [metadata.offset for metadata in sent]
        for _ in range(2):  # two new leaders, two control batches after the records
            node = cluster.leader_of(TOPIC)
            restarted = tidelog(
                "cluster", "restart", "--data-dir", str(tmp_path / "cluster"), "--node", str(node)
            )
            assert restarted.returncode == 0, restarted.stderr
            cluster.wait_hosted_everywhere(TOPIC, 1)

        partition = TopicPartition(TOPIC, 0)
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
        asked = {
            BASE_MS - 5: (offsets[0], BASE_MS),
            BASE_MS: (offsets[0], BASE_MS),
            BASE_MS + 1: (offsets[1], BASE_MS + STEP_MS),
            BASE_MS + 7 * STEP_MS: (offsets[7], BASE_MS + 7 * STEP_MS),
            BASE_MS + (RECORDS - 1) * STEP_MS: (offsets[-1], BASE_MS + (RECORDS - 1) * STEP_MS),
        }
        for timestamp, (offset, found_at) in asked.items():
            found = consumer.offsets_for_times({partition: timestamp})[partition]
            assert found is not None, timestamp
            assert (found.offset, found.timestamp) == (offset, found_at), timestamp
        assert consumer.offsets_for_times({partition: BASE_MS + RECORDS * STEP_MS}) == {
            partition: None  # kafka-python's spelling of offset -1
        }
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        values = [
            record.value
            for records in consumer.poll(timeout_ms=5000, max_records=1000).values()
            for record in records
        ]
        assert values == [f"r{i}".encode() for i in range(RECORDS)]
        consumer.close()

        confluent = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "times"})
        try:
            [found] = confluent.offsets_for_times(
                [ConfluentPartition(TOPIC, 0, BASE_MS + 3 * STEP_MS + 1)], timeout=30
            )
            assert found.offset == offsets[4]
            [past] = confluent.offsets_for_times(
                [ConfluentPartition(TOPIC, 0, BASE_MS + RECORDS * STEP_MS)], timeout=30
            )
            assert past.offset == -1
        finally:
            confluent.close()
    finally:
        cluster.down()
