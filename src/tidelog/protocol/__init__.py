"""Sans-IO codecs: the Kafka wire protocol (server side) and the inter-node peer protocol.

Nothing here touches a socket, a clock or an event loop (h11's rule): bytes go in and
decoded events come out; events go in and bytes come out. The caller owns the IO.

    framing.py      4-byte size-prefixed frames, ProtocolError, NEED_DATA
    kafka.py        KafkaConnection: Kafka requests in, response frames out
    kafka_errors.py Kafka error codes and the mapping from tidelog.errors
    peer.py         PeerEncoder / PeerDecoder: coalesced core messages between nodes
"""
