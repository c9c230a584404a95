"""Loopback ports for the servers a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nothing listens on now (for servers that must be told their port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
