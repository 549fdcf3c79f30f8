"""Binding the listening socket of a server rlxf runs (``serve-reward``, ``studio``) before anything is
announced: a port that is taken, out of range or not ours is one ConfigError naming ``--port`` / ``--host``,
and no URL is printed for a server that never listened."""

from __future__ import annotations

import errno
import socket

from rlxf.config_error import ConfigError

PORTS = range(0, 65536)


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: the system picks a free one), not yet listening."""
    if port not in PORTS:
        raise ConfigError(f"--port {port}: a port is 0 to 65535 (0 picks a free one)")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port}: {host}:{port} is already in use (by another server); choose another "
                              "--port, or 0 for a free one") from None
        if err.errno in (errno.EACCES, errno.EPERM):
            raise ConfigError(f"--port {port}: not allowed to listen on {host}:{port} ({err.strerror}); ports below "
                              "1024 need privileges: choose another --port") from None
        raise ConfigError(f"--host {host} --port {port}: cannot listen there ({err.strerror or err})") from None
    return sock
