"""The pool's cheap health check reads a socket without blocking, on every platform."""

from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest

from runlane.storage.postgres.connections import socket_readable


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, peer = socket.socketpair()
    try:
        yield ours, peer
    finally:
        ours.close()
        peer.close()


def test_an_idle_socket_is_not_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, _ = pair
    assert socket_readable(ours.fileno()) is False


def test_a_socket_with_data_waiting_is_readable(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, peer = pair
    peer.sendall(b"terminating connection")
    assert socket_readable(ours.fileno()) is True


def test_a_socket_whose_peer_hung_up_is_readable(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    peer.close()
    assert socket_readable(ours.fileno()) is True


def test_the_check_works_where_select_poll_does_not_exist(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows has no select.poll; the PostgreSQL lane must not depend on it.
    monkeypatch.delattr(select, "poll", raising=False)
    ours, peer = pair
    assert socket_readable(ours.fileno()) is False
    peer.sendall(b"x")
    assert socket_readable(ours.fileno()) is True
