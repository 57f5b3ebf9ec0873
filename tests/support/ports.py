"""A loopback port for a child process that cannot be told to bind port 0 and say which it got (Locust's web UI and
its master's ZeroMQ port).

A port found free by binding 0 and closing is free only until someone else binds it: the suite's groups run side by
side, each binding servers on port 0 and opening client connections, and the child takes seconds to start. So the
port is handed over in TIME_WAIT instead: a connection to it is accepted and closed from the listening side first.
For the next minute the kernel gives that port to no other bind(0) and to no outgoing connection, while a server that
binds it by number with SO_REUSEADDR (gevent's, ZeroMQ's, asyncio's: all of them on Linux) gets it at once.
"""

from __future__ import annotations

import socket


def reserved_port(host: str = "127.0.0.1") -> int:
    """A port on `host` that nobody listens on, held back from every bind(0) for the next minute (see the module)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection((host, port), timeout=10) as client:
            accepted, _ = listener.accept()
            accepted.close()  # the listening side closes first: TIME_WAIT is on its end, this port
            client.recv(1)  # its FIN has arrived: the close is under way before the client's own
    return port
