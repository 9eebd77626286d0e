"""One client connection's life, shared by the native server and the Kafka listener:
its reader and the tasks of its answers in one nursery; whatever fails ends the
nursery, and the requests it parked in the purgatory are dropped when it closes.

A connection object has ``sock``, ``parked`` (its requests parked in the purgatory),
``last_active`` (trio time of the last bytes received, request answered or parked
request answered) and ``in_request`` (a request is being handled). :func:`idle_watchdog` closes it once it is idle for
``connections.max.idle.ms``: nothing received for that long while no request of it is
being handled or parked (a long-poll fetch waiting in the purgatory is not idleness).
A frame that stopped half-sent is idleness too: the bytes stopped coming.
"""

from __future__ import annotations

import socket as _stdsocket

import trio


async def run_connection(sock, make_conn, read_loop, watchdog=None, on_close=None,
                         idle_s: float | None = None, on_idle=None) -> None:
    """``make_conn(nursery)`` builds the connection object; ``read_loop(conn)`` serves it
    until the peer closes; ``watchdog(conn)`` (if any) runs beside it, and so does the
    idle watchdog when ``idle_s`` is given (``on_idle(conn)`` before it closes the
    socket); ``on_close(conn)`` after. An exception of the reader is raised after the
    nursery ends (never wrapped in an exception group)."""
    sock.setsockopt(_stdsocket.IPPROTO_TCP, _stdsocket.TCP_NODELAY, 1)
    failure: BaseException | None = None
    conn = None
    try:
        async with trio.open_nursery() as nursery:
            conn = make_conn(nursery)
            conn.last_active = trio.current_time()
            if watchdog is not None:
                nursery.start_soon(watchdog, conn)
            if idle_s is not None:
                nursery.start_soon(idle_watchdog, conn, idle_s, on_idle)
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


def is_busy(conn) -> bool:
    """A request of the connection is being handled or waits in the purgatory."""
    return conn.in_request or bool(conn.parked)


async def idle_watchdog(conn, idle_s: float, on_idle=None) -> None:
    """Close ``conn``'s socket (the reader's next wait raises) once it has been idle for
    ``idle_s``; a busy connection's clock starts over when it is looked at."""
    assert idle_s > 0
    while True:
        await trio.sleep_until(conn.last_active + idle_s)
        now = trio.current_time()
        if now < conn.last_active + idle_s:
            continue  # bytes came meanwhile
        if is_busy(conn):
            conn.last_active = now
            continue
        if on_idle is not None:
            on_idle(conn)
        trio.lowlevel.notify_closing(conn.sock)
        return
