"""DescribeConfigs (v0-2): a topic's configs, as Kafka's admin clients and tools read them.

Rules of this file:
- A TOPIC resource answers every config tidelog knows (`TOPIC_CONFIG_NAMES`), or those
  asked for: the value given at creation (source TOPIC_CONFIG), else the value in force
  (source DEFAULT_CONFIG; min.insync.replicas defaults to a majority of the replicas).
  DESCRIBE_CONFIGS on the topic is needed when the authorizer is on.
- A BROKER resource answers no configs (none are settable); any other type is refused
  with INVALID_REQUEST.
"""

from __future__ import annotations

from typing import Any, Final

from tidelog.core.quorum import majority
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import DESCRIBE_CONFIGS, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed
from tidelog.server.metadata import TopicInfo
from tidelog.server.topic_config import TOPIC_CONFIG_NAMES
from tidelog.server.view import BrokerView

TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
TOPIC_CONFIG_SOURCE: Final = 1
DEFAULT_CONFIG_SOURCE: Final = 5


def in_force(info: TopicInfo) -> dict[str, str]:
    """Every config of the topic as it is in force (Kafka's spelling of each value)."""
    config = info.config
    factor = len(info.replicas[0]) if info.replicas else 1
    return {
        "min.insync.replicas": str(config.min_insync_replicas or majority(factor)),
        "retention.ms": str(-1 if config.retention_ms is None else config.retention_ms),
        "retention.bytes": str(-1 if config.retention_bytes is None else config.retention_bytes),
        "segment.bytes": str(config.segment_bytes),
        "max.message.bytes": str(config.max_message_bytes),
        "cleanup.policy": config.cleanup_policy,
    }


async def describe_configs(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DescribeConfigsResult
    entry = cls.DescribeConfigsResourceResult
    results = []
    for resource in body_of(request).resources:
        kind, name = resource.resource_type, str(resource.resource_name)
        code, message, configs = ErrorCode.NONE, None, []
        info = broker.image.topics.get(name) if kind == TOPIC_RESOURCE else None
        if kind == BROKER_RESOURCE:
            pass
        elif kind != TOPIC_RESOURCE:
            code, message = ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs"
        elif not allowed(broker, DESCRIBE_CONFIGS, TOPIC, name):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized"
        elif info is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
        else:
            values = in_force(info)
            wanted = resource.configuration_keys or sorted(TOPIC_CONFIG_NAMES)
            for key in wanted:
                if key not in values:
                    continue
                given = key in info.configs
                configs.append(
                    entry(
                        name=key,
                        value=info.configs[key] if given else values[key],
                        read_only=False,
                        config_source=TOPIC_CONFIG_SOURCE if given else DEFAULT_CONFIG_SOURCE,
                        is_default=not given,
                        is_sensitive=False,
                        synonyms=[],
                        config_type=0,
                        documentation=None,
                    )
                )
        results.append(
            cls(
                error_code=int(code),
                error_message=message,
                resource_type=kind,
                resource_name=name,
                configs=configs,
            )
        )
    return response(request, throttle_time_ms=0, results=results)


CONFIGS_HANDLERS = {ApiKey.DESCRIBE_CONFIGS: describe_configs}
