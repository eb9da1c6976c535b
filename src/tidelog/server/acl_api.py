"""The Kafka APIs of ACLs: CreateAcls, DescribeAcls and DeleteAcls (what confluent-kafka's
and kafka-python's admin clients and `tidelog acls` send).

Rules of this file:
- Without an authorizer every answer is SECURITY_DISABLED, as Kafka answers.
- Creating and deleting need ALTER on the cluster, describing DESCRIBE on it.
- A rule is validated at the door (`acl.acl_of`); the metadata log's leader (the
  controller) writes the change, any other node forwards it there
  (`Broker.commit_metadata`). A delete writes the exact rules its filter matched when it
  was asked.
"""

from __future__ import annotations

from typing import Any

from tidelog.errors import MetadataError
from tidelog.protocol.kafka import ApiKey, KafkaRequest
from tidelog.protocol.kafka_errors import ErrorCode
from tidelog.server.acl import ALTER, DESCRIBE, Acl, AclFilter, acl_of, filter_of
from tidelog.server.answers import body_of, response
from tidelog.server.authorize import cluster_allowed
from tidelog.server.view import BrokerView

DISABLED = (ErrorCode.SECURITY_DISABLED, "no authorizer is configured on the broker")


def refusal(broker: BrokerView, operation: int) -> tuple[ErrorCode, str] | None:
    if not broker.authorizer.enabled:
        return DISABLED
    if not cluster_allowed(broker, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not authorized"
    return None


def filter_from(request_filter: Any) -> AclFilter:
    """The filter of a DescribeAcls request, or of one filter of a DeleteAcls request (the
    two spell it the same way)."""
    return filter_of(
        resource_type=request_filter.resource_type_filter,
        name=request_filter.resource_name_filter,
        pattern=getattr(request_filter, "pattern_type_filter", 3),
        principal=request_filter.principal_filter,
        host=request_filter.host_filter,
        operation=request_filter.operation,
        permission=request_filter.permission_type,
    )


async def create_acls(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.AclCreationResult
    creations = body_of(request).creations
    refused = refusal(broker, ALTER)
    results = []
    for creation in creations:
        code, message = refused or (ErrorCode.NONE, None)
        if refused is None:
            try:
                acl = acl_of(
                    {
                        "resource_type": creation.resource_type,
                        "name": creation.resource_name,
                        "pattern": getattr(creation, "resource_pattern_type", 3),
                        "principal": creation.principal,
                        "host": creation.host,
                        "operation": creation.operation,
                        "permission": creation.permission_type,
                    }
                )
                command = {"type": "create_acls", "acls": [acl.to_json()]}
                code, message = await broker.commit_metadata(command)
            except MetadataError as error:
                code, message = ErrorCode.INVALID_REQUEST, str(error)
        results.append(cls(error_code=int(code), error_message=message))
    return response(request, throttle_time_ms=0, results=results)


def grouped(acls: list[Acl]) -> dict[tuple[int, str, int], list[Acl]]:
    by_resource: dict[tuple[int, str, int], list[Acl]] = {}
    for acl in sorted(acls, key=lambda a: (a.resource_type, a.name, a.pattern, a.principal)):
        by_resource.setdefault((acl.resource_type, acl.name, acl.pattern), []).append(acl)
    return by_resource


async def describe_acls(broker: BrokerView, request: KafkaRequest) -> Any:
    body = body_of(request)
    cls = request.response_class.DescribeAclsResource
    refused = refusal(broker, DESCRIBE)
    if refused is not None:
        return response(
            request,
            throttle_time_ms=0,
            error_code=int(refused[0]),
            error_message=refused[1],
            resources=[],
        )
    wanted = filter_from(body)
    found = [acl for acl in broker.image.acls if wanted.matches(acl)]
    resources = [
        cls(
            resource_type=resource_type,
            resource_name=name,
            pattern_type=pattern,
            acls=[
                cls.AclDescription(
                    principal=acl.principal,
                    host=acl.host,
                    operation=acl.operation,
                    permission_type=acl.permission,
                )
                for acl in acls
            ],
        )
        for (resource_type, name, pattern), acls in grouped(found).items()
    ]
    return response(
        request, throttle_time_ms=0, error_code=0, error_message=None, resources=resources
    )


async def delete_acls(broker: BrokerView, request: KafkaRequest) -> Any:
    cls = request.response_class.DeleteAclsFilterResult
    refused = refusal(broker, ALTER)
    results = []
    for rule in body_of(request).filters:
        matched: list[Acl] = []
        code, message = refused or (ErrorCode.NONE, None)
        if refused is None:
            wanted = filter_from(rule)
            matched = [acl for acl in broker.image.acls if wanted.matches(acl)]
            if matched:
                command = {"type": "delete_acls", "acls": [acl.to_json() for acl in matched]}
                code, message = await broker.commit_metadata(command)
        matching = [
            cls.DeleteAclsMatchingAcl(
                error_code=int(code),
                error_message=message,
                resource_type=acl.resource_type,
                resource_name=acl.name,
                pattern_type=acl.pattern,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission,
            )
            for acl in matched
        ]
        results.append(cls(error_code=int(code), error_message=message, matching_acls=matching))
    return response(request, throttle_time_ms=0, filter_results=results)


ACL_HANDLERS = {
    ApiKey.CREATE_ACLS: create_acls,
    ApiKey.DESCRIBE_ACLS: describe_acls,
    ApiKey.DELETE_ACLS: delete_acls,
}
