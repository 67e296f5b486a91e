"""The stack's port helpers: a port a connection holds is not free for a server, and the fixed ports
of the stack and of the test session lie outside the kernel's ephemeral range (CI once lost
PostgreSQL's 55432 to a client socket that held it as its local port)."""

import os
import socket

from ballast.options import settings
from scripts import stack_procs


def test_a_port_a_client_socket_holds_is_not_bindable_though_nothing_listens() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # what connect() does for an outgoing connection's local port
    port = holder.getsockname()[1]
    try:
        assert not stack_procs.port_open(port)  # nothing accepts there...
        assert not stack_procs.port_bindable(port)  # ...yet a server cannot have it
    finally:
        holder.close()
    assert stack_procs.port_bindable(port)


def test_a_listening_port_is_not_bindable() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert stack_procs.port_open(srv.getsockname()[1])
        assert not stack_procs.port_bindable(srv.getsockname()[1])


def test_the_ephemeral_range_is_the_kernels() -> None:
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert stack_procs.ephemeral_ports() == range(low, high + 1)


def test_fixed_service_ports_lie_outside_the_ephemeral_range(monkeypatch) -> None:
    """The defaults (`make up`) and the test session's own ports (tests/conftest.py) alike."""
    ephemeral = stack_procs.ephemeral_ports()
    names = ("BALLAST_KAFKA_PORT", "BALLAST_KAFKA_CONTROLLER_PORT", "BALLAST_PG_PORT")
    session = {k: int(os.environ[k]) for k in names}
    for k in session:
        monkeypatch.delenv(k)
    opts = settings()
    defaults = {"kafka": opts.kafka_port, "controller": opts.kafka_controller_port, "airflow": opts.airflow_port,
                "postgres": opts.pg_port}
    inside = {name: port for name, port in {**defaults, **session}.items() if port in ephemeral}
    assert not inside, f"in the ephemeral range {ephemeral.start}-{ephemeral.stop - 1}: {inside}"
