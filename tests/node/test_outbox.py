"""The server's Outbox: responses leave in request order even when an earlier one
(an acks=all produce waiting for replication) is answered after later ones."""

from __future__ import annotations

import socket

import trio

from raftlog.node.outbox import Outbox


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.settimeout(5)
    return a, b


def _recv_exactly(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += sock.recv(n - len(out))
    return out


async def test_a_deferred_answer_holds_back_later_ones_until_filled():
    a, b = _pair()
    out = Outbox()
    out.add(b"first|")
    d = out.add_deferred()
    out.add(b"third|")
    await out.flush(a)
    assert _recv_exactly(b, 6) == b"first|"
    b.settimeout(0.05)
    try:
        assert b.recv(100) == b"", "nothing may pass an unfilled deferred answer"
    except TimeoutError:
        pass
    b.settimeout(5)
    assert out.deferred == 1
    out.fill(d, [b"second|"])
    out.add(b"fourth|")
    await out.flush(a)
    assert _recv_exactly(b, 20) == b"second|third|fourth|"
    assert out.deferred == 0 and out.size == 0 and out.pieces == []
    a.close()
    b.close()


async def test_deferred_answers_filled_out_of_order_leave_in_order():
    a, b = _pair()
    out = Outbox()
    ds = [out.add_deferred() for _ in range(3)]
    out.fill(ds[2], [b"c"])
    out.fill(ds[1], [b"b"])
    await out.flush(a)
    assert out.pieces == ds  # the first is still unfilled: nothing sent
    out.fill(ds[0], [b"a"])
    await out.flush(a)
    assert _recv_exactly(b, 3) == b"abc"
    a.close()
    b.close()


async def test_filling_wakes_a_reader_waiting_for_room():
    out = Outbox()
    d = out.add_deferred()
    woke = []

    async def reader():
        while out.deferred:
            await out.room.wait()
        woke.append(True)

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await trio.sleep(0.01)
        assert not woke
        out.fill(d, [b"x"])
    assert woke


async def test_a_second_flush_waits_for_one_parked_on_a_full_socket():
    a, b = _pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    out = Outbox()
    big = b"A" * (4 << 20)  # far more than the socket buffers hold: the flush parks
    out.add(big)
    received = bytearray()

    async def drain():
        await trio.sleep(0.05)  # both flushes are under way (the first parked) by now
        b.setblocking(False)
        while len(received) < len(big) + 6:
            try:
                chunk = b.recv(1 << 20)
            except BlockingIOError:
                await trio.sleep(0.001)
                continue
            received.extend(chunk)

    async def second():
        await trio.sleep(0.01)
        assert out.flushing
        out.add(b"second")
        await out.flush(a)

    async with trio.open_nursery() as n:
        n.start_soon(out.flush, a)
        n.start_soon(second)
        n.start_soon(drain)
    assert bytes(received) == big + b"second"
    assert not out.flushing and out.size == 0 and out.pieces == []
    a.close()
    b.close()


async def test_try_send_now_sends_what_the_socket_takes_and_keeps_the_rest_first():
    a, b = _pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    out = Outbox()
    d = out.add_deferred()
    out.add(b"later")
    assert out.try_send_now(a)  # nothing ready: the first place is unfilled
    payload = bytes(range(256)) * 800  # 200 KiB: more than the socket takes at once
    out.fill(d, [payload])
    assert not out.try_send_now(a)
    received = bytearray()

    async def drain():
        b.setblocking(False)
        while len(received) < len(payload) + 5:
            try:
                received.extend(b.recv(1 << 20))
            except BlockingIOError:
                await trio.sleep(0.001)

    async with trio.open_nursery() as n:
        n.start_soon(drain)
        await out.flush(a)
    assert bytes(received) == payload + b"later"
    assert out.size == 0 and out.pieces == []
    a.close()
    b.close()


async def test_large_pieces_go_out_whole_and_in_order_with_small_ones():
    a, b = _pair()
    out = Outbox()
    big = memoryview(bytes(range(256)) * 1024)  # 256 KiB: sent as it is, not joined
    out.add_pieces([b"<", big, b"|", bytearray(b"x" * 40_000), b">"])
    assert out.size == 2 + 1 + len(big) + 40_000
    got = bytearray()

    async def reader():
        while len(got) < 2 + 1 + len(big) + 40_000:
            got.extend(await trio.to_thread.run_sync(b.recv, 1 << 20))

    async with trio.open_nursery() as n:
        n.start_soon(reader)
        await out.flush(a)
    assert bytes(got) == b"<" + bytes(big) + b"|" + b"x" * 40_000 + b">"
    assert out.size == 0 and out.pieces == []
    a.close()
    b.close()
