"""The PostgreSQL start-up's port check: a taken port fails before initdb with what to do."""

import socket
from pathlib import Path

import pytest

from scripts import stack_postgres


def test_a_port_held_by_a_connection_is_named_with_the_ephemeral_hint(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # the kernel picks from the ephemeral range, as for a client
    port = holder.getsockname()[1]
    try:
        expected = rf"port {port} .*a connection holds it.*BALLAST_PG_PORT to a port below the kernel's ephemeral range"
        with pytest.raises(stack_postgres.StackError, match=expected):
            stack_postgres.Postgres(tmp_path, port)._check_port()
    finally:
        holder.close()
    stack_postgres.Postgres(tmp_path, port)._check_port()  # free again: no error


def test_a_port_a_server_listens_on_is_named(tmp_path: Path) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        with pytest.raises(stack_postgres.StackError, match="a server listens there"):
            stack_postgres.Postgres(tmp_path, srv.getsockname()[1])._check_port()
