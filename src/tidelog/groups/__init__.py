"""The consumer-group coordinator as a state machine with no IO: its states and transition
table (`state`), its record codec (`records`) and the coordinator itself (`coordinator`).

No IO here (tests/test_layers.py holds it to the core's rules): the asyncio adapter in
`tidelog.server.groups` runs it on a broker, and `tidelog.testing.groups` runs it over the
simulator's replicated partitions (group scenarios, `python -m tidelog.testing.group_sim`).
"""
