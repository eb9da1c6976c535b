"""User-facing tools behind the `tidelog` command: each module owns one command group.

Tools sit at the top of the layers (with `cli.py`): they may import the server and client
libraries. Within the package only `tidelog.cli` imports them; the benchmarks in bench/
(and the tests) drive them as a user would, through their functions.
"""
