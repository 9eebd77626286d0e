"""One client connection's life, shared by the native server and the Kafka listener:
its reader and the tasks of its answers in one nursery; whatever fails ends the
nursery, and the requests it parked in the purgatory are dropped when it closes."""

from __future__ import annotations

import socket as _stdsocket

import trio


async def run_connection(sock, make_conn, read_loop, watchdog=None, on_close=None) -> None:
    """``make_conn(nursery)`` builds the connection object (``.parked``: its parked
    requests); ``read_loop(conn)`` serves it until the peer closes; ``watchdog(conn)``
    (if any) runs beside it; ``on_close(conn)`` after. An exception of the reader is
    raised after the nursery ends (never wrapped in an exception group)."""
    sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
    failure: BaseException | None = None
    conn = None
    try:
        async with trio.open_nursery() as nursery:
            conn = make_conn(nursery)
            if watchdog is not None:
                nursery.start_soon(watchdog, conn)
            try:
                await read_loop(conn)
            except Exception as e:  # raised below, outside the nursery
                failure = e
            nursery.cancel_scope.cancel()
    finally:
        if conn is not None:
            for op in list(conn.parked):
                op.cancel()
            if on_close is not None:
                on_close(conn)
    if failure is not None:
        raise failure
