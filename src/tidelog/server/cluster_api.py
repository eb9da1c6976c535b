"""DescribeCluster (v0-2) and DescribeLogDirs (v1-4): the cluster's brokers and controller,
and the partitions this node keeps on disk with their sizes.

Rules of this file:
- DescribeCluster names the brokers of the listener asked (as Metadata does), without the
  fenced ones unless the request wants them (v2, `is_fenced` set); the controller is the
  metadata log's leader (-1 while none, or fenced).
- DescribeLogDirs answers for this node's one data directory: every partition it hosts of
  the topics asked (all when none is named), its size in bytes, with the directory's total
  and usable bytes (v4). DESCRIBE on the cluster when the authorizer is on.
"""

from __future__ import annotations

import shutil
from typing import Any

from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import DESCRIBE
from tidelog.server.answers import body_of, host_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.metadata import METADATA_TOPIC
from tidelog.server.view import BrokerView


async def describe_cluster(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.DescribeClusterBroker
    with_fenced = bool(getattr(body, "include_fenced_brokers", False))
    fenced = broker.image.fenced
    brokers = [
        cls(
            broker_id=int(node),
            host=host_of(broker, node),
            port=port,
            rack=None,
            is_fenced=node in fenced,
        )
        for node, port in sorted(broker.kafka_ports.items())
        if with_fenced or node not in fenced
    ]
    controller = broker.controller_id()
    if controller not in broker.kafka_ports or controller in fenced:
        controller = -1
    return response(
        request,
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=getattr(body, "endpoint_type", 1),
        cluster_id=broker.config.cluster_id,
        controller_id=controller,
        brokers=brokers,
    )  # authorized_operations: the schema's default, "not asked for"


async def describe_log_dirs(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DescribeLogDirsResult
    if not cluster_allowed(broker, DESCRIBE):
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            results=[],
        )
    asked = body_of(request).topics
    wanted: dict[str, set[int] | None] = (
        {str(t.topic): set(t.partitions) for t in asked} if asked is not None else {}
    )
    sizes: dict[str, list[tuple[int, int]]] = {}
    for runner in sorted(broker.hosted(), key=lambda runner: runner.key):
        key = runner.key
        if key.topic == METADATA_TOPIC or runner.disk_error is not None:
            continue
        if asked is not None and key.partition not in (wanted.get(key.topic) or ()):
            continue
        sizes.setdefault(key.topic, []).append((key.partition, runner.size_bytes()))
    topic_cls = cls.DescribeLogDirsTopic
    topics = [
        topic_cls(
            name=topic,
            partitions=[
                topic_cls.DescribeLogDirsPartition(
                    partition_index=partition,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
                for partition, size in parts
            ],
        )
        for topic, parts in sizes.items()
    ]
    usage = shutil.disk_usage(broker.config.data_dir)
    result = cls(
        error_code=0,
        log_dir=str(broker.config.data_dir.resolve()),
        topics=topics,
        total_bytes=usage.total,
        usable_bytes=usage.free,
        is_cordoned=False,
    )
    return response(request, throttle_time_ms=0, error_code=0, results=[result])


CLUSTER_HANDLERS = {
    ApiKey.DESCRIBE_CLUSTER: describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: describe_log_dirs,
}
