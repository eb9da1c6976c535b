"""`python -m tidelog`: the same as the `tidelog` command."""

from __future__ import annotations

from tidelog.cli import main

if __name__ == "__main__":
    main(prog_name="tidelog")
