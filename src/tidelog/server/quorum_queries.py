"""DescribeQuorum asked of a node that does not lead the metadata log (server/broker.py).

Only the metadata log's leader knows how far each copy has come, so another node asks it
over the peer link (QuorumQuery) and hands its answer (QuorumAnswer, a checked report,
server/quorum.py) to the client's request.

Rules of this file:
- At most QUORUM_QUERIES_MAX queries wait at once, each at most QUORUM_QUERY_TIMEOUT_S;
  a query that finds no room or no answer in time yields None (the handler answers
  NOT_LEADER_OR_FOLLOWER, as Kafka's brokers do without a controller).
- An answer counts only from the node it was asked of, once, and only while its query
  waits; a report that cannot be read is None.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Final

from tidelog.protocol.peer import PartitionKey, QuorumAnswer, QuorumQuery
from tidelog.server.peers import PeerTransport
from tidelog.server.quorum import QuorumReport, decode_report, encode_report
from tidelog.types import NodeId

QUORUM_QUERY_TIMEOUT_S: Final = 5.0
QUORUM_QUERIES_MAX: Final = 64
"""DescribeQuorum requests one node waits on the leader for at once."""


class QuorumQueries:
    """One node's DescribeQuorum queries to the metadata log's leader, and its answers to
    the queries of others."""

    def __init__(
        self,
        node_id: NodeId,
        transport: PeerTransport,
        metadata_key: PartitionKey,
        report_here: Callable[[], QuorumReport | None],
        leader: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.transport = transport
        self.metadata_key = metadata_key
        self.report_here = report_here  # the report when this node leads, else None
        self.leader = leader  # the metadata log's leader as this node knows it (-1: none)
        self.ids = itertools.count(1)
        self.waiting: dict[int, tuple[NodeId, asyncio.Future[QuorumReport | None]]] = {}

    async def report(self) -> QuorumReport | None:
        """The leader's report: made here when this node leads, else asked of the leader."""
        report = self.report_here()
        leader = self.leader()
        if report is not None or leader < 0 or leader == self.node_id:
            return report
        if len(self.waiting) >= QUORUM_QUERIES_MAX:
            return None
        request_id = next(self.ids)
        future: asyncio.Future[QuorumReport | None] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = (NodeId(leader), future)
        self.transport.send(
            self.metadata_key, [QuorumQuery(self.node_id, NodeId(leader), request_id)]
        )
        try:
            return await asyncio.wait_for(future, QUORUM_QUERY_TIMEOUT_S)
        except TimeoutError:
            return None
        finally:
            self.waiting.pop(request_id, None)

    def on_message(self, msg: QuorumQuery | QuorumAnswer) -> None:
        if isinstance(msg, QuorumQuery):
            self._answer(msg)
        else:
            self._take(msg)

    def _answer(self, query: QuorumQuery) -> None:
        report = self.report_here()
        encoded = () if report is None else (encode_report(report),)
        answer = QuorumAnswer(self.node_id, query.sender, query.request_id, encoded)
        self.transport.send(self.metadata_key, [answer])

    def _take(self, answer: QuorumAnswer) -> None:
        waiting = self.waiting.get(answer.request_id)
        if waiting is None or waiting[0] != answer.sender or waiting[1].done():
            return  # late (timed out), or not from the node it was asked of
        report = decode_report(answer.report[0]) if len(answer.report) == 1 else None
        waiting[1].set_result(report)
