"""tidelog: a replicated commit log on the High-Water Mark pattern, speaking the Kafka protocol."""

__version__ = "0.1.0"
