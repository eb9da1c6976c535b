"""The one reader of a node's admin endpoint (`GET /status`, JSON), for the tools, the
tests and the benchmarks. A base module: every layer above the core may use it.

Rules of this file:
- `read_status` never raises: a node that does not answer in time, or not with a JSON
  object, is None (callers poll, or show the node as unknown).
- A secured cluster's endpoint is HTTPS with the cluster's CA and wants its token
  (`AdminAccess`); `access_for(cluster directory)` finds both where `cluster up --secure`
  writes them (DIR/certs/ca.crt, DIR/certs/admin.token). Proxies are never used.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS_BYTES_MAX = 16 * 1024 * 1024
TIMEOUT_S_DEFAULT = 2.0
TOKEN_FILE = "admin.token"


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """How to reach a secured admin endpoint: its CA (HTTPS) and its bearer token."""

    ca: Path | None = None
    token: str | None = None


def access_for(cluster_directory: Path) -> AdminAccess:
    """The access to a local cluster's admin endpoints (plain HTTP when it has none)."""
    certs = cluster_directory / "certs"
    try:
        token = (certs / TOKEN_FILE).read_text().strip()
    except OSError:
        return AdminAccess()
    return AdminAccess(ca=certs / "ca.crt", token=token or None)


def read_status(
    admin: str,
    *,
    timeout_s: float = TIMEOUT_S_DEFAULT,
    access: AdminAccess | None = None,
    path: str = "/status",
) -> dict[str, Any] | None:
    """A node's `GET /status` JSON object (or that of another admin `path`, such as
    `/leaders`), or None if it does not answer one in time."""
    access = access or AdminAccess()
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    scheme = "http"
    if access.ca is not None:
        scheme = "https"
        try:
            context = ssl.create_default_context(cafile=str(access.ca))
        except (OSError, ssl.SSLError):
            return None
        handlers.append(urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(f"{scheme}://{admin}{path}")
    if access.token is not None:
        request.add_header("Authorization", f"Bearer {access.token}")
    try:
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout_s) as reply:
            data = json.loads(reply.read(STATUS_BYTES_MAX))
    except (OSError, http.client.HTTPException, ValueError):
        return None
    return data if isinstance(data, dict) else None
