"""The consumer-group coordinator's pure parts: its state machine and its record codec.

No IO here (tests/test_layers.py holds it to the core's rules); the asyncio coordinator in
`tidelog.server.groups` uses them.
"""
