"""Listening ports: why a service cannot listen, said in one line, before it binds or after it failed to.

No torch and no gRPC here: the gateway and `specdec up` import this module.
"""

from __future__ import annotations

import errno
import socket

from specdec.errors import SpecdecError

_REASONS = {
    errno.EADDRINUSE: "the port is in use",
    errno.EACCES: "permission denied (a port below 1024 needs privileges)",
    errno.EADDRNOTAVAIL: "no interface of this host has that address",
}


def bare_host(host: str) -> str:
    """`host` as sockets take it: "[::1]" (the gRPC address form) is "::1"."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def describe_os_error(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        return f"cannot resolve the host ({error.strerror})"
    return _REASONS.get(error.errno, error.strerror or str(error))


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, not yet listening.

    SO_REUSEADDR as gRPC, uvicorn and http.server set it: a port left in TIME_WAIT by a process that
    stopped is free to them, so it is free here. No SO_REUSEPORT: a port another server holds is busy.
    """
    family, kind, proto, _, address = socket.getaddrinfo(bare_host(host) or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def bind_problem(host: str, port: int) -> str | None:
    """Why a server could not listen on host:port now ("the port is in use", ...), or None: it could."""
    try:
        bound_socket(host, port).close()
    except OSError as error:
        return describe_os_error(error)
    return None


def listen_error(owner: str, address: str, reason: str) -> SpecdecError:
    """The one line a service ends with when it cannot listen, e.g.
    "verify service: cannot listen on 127.0.0.1:50052: the port is in use"."""
    return SpecdecError(f"{owner}: cannot listen on {address}: {reason}")


def check_can_listen(owner: str, host: str, port: int) -> None:
    """Raise listen_error unless host:port is free (port 0: the system picks a free one)."""
    problem = bind_problem(host, port) if port else None
    if problem:
        raise listen_error(owner, f"{host}:{port}", problem)


def listening_socket(owner: str, host: str, port: int) -> socket.socket:
    """A socket bound to host:port for a server to listen on, or listen_error naming why not."""
    try:
        return bound_socket(host, port)
    except OSError as error:
        raise listen_error(owner, f"{host}:{port}", describe_os_error(error)) from None


def split_address(address: str) -> tuple[str, int] | None:
    """("127.0.0.1", 50052) from "127.0.0.1:50052" ("[::]:50052" keeps its brackets); None for other forms (unix:...)."""
    host, _, port = address.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None
