"""The one parser of network addresses: `HOST:PORT`, `[V6HOST]:PORT`, or a bare `HOST`
where a default port applies. A base module: every layer may use it.

Rules of this file:
- `parse_address` raises ValueError with what is wrong; callers put their own name on it
  (the flag, the option, the file), so a message always says where the address came from.
- `format_address` is its inverse (brackets around an IPv6 host).
"""

from __future__ import annotations

PORT_MIN = 1
PORT_MAX = 65535
Address = tuple[str, int]


def parse_address(text: str, *, default_port: int | None = None) -> Address:
    """(host, port) of `text`; ValueError naming what is wrong."""
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if (not sep or not host) and default_port is not None and "]" not in port_text:
        host, port_text = text, str(default_port)
    if not host or (not sep and default_port is None):
        raise ValueError(f"{text!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(char in host for char in " /[]@,"):
        raise ValueError(f"{text!r} has no valid host")
    if not port_text.isdigit():
        raise ValueError(f"port {port_text!r} is not a number")
    port = int(port_text)
    if not PORT_MIN <= port <= PORT_MAX:
        raise ValueError(f"port {port} is out of range ({PORT_MIN}-{PORT_MAX})")
    return host, port


def format_address(address: Address) -> str:
    """`host:port`, with brackets around an IPv6 host."""
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
