"""The benchmark tools themselves: the relay answers like a node, rates parse, growth is
measured per window (no timing assertions)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from raftlog import records
from raftlog.protocol import Api, ClientConnection, FrameDecoder

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)

import throughput  # noqa: E402


def _call(sock, proto, api, fields, body=b""):
    _, data = proto.send_request(api, fields, body)
    sock.sendall(data)
    while (frame := proto.next_response()) is None:
        chunk = sock.recv(1 << 16)
        assert chunk, "the relay closed the connection"
        proto.receive_data(chunk)
    return frame


def test_the_relay_acknowledges_produces_and_answers_a_waiting_fetch():
    relay = subprocess.Popen([sys.executable, os.path.join(BENCH, "relay.py")],
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(relay.stdout.readline())
        prod = socket.create_connection(("127.0.0.1", port), timeout=10)
        cons = socket.create_connection(("127.0.0.1", port), timeout=10)
        pp, cp = ClientConnection(), ClientConnection()
        offsets = []
        for values in ([b"a", b"b"], [b"c"]):
            batch = records.encode_batch(values, timestamp=0)
            f = _call(prod, pp, Api.PRODUCE,
                      {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
            offsets.append(f.header["parts"][0][3])
        assert offsets == [0, 2]
        f = _call(cons, cp, Api.FETCH, {"parts": [["t", 0, 1, 1 << 20, -1]]})
        assert [(r.offset, r.value) for r in records.decode_batches(f.body, start_offset=1)] \
            == [(1, b"b"), (2, b"c")]
        # a fetch at the end waits for the next produce (long-poll), then gets it
        _, data = cp.send_request(Api.FETCH, {"max_wait_ms": 5000,
                                              "parts": [["t", 0, 3, 1 << 20, -1]]})
        cons.sendall(data)
        batch = records.encode_batch([b"d"], timestamp=0)
        _call(prod, pp, Api.PRODUCE, {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
        while (frame := cp.next_response()) is None:
            cp.receive_data(cons.recv(1 << 16))
        assert [r.value for r in records.decode_batches(frame.body, start_offset=3)] == [b"d"]
        prod.close()
        cons.close()
    finally:
        relay.terminate()
        relay.wait(10)


@pytest.mark.parametrize("overlap", [[], ["--overlap"]], ids=["sync", "overlap"])
def test_the_replicated_relay_acknowledges_acks_all_once_its_follower_holds_it(tmp_path,
                                                                            overlap):
    """bench/relay.py --replicas 2 --sync (latency_floor.py's RF3 floor): an acks=all
    produce and a consumer wait until the follower has fetched (and synced) the batch.
    With --overlap the follower's next fetch says nothing is on disk yet: only its
    report after the sync moves the high watermark (its fetches wait 60 s: the
    produce's answer, within the socket's 10 s, cannot come from the next fetch)."""
    script = os.path.join(BENCH, "relay.py")
    leader = subprocess.Popen([sys.executable, script, "--replicas", "2", "--sync"],
                              stdout=subprocess.PIPE, text=True)
    follower = None
    try:
        port = int(leader.stdout.readline())
        prod = socket.create_connection(("127.0.0.1", port), timeout=10)
        cons = socket.create_connection(("127.0.0.1", port), timeout=10)
        pp, cp = ClientConnection(), ClientConnection()
        batch = records.encode_batch([b"a", b"b"], timestamp=0)
        _, data = pp.send_request(Api.PRODUCE, {"acks": -1, "parts": [["t", 0, len(batch)]]},
                                  batch)
        prod.sendall(data)
        # no follower yet: the consumer sees nothing below the high watermark (0)
        f = _call(cons, cp, Api.FETCH, {"max_wait_ms": 300, "parts": [["t", 0, 0, 1 << 20, -1]]})
        assert f.header["parts"][0].length == 0 and f.header["parts"][0].high_watermark == 0
        follower = subprocess.Popen([sys.executable, script, "--follow", f"127.0.0.1:{port}",
                                     "--replica-id", "1", "--sync", "--fetch-wait-ms", "60000",
                                     *overlap],
                                    stdout=subprocess.PIPE, text=True)
        while (frame := pp.next_response()) is None:  # answered once the follower holds it
            chunk = prod.recv(1 << 16)
            assert chunk, "the relay closed the connection"
            pp.receive_data(chunk)
        assert frame.header["parts"][0].error == 0
        f = _call(cons, cp, Api.FETCH, {"max_wait_ms": 5000, "parts": [["t", 0, 0, 1 << 20, -1]]})
        assert f.header["parts"][0].high_watermark == 2
        assert [r.value for r in records.decode_batches(f.body)] == [b"a", b"b"]
        prod.close()
        cons.close()
    finally:
        for p in (follower, leader):
            if p is not None:
                p.terminate()
                p.wait(10)


def test_the_open_loop_floor_producer_pipelines_and_every_produce_is_answered():
    """latency_floor.py --open-loop: produces go out on schedule while earlier ones wait
    for their answers (the relay answers them in order); all are answered, all appended."""
    import latency_floor

    relay = subprocess.Popen([sys.executable, os.path.join(BENCH, "relay.py")],
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(relay.stdout.readline())
        latency_floor.producer(f"127.0.0.1:{port}", "t", 300, 5000, acks=1, open_loop=True)
        cons = socket.create_connection(("127.0.0.1", port), timeout=10)
        f = _call(cons, ClientConnection(), Api.FETCH, {"parts": [["t", 0, 0, 1 << 20, -1]]})
        assert f.header["parts"][0].high_watermark == 300
        assert len(list(records.decode_batches(f.body))) == 300
        cons.close()
    finally:
        relay.terminate()
        relay.wait(10)


def test_rates_parse_as_a_list():
    assert throughput.parse_rates("1000") == [1000]
    assert throughput.parse_rates("1000,5000,20000") == [1000, 5000, 20000]
    with pytest.raises(SystemExit, match="positive"):
        throughput.parse_rates("1000,-5")


@pytest.mark.parametrize("chunk", ["0", "-5", "ten"])
def test_throughput_refuses_a_chunk_that_is_not_a_positive_count(chunk):
    """A bad --chunk is refused before any node starts, naming the flag."""
    r = subprocess.run([sys.executable, os.path.join(BENCH, "throughput.py"), "--chunk", chunk],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--chunk" in r.stderr and "Traceback" not in r.stderr


def test_growth_compares_the_first_and_last_window():
    ns = 1_000_000_000
    steady = [(i * ns // 100, 1.0) for i in range(6000)]  # 60 s at 100/s, 1 ms each
    g = throughput.growth(steady, 60)
    assert g["window_s"] == 10 and g["last10_over_first10_p99"] == pytest.approx(1.0)
    growing = [(t, 1.0 + t / ns) for t, _ in steady]  # latency grows with time
    g = throughput.growth(growing, 60)
    assert g["first10_p99_ms"] < 11 < 50 < g["last10_p99_ms"]
    assert g["last10_over_first10_p99"] > 4
    assert throughput.growth(steady[:800], 8)["window_s"] == 2  # short runs: quarters


def test_the_relay_answers_a_bad_request_and_survives_garbage():
    import struct

    import cbor2

    relay = subprocess.Popen([sys.executable, os.path.join(BENCH, "relay.py")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(relay.stdout.readline())
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        header = cbor2.dumps({"id": 7, "api": 9999})  # an api nobody serves
        s.sendall(struct.pack("<II", 4 + len(header), len(header)) + header)
        decoder = FrameDecoder()  # a hand-made request: read the answer frame as is
        while (frame := decoder.next_frame()) is None:
            decoder.receive_data(s.recv(1 << 16))
        assert frame.header["id"] == 7 and frame.header["error"] != 0
        s.sendall(b"\xff" * 64)  # not a frame: this connection is closed...
        assert s.recv(1 << 16) == b""
        s.close()
        # ...and the relay still serves others
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        batch = records.encode_batch([b"x"], timestamp=0)
        f = _call(s, ClientConnection(), Api.PRODUCE,
                  {"acks": 1, "parts": [["t", 0, len(batch)]]}, batch)
        assert f.header["parts"][0][2] == 0
        s.close()
    finally:
        relay.terminate()
        relay.wait(10)


def test_idle_reads_a_process_cpu_time_that_grows_with_work():
    import idle

    before = idle.cpu_seconds(os.getpid())
    t = before
    x = 0
    while t - before < 0.05:  # spin until the kernel has charged some ticks
        x += sum(range(10_000))
        t = idle.cpu_seconds(os.getpid())
    assert t > before >= 0
    pct = idle.idle_pct({"me": os.getpid()}, 0.2)
    assert 0 <= pct["me"] < 50  # asleep for most of the window


def test_copy_floor_copies_the_bytes_and_refuses_bad_input(tmp_path):
    import copy_floor

    src = tmp_path / "src" / "t-0"
    src.mkdir(parents=True)
    data = os.urandom(300_000)
    (src / "00000000000000000000.log").write_bytes(data)
    secs, cpu = copy_floor.run(str(tmp_path / "src"), str(tmp_path / "dst"), 200_000,
                               rate=10e6, burst_s=0.01, fsync_s=0.01)
    assert secs > 0 and cpu >= 0
    assert (tmp_path / "dst" / "part-0").read_bytes() == data[:200_000]
    with pytest.raises(SystemExit, match="not a directory"):
        copy_floor.run(str(tmp_path / "nope"), str(tmp_path / "d2"), 1, 1e6)
    with pytest.raises(SystemExit, match="fewer than"):
        copy_floor.run(str(tmp_path / "src"), str(tmp_path / "d2"), 10**9, 1e6)
    with pytest.raises(SystemExit, match="must be positive"):
        copy_floor.run(str(tmp_path / "src"), str(tmp_path / "d2"), 0, 1e6)


def test_ab_collects_every_numeric_figure_and_flags_only_differences_beyond_the_spread():
    import ab

    doc = {"rate": 1000, "ok": True, "name": "x",
           "results": [{"peer": "raftlog-r1", "p50": 0.4}, {"p50": 0.9}]}
    assert ab.figures(doc) == {"rate": 1000.0, "results.raftlog-r1.p50": 0.4,
                               "results.1.p50": 0.9}
    a = [{"p50": 1.0, "rps": 100.0}, {"p50": 1.2, "rps": 110.0}, {"p50": 1.1, "rps": 90.0}]
    b = [{"p50": 1.1, "rps": 200.0}, {"p50": 1.3, "rps": 210.0}, {"p50": 1.0, "rps": 190.0}]
    rows = {r["figure"]: r for r in ab.summarize(a, b)}
    assert rows["p50"]["a_median"] == 1.1 and rows["p50"]["b_median"] == 1.1
    assert not rows["p50"]["beyond_spread"]  # within the noise of either side
    assert rows["rps"]["ratio"] == 2.0 and rows["rps"]["beyond_spread"]
    assert "rps" in ab.render(ab.summarize(a, b), "A", "B", 3)


def test_ab_refuses_fewer_than_three_pairs(capsys):
    import ab

    with pytest.raises(SystemExit):
        ab.main(["HEAD", "HEAD", "--pairs", "2"])
    assert "--pairs must be 3 or more" in capsys.readouterr().err


def test_ab_node_sets_reach_only_that_sides_up(tmp_path):
    import subprocess
    import types

    import ab

    assert ab.parse_node_sets(["b:write.caching.default=true"]) == {
        "a": [], "b": ["write.caching.default=true"]}
    for bad in ["write.caching.default=true", "c:k=v", "b:novalue", "b:=v"]:
        with pytest.raises(SystemExit, match="expected a:KEY=VALUE"):
            ab.parse_node_sets([bad])
    # a revision whose raftlog prints its arguments
    bindir = tmp_path / "venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "raftlog").write_text('#!/bin/sh\necho "$@"\n')
    (bindir / "raftlog").chmod(0o755)
    rev = types.SimpleNamespace(venv=str(tmp_path / "venv"), sha="0123456789abcdef")
    assert ab.node_wrapper(rev, [], str(tmp_path)) == str(bindir / "raftlog")
    exe = ab.node_wrapper(rev, ["write.caching.default=true", "a.b=x y"], str(tmp_path))

    def out(*argv):
        return subprocess.run([exe, *argv], capture_output=True, text=True).stdout.strip()

    assert out("up", "--nodes", "3") == (
        "up --nodes 3 --set write.caching.default=true --set a.b=x y")
    assert out("--version") == "--version"  # only `up` gets the settings


def test_ab_refuses_node_sets_for_benches_that_start_their_own_nodes(capsys):
    import ab

    with pytest.raises(SystemExit):
        ab.main(["HEAD", "HEAD", "--bench", "throughput", "--node-set", "b:k=v"])
    assert "--node-set works with --bench peers only" in capsys.readouterr().err


def test_the_transaction_chain_bounds_follow_the_floor():
    import transactions

    b = transactions.chain_bounds(2.5, 100)
    assert b == {"commit_floor_ms": 7.5, "back_to_back_ceiling_rec_s": 10_000}
    with pytest.raises(ValueError):
        transactions.chain_bounds(0, 100)


def test_ab_runs_each_side_second_in_half_the_pairs():
    """The second run of a pair reads slower on this machine, so the order alternates."""
    import ab

    orders = [ab.pair_order(i) for i in range(4)]
    assert orders == [(0, 1), (1, 0), (0, 1), (1, 0)]
    assert sum(o[1] == 1 for o in orders) == sum(o[1] == 0 for o in orders)
