"""The request limits both wire codecs check while decoding, before any work is done.

One table for the native codec (raftlog/protocol.py) and the Kafka one
(raftlog/kafka/wire.py, raftlog/kafka/batch.py), so a request costs the same at most
whichever listener it comes through. Each limit is far above what a well-behaved client
sends and low enough that decoding and answering a request at the limit holds the
node's event loop for tens of milliseconds, not seconds.

What a breach does (the codecs raise, the listeners answer):

- a request over an entry limit is refused while it is decoded, before the node looks
  at a single entry: the Kafka listener closes the connection (what a Kafka broker does
  with a request it cannot parse; every Kafka client reconnects and retries, and a
  hostile one gains nothing), the native listener answers INVALID_REQUEST (or closes the
  connection when a header's CBOR holds more than ENTRIES_PER_REQUEST_MAX x
  CBOR_ITEMS_PER_ENTRY_MAX items, found before cbor2 decodes it);
- a record batch over a batch limit (records, headers per record, decompressed bytes)
  is refused with CORRUPT_MESSAGE for its partition, the rest of the request goes on.

Pure constants and one check: nothing here does I/O.
"""

from __future__ import annotations

#: Array entries in one request, all arrays together (topics, partitions, groups, ...):
#: a Fetch of 1,000,000 partitions stops after reading its length prefix.
ENTRIES_PER_REQUEST_MAX = 10_000
#: Partitions one Fetch may name (native ``parts``; Kafka: all topics' partitions).
PARTITIONS_PER_FETCH_MAX = 10_000
#: Partitions one Produce may name.
PARTITIONS_PER_PRODUCE_MAX = 10_000
#: Topics one request may name (Metadata, CreateTopics, DeleteTopics, ...).
TOPICS_PER_REQUEST_MAX = 10_000
#: Headers of one record (Kafka's record format; raftlog's are one CBOR blob).
HEADERS_PER_RECORD_MAX = 1_000
#: Records of one batch.
RECORDS_PER_BATCH_MAX = 1_000_000
#: Bytes a batch's records section may decompress to: decompression stops here.
DECOMPRESSED_BATCH_BYTES_MAX = 64 * 1024 * 1024

#: CBOR items (array elements and map pairs) one entry of a native request may take:
#: a fetch partition is a list of 5. The native listener walks a request header's CBOR
#: against ENTRIES_PER_REQUEST_MAX times this before decoding it (raftlog/cbor_scan.py).
CBOR_ITEMS_PER_ENTRY_MAX = 8

#: Every limit by name (README's "Request limits" table is checked against this).
TABLE: dict[str, int] = {
    "entries per request": ENTRIES_PER_REQUEST_MAX,
    "partitions per fetch": PARTITIONS_PER_FETCH_MAX,
    "partitions per produce": PARTITIONS_PER_PRODUCE_MAX,
    "topics per request": TOPICS_PER_REQUEST_MAX,
    "headers per record": HEADERS_PER_RECORD_MAX,
    "records per batch": RECORDS_PER_BATCH_MAX,
    "decompressed batch bytes": DECOMPRESSED_BATCH_BYTES_MAX,
}

assert all(v > 0 for v in TABLE.values())
assert PARTITIONS_PER_FETCH_MAX <= ENTRIES_PER_REQUEST_MAX
assert PARTITIONS_PER_PRODUCE_MAX <= ENTRIES_PER_REQUEST_MAX


class LimitExceeded(ValueError):
    """A request or batch is over one of the limits of :data:`TABLE`; the message names
    the limit and what to do."""

    def __init__(self, what: str, count: int, limit: int):
        self.what, self.count, self.limit = what, count, limit
        super().__init__(f"{count} {what} exceed the limit of {limit} "
                         f"(raftlog/limits.py): split the request")


def check(what: str, count: int, limit: int) -> None:
    """Raise :class:`LimitExceeded` when ``count`` is over ``limit``."""
    if count > limit:
        raise LimitExceeded(what, count, limit)
