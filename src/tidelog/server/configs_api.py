"""DescribeConfigs (v1-4), AlterConfigs (v0-2) and IncrementalAlterConfigs (v0-1): a
topic's configs, as Kafka's admin clients and tools read and change them.

Rules of this file:
- A TOPIC resource answers every config tidelog knows (`TOPIC_CONFIG_NAMES`), or those
  asked for: the value given at creation (source TOPIC_CONFIG), else the value in force
  (source DEFAULT_CONFIG; min.insync.replicas defaults to a majority of the replicas in
  quorum mode, 1 in ISR mode),
  with its type (v3+) and, when asked, its documentation.
  DESCRIBE_CONFIGS on the topic is needed when the authorizer is on.
- A BROKER resource (the cluster default "", or a broker id) answers the replication
  throttles of server/broker_configs.py: for a broker each one in force with its source
  and, when asked, its synonyms (the broker's own value, the cluster default, Kafka's
  default); for the default those set. DESCRIBE_CONFIGS and ALTER_CONFIGS on the cluster
  with an authorizer. Any other resource type is refused with INVALID_REQUEST.
- AlterConfigs replaces a topic's whole set of configs (those not named go back to their
  defaults, as in Kafka); IncrementalAlterConfigs sets (0) or deletes (1) single ones
  (APPEND and SUBTRACT are for list configs: tidelog's topics have none, INVALID_CONFIG).
  The resulting set is parsed as at creation (a bad value is refused with Kafka's
  message, nothing changes; `replication.mode` is fixed at creation), then written to the
  metadata log (`alter_configs`); every replica follows it: retention and segments at
  once, min.insync.replicas too. ALTER_CONFIGS on the topic with an authorizer; internal
  topics cannot be altered. A BROKER resource's set is checked and written the same way
  (`alter_broker_configs`); every node applies its throttle at once (server/throttles.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, NamedTuple

from tidelog.errors import MetadataError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER_CONFIGS, DESCRIBE_CONFIGS, TOPIC
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import allowed, cluster_allowed
from tidelog.server.broker_configs import (
    BROKER_CONFIG_DOCS,
    BrokerConfigEntry,
    broker_of,
    check_command,
)
from tidelog.server.metadata import INTERNAL_TOPICS, TopicInfo
from tidelog.server.topic_config import TOPIC_CONFIG_NAMES, TopicConfig, keep_fixed
from tidelog.server.view import BrokerView

Handler = Callable[[BrokerView, KafkaRequest], Awaitable[Any]]
SET, DELETE = 0, 1  # IncrementalAlterConfigs' operations tidelog's configs take
TOPIC_RESOURCE: Final = 2
BROKER_RESOURCE: Final = 4
TOPIC_CONFIG_SOURCE: Final = 1
DEFAULT_CONFIG_SOURCE: Final = 5


# Kafka's ConfigType of each topic config (DescribeConfigs v3+) and its documentation
# (asked for with IncludeDocumentation), as Kafka's TopicConfig describes them.
BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
CONFIG_TYPES: Final = {
    "min.insync.replicas": INT,
    "retention.ms": LONG,
    "retention.bytes": LONG,
    "segment.bytes": INT,
    "max.message.bytes": INT,
    "cleanup.policy": LIST,
    "replication.mode": STRING,
    "unclean.leader.election.enable": BOOLEAN,
}
CONFIG_DOCS: Final = {
    "min.insync.replicas": "The minimum number of replicas that must acknowledge a write "
    "with acks=all for it to be considered successful.",
    "retention.ms": "The maximum time a log segment is retained before it is deleted; -1: "
    "no time limit.",
    "retention.bytes": "The maximum size a partition's log can grow to before old segments "
    "are deleted; -1: no size limit.",
    "segment.bytes": "The segment file size for the log: retention deletes whole segments.",
    "max.message.bytes": "The largest record batch size allowed, after compression.",
    "cleanup.policy": "The retention policy of old log segments: delete.",
    "replication.mode": "How the high-water mark is computed: quorum (what a majority of the "
    "replicas holds) or isr (the minimum log end over the in-sync replicas, as Kafka); fixed "
    "when the topic is created.",
    "unclean.leader.election.enable": "In isr mode, whether a replica outside the in-sync "
    "and eligible replicas may be elected as a last resort, even though data loss may occur.",
}


class ConfigEntry(NamedTuple):
    """One topic config as DescribeConfigs and CreateTopics (v5+) answer it."""

    name: str
    value: str
    source: int  # TOPIC_CONFIG_SOURCE, or DEFAULT_CONFIG_SOURCE
    config_type: int
    documentation: str

    @property
    def is_default(self) -> bool:
        return self.source == DEFAULT_CONFIG_SOURCE


def config_entries(info: TopicInfo, wanted: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The topic's configs named in `wanted` (all when None or empty), each as given at
    creation or alteration, else as in force by default; unknown names are left out."""
    values = in_force(info)
    entries = []
    for key in wanted or sorted(TOPIC_CONFIG_NAMES):
        if key not in values:
            continue
        given = key in info.configs
        entries.append(
            ConfigEntry(
                key,
                info.configs[key] if given else values[key],
                TOPIC_CONFIG_SOURCE if given else DEFAULT_CONFIG_SOURCE,
                CONFIG_TYPES.get(key, 0),
                CONFIG_DOCS.get(key, ""),
            )
        )
    return entries


def in_force(info: TopicInfo) -> dict[str, str]:
    """Every config of the topic as it is in force (Kafka's spelling of each value)."""
    config = info.config
    factor = len(info.replicas[0]) if info.replicas else 1
    return {
        "min.insync.replicas": str(config.min_insync(factor)),
        "retention.ms": str(-1 if config.retention_ms is None else config.retention_ms),
        "retention.bytes": str(-1 if config.retention_bytes is None else config.retention_bytes),
        "segment.bytes": str(config.segment_bytes),
        "max.message.bytes": str(config.max_message_bytes),
        "cleanup.policy": config.cleanup_policy,
        "replication.mode": config.replication_mode,
        "unclean.leader.election.enable": str(config.unclean_leader_election).lower(),
    }


async def describe_configs(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DescribeConfigsResult
    entry = cls.DescribeConfigsResourceResult
    body = body_of(request)
    with_documentation = bool(getattr(body, "include_documentation", False))
    results = []
    for resource in body.resources:
        kind, name = resource.resource_type, str(resource.resource_name)
        code, message = ErrorCode.NONE, None
        configs: list[Any] = []
        info = broker.image.topics.get(name) if kind == TOPIC_RESOURCE else None
        if kind == BROKER_RESOURCE:
            code, message, configs = broker_results(broker, resource, entry, body)
        elif kind != TOPIC_RESOURCE:
            code, message = ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs"
        elif not allowed(broker, DESCRIBE_CONFIGS, TOPIC, name):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized"
        elif info is None:
            code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
        else:
            configs = [
                entry(
                    name=config.name,
                    value=config.value,
                    read_only=False,
                    config_source=config.source,
                    is_default=config.is_default,
                    is_sensitive=False,
                    synonyms=[],
                    config_type=config.config_type,
                    documentation=config.documentation if with_documentation else None,
                )
                for config in config_entries(info, resource.configuration_keys)
            ]
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


def broker_results(
    broker: BrokerView, resource: Any, entry: Any, body: Any
) -> tuple[ErrorCode, str | None, list[Any]]:
    """DescribeConfigs of one BROKER resource: its error, message and configs."""
    if not cluster_allowed(broker, DESCRIBE_CONFIGS):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized", []
    try:
        found = broker.image.broker_configs.entries(
            str(resource.resource_name), resource.configuration_keys
        )
    except MetadataError as error:
        return ErrorCode[error.code], str(error), []
    synonyms = bool(getattr(body, "include_synonyms", False))
    documented = bool(getattr(body, "include_documentation", False))
    return ErrorCode.NONE, None, [broker_entry(c, entry, synonyms, documented) for c in found]


def broker_entry(config: BrokerConfigEntry, entry: Any, synonyms: bool, documented: bool) -> Any:
    synonym = entry.DescribeConfigsSynonym
    return entry(
        name=config.name,
        value=config.value,
        read_only=False,
        config_source=config.source,
        is_default=config.source == DEFAULT_CONFIG_SOURCE,
        is_sensitive=False,
        synonyms=[
            synonym(name=config.name, value=s.value, source=s.source) for s in config.synonyms
        ]
        if synonyms
        else [],
        config_type=LONG,  # both rates
        documentation=BROKER_CONFIG_DOCS[config.name] if documented else None,
    )


def target_of(broker: BrokerView, kind: int, name: str) -> tuple[ErrorCode, str | None]:
    """Whether a resource's configs may be altered: NONE, or the refusal."""
    if kind == BROKER_RESOURCE:
        if not cluster_allowed(broker, ALTER_CONFIGS):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized"
        try:
            broker_of(name)
        except MetadataError as error:
            return ErrorCode[error.code], str(error)
        return ErrorCode.NONE, None
    if kind != TOPIC_RESOURCE:
        return ErrorCode.INVALID_REQUEST, f"resource type {kind} has no configs"
    if not allowed(broker, ALTER_CONFIGS, TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized"
    if name not in broker.image.topics:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
    if name in INTERNAL_TOPICS:
        return ErrorCode.INVALID_REQUEST, f"{name} is an internal topic"
    return ErrorCode.NONE, None


def held_configs(broker: BrokerView, kind: int, name: str) -> dict[str, str]:
    """The configs set on a resource that may be altered (`target_of`)."""
    if kind == BROKER_RESOURCE:
        return broker.image.broker_configs.configs_of(name)
    return broker.image.topics[name].configs


async def alter(
    broker: BrokerView, kind: int, name: str, configs: dict[str, str], validate_only: bool
) -> tuple[ErrorCode, str | None]:
    """Check the resulting set (a topic's as at creation), then write it (unless
    validate_only, or nothing changes)."""
    held = held_configs(broker, kind, name)
    try:
        if kind == BROKER_RESOURCE:
            command = check_command(name, configs)
        else:
            replicas = broker.image.topics[name].replicas
            TopicConfig.parse(configs, replication_factor=len(replicas[0]))
            keep_fixed(held, configs)
            command = {"type": "alter_configs", "name": name, "configs": configs}
    except MetadataError as error:
        return ErrorCode[error.code], str(error)
    if validate_only or configs == held:
        return ErrorCode.NONE, None
    return await broker.commit_metadata(command)


def whole_set(resource: Any, held: dict[str, str]) -> dict[str, str] | str:
    """AlterConfigs: the configs named are the new set; or why it cannot be."""
    del held
    wanted = {str(c.name): c.value for c in resource.configs or ()}
    if any(value is None for value in wanted.values()):
        return "a config without a value"
    return wanted


def changed_set(resource: Any, held: dict[str, str]) -> dict[str, str] | str:
    """IncrementalAlterConfigs: the held set with each SET and DELETE made; or why not."""
    configs = dict(held)
    for change in resource.configs or ():
        key, operation = str(change.name), change.config_operation
        if operation == SET and change.value is not None:
            configs[key] = change.value
        elif operation == DELETE:
            configs.pop(key, None)
        else:
            return f"operation {operation} on {key}"
    return configs


def alterer(new_set: Callable[[Any, dict[str, str]], dict[str, str] | str]) -> Handler:
    """The handler that alters each resource's configs to `new_set(resource, held)`."""

    async def handle(broker: BrokerView, request: KafkaRequest) -> Any:
        body = body_of(request)
        cls = request.response_class.AlterConfigsResourceResponse
        responses = []
        for resource in body.resources:
            kind, name = resource.resource_type, str(resource.resource_name)
            code, message = target_of(broker, kind, name)
            if code is ErrorCode.NONE:
                configs = new_set(resource, held_configs(broker, kind, name))
                if isinstance(configs, str):
                    code, message = ErrorCode.INVALID_CONFIG, configs
                else:
                    validate_only = bool(body.validate_only)
                    code, message = await alter(broker, kind, name, configs, validate_only)
            responses.append(
                cls(
                    error_code=int(code),
                    error_message=message,
                    resource_type=kind,
                    resource_name=name,
                )
            )
        return response(request, throttle_time_ms=0, responses=responses)

    return handle


CONFIGS_HANDLERS = {
    ApiKey.DESCRIBE_CONFIGS: describe_configs,
    ApiKey.ALTER_CONFIGS: alterer(whole_set),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: alterer(changed_set),
}
