"""The producer's I/O thread sleeps while its batches wait for a full window (an answer
wakes it), instead of spinning with a zero select timeout: the pure timeout rule, and a
real node whose answers are held back (SIGSTOP) while the producer's CPU is counted."""

from __future__ import annotations

import os
import signal
import time
import types

import pytest

from raftlog.client import Admin, Producer
from raftlog.client.producer import IN_FLIGHT_POLL_S, PENDING_POLL_S, _ProducerIO


def _io(pending, producer_id=7, pid_retry_at=0.0, in_flight=True):
    return types.SimpleNamespace(
        pending=pending, txn=None, in_order=True, producer_id=producer_id,
        _pid_retry_at=pid_retry_at, _any_in_flight=lambda: in_flight)


def _batch(retry_at=0.0):
    return types.SimpleNamespace(retry_at=retry_at)


def test_batches_waiting_for_the_window_never_make_a_zero_timeout():
    now = 100.0
    # fresh batches a full window holds back: woken by the answer, polled now and then
    assert _ProducerIO._timeout(_io([_batch(), _batch()]), now, None) == PENDING_POLL_S
    # a retry backoff ending sooner than the poll: its end
    t = _ProducerIO._timeout(_io([_batch(), _batch(now + 0.002)]), now, None)
    assert t == pytest.approx(0.002)
    # the producer id's backoff (InitProducerId failed a moment ago)
    t = _ProducerIO._timeout(_io([_batch()], producer_id=-1, pid_retry_at=now + 0.001),
                             now, None)
    assert t == pytest.approx(0.001)
    # nothing pending: the in-flight check's interval
    assert _ProducerIO._timeout(_io([]), now, None) == IN_FLIGHT_POLL_S


def test_a_producer_waiting_on_a_full_window_burns_no_cpu(node):
    Admin(node.bootstrap).create_topic("wait")
    with Producer(node.bootstrap) as p:
        p.send("wait", b"warm", partition=0).result(timeout=30)  # (the window opens)
        os.kill(node.proc.pid, signal.SIGSTOP)  # answers held back: the window fills
        try:
            futures = [p.send_many("wait", [b"x" * 100] * 500, partition=0)
                       for _ in range(20)]  # 5 in flight, the rest pending
            time.sleep(0.3)
            cpu0, t0 = time.process_time(), time.monotonic()
            time.sleep(1.5)
            cpu = time.process_time() - cpu0
            waited = time.monotonic() - t0
        finally:
            os.kill(node.proc.pid, signal.SIGCONT)
        for f in futures:
            f.result(timeout=60)
    # a spinning I/O thread takes a whole core here (about `waited` seconds of CPU)
    assert cpu < 0.25 * waited, f"{cpu:.2f} s of CPU while waiting {waited:.2f} s"
