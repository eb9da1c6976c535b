"""User-facing tools behind the `tidelog` command: each module owns one command group.

Tools sit at the top of the layers (with `cli.py`): they may import the server and client
libraries, nothing imports them except `tidelog.cli`.
"""
