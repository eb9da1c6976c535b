"""Kafka message schemas kafka-python does not ship, in its JSON form (the form of Kafka's
own message definitions), for the request classes of `tidelog.protocol.kafka_extra`."""
