"""``raftlog produce`` and ``raftlog consume`` (like kafka-console-producer/consumer and
kcat): stdin lines to records, records to stdout.

Both end quietly: Ctrl-C prints how many records went through and exits 130; a closed
stdout (``raftlog consume ... | head``) ends the consumer without a traceback.
"""

from __future__ import annotations

import collections
import functools
import json
import os
import sys
import time

from .cli_common import InterruptFlag, UsageError
from .security import security_kwargs

#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130
#: ``produce``: records sent but not yet acknowledged before it waits for the oldest.
PRODUCE_IN_FLIGHT_MAX = 10_000
#: ``consume``: records asked for per poll.
CONSUME_POLL_RECORDS_MAX = 10_000

#: kcat's ``-f`` tokens that ``--format`` knows.
FORMAT_FIELDS = {"t": "topic", "p": "partition", "o": "offset", "k": "key", "s": "value",
                 "T": "timestamp", "h": "headers", "K": "key length", "S": "value length"}
FORMAT_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}
FORMAT_NAMES = ("text", "json", "raw")


class FormatError(UsageError):
    """A ``--format`` string kcat would not take (says which token and what is known)."""


def parse_format(fmt: str) -> list:
    """A kcat ``-f`` string as a list of literal strings and one-letter field tokens
    (``("t",)`` for ``%t``): ``%%`` is a ``%``, ``\\n`` ``\\t`` ``\\r`` ``\\\\`` escapes.

    Raises:
        FormatError: an unknown ``%x`` or ``\\x``, or a lone ``%`` / ``\\`` at the end.
    """
    known = " ".join(f"%{k} ({v})" for k, v in FORMAT_FIELDS.items())
    out: list = []
    text: list[str] = []
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c not in "%\\":
            text.append(c)
            i += 1
            continue
        if i + 1 >= len(fmt):
            raise FormatError(f"--format {fmt!r} ends with a lone {c!r}; known: {known}, "
                              "%% and \\n \\t")
        nxt = fmt[i + 1]
        if c == "%" and nxt == "%":
            text.append("%")
        elif c == "%" and nxt in FORMAT_FIELDS:
            if text:
                out.append("".join(text))
                text = []
            out.append((nxt,))
        elif c == "\\" and nxt in FORMAT_ESCAPES:
            text.append(FORMAT_ESCAPES[nxt])
        else:
            raise FormatError(f"--format {fmt!r}: unknown {c}{nxt}; known: {known}, %% and "
                              "\\n \\t \\r \\\\")
        i += 2
    if text:
        out.append("".join(text))
    if not any(isinstance(p, tuple) for p in out):
        raise FormatError(f"--format {fmt!r} is neither one of {', '.join(FORMAT_NAMES)} nor "
                          f"a kcat-style format with a %-field (for example '%k\\t%s\\n'); "
                          f"known: {known}")
    return out


def _bytes(b: bytes | None) -> bytes:
    return b"" if b is None else b


def _headers_bytes(headers) -> bytes:
    return b",".join(k.encode() + b"=" + _bytes(v) for k, v in headers)


def render_format(parts: list, r) -> bytes:
    """One record in a parsed kcat format (no newline added: the format has its own)."""
    out = []
    for p in parts:
        if not isinstance(p, tuple):
            out.append(p.encode())
            continue
        f = p[0]
        if f == "t":
            out.append(r.topic.encode())
        elif f == "p":
            out.append(str(r.partition).encode())
        elif f == "o":
            out.append(str(r.offset).encode())
        elif f == "k":
            out.append(_bytes(r.key))
        elif f == "s":
            out.append(_bytes(r.value))
        elif f == "T":
            out.append(str(r.timestamp).encode())
        elif f == "h":
            out.append(_headers_bytes(r.headers))
        elif f == "K":
            out.append(str(-1 if r.key is None else len(r.key)).encode())
        else:
            assert f == "S", f
            out.append(str(-1 if r.value is None else len(r.value)).encode())
    return b"".join(out)


def _text(b: bytes | None, none: str) -> str:
    return none if b is None else b.decode("utf-8", "replace")


def render_record(r, fmt, print_key=False, print_headers=False,
                  print_timestamp=False) -> bytes:
    """One record as bytes with its newline. ``fmt``: "text", "json", "raw" or a parsed
    kcat format; the print flags (kafka-console-consumer's ``print.*``) select the text
    form ``CreateTime:TS<TAB>Headers:k=v,..<TAB>KEY<TAB>VALUE``."""
    if isinstance(fmt, list):
        return render_format(fmt, r)
    if fmt == "json":
        return (json.dumps({
            "topic": r.topic, "partition": r.partition, "offset": r.offset,
            "timestamp": r.timestamp, "key": None if r.key is None else _text(r.key, ""),
            "value": None if r.value is None else _text(r.value, ""),
            "headers": [[k, None if v is None else _text(v, "")] for k, v in r.headers],
        }) + "\n").encode()
    if fmt == "raw":
        return _bytes(r.value) + b"\n"
    if print_key or print_headers or print_timestamp:
        cols = []
        if print_timestamp:
            cols.append(f"CreateTime:{r.timestamp}".encode())
        if print_headers:
            cols.append(b"Headers:" + (_headers_bytes(r.headers) or b"NO_HEADERS"))
        if print_key:
            cols.append(_text(r.key, "null").encode())
        cols.append(_text(r.value, "null").encode())
        return b"\t".join(cols) + b"\n"
    return f"{r.partition}:{r.offset}\t{_text(r.key, '')}\t{_text(r.value, 'null')}\n".encode()


def parse_headers(items: list[str] | None) -> list[tuple[str, bytes]]:
    """``--header KEY=VALUE`` items (repeatable, order kept; the value may be empty).

    Raises:
        UsageError: an item without ``=`` or with an empty key.
    """
    out = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--header {item!r} is not KEY=VALUE (for example "
                             "--header source=web; the value may be empty: --header k=)")
        out.append((key, value.encode()))
    return out


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush
    does not print a second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _topic_hint(cmd):
    """An unknown topic is answered with what to do, not only Kafka's error name."""
    @functools.wraps(cmd)
    def run(args):
        from .errors import UnknownTopicOrPartitionError

        try:
            return cmd(args)
        except UnknownTopicOrPartitionError as e:
            if "unknown topic" not in str(e):  # (a partition that does not exist)
                raise
            near = f"; did you mean {e.suggestion!r}?" if e.suggestion else ""
            raise ValueError(
                f"no topic {args.topic!r} ({e.code.name}){near} -- `raftlog topics list` "
                f"shows the topics; `raftlog topics create {args.topic}` makes it") from None
    return run


# --------------------------------------------------------------------------- produce


@_topic_hint
def cmd_produce(args) -> int:
    from .producer import Producer

    headers = parse_headers(args.header) or None
    sep = args.key_separator.encode() if args.key_separator else None
    sent = acked = 0
    pending: collections.deque = collections.deque()
    p = Producer(args.bootstrap_server, acks=args.acks, linger_ms=5,
                 compression_type=args.compression, **security_kwargs(args))
    try:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if sep is not None and sep in line:
                key, line = line.split(sep, 1)
            pending.append(p.send(args.topic, line, key=key, headers=headers,
                                  partition=args.partition))
            sent += 1
            while pending and (len(pending) >= PRODUCE_IN_FLIGHT_MAX or pending[0].done()):
                pending.popleft().result()
                acked += 1
        p.flush()
        while pending:
            pending.popleft().result()
            acked += 1
    except KeyboardInterrupt:
        acked += sum(1 for f in pending if f.done() and f.exception() is None)
        print(f"\nraftlog produce: interrupted: {acked} of {sent} records acknowledged by "
              f"{args.topic} (the others may or may not have been written)",
              file=sys.stderr, flush=True)
        try:
            p.close(timeout=2)
        except Exception:  # noqa: BLE001 -- interrupted: what was not sent is reported above
            pass
        return EXIT_INTERRUPTED
    finally:
        p.close(timeout=10)  # (no-op when already closed)
    assert acked == sent, (acked, sent)
    print(f"produced {sent} records to {args.topic}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- consume


def consume_format(args):
    """``--format`` as "text"/"json"/"raw" or a parsed kcat format (FormatError)."""
    return args.format if args.format in FORMAT_NAMES else parse_format(args.format)


def _check_consume_args(args) -> None:
    starts = [f for f, v in (("--from-beginning", args.from_beginning),
                             ("--offset", args.offset is not None),
                             ("--from-timestamp", args.from_timestamp is not None),
                             ("--from-end", args.from_end is not None)) if v]
    if len(starts) > 1:
        raise UsageError(f"give at most one of {', '.join(starts)}")
    if args.group is not None:
        bad = [f for f in starts if f != "--from-beginning"]
        if args.partition is not None:
            bad.insert(0, "--partition")
        if bad:
            raise UsageError(f"--group reads from the group's committed offsets (or, for a "
                             f"new group, from --from-beginning or the end); {', '.join(bad)} "
                             "cannot be used with it (see: raftlog groups reset-offsets)")
    if args.offset is not None and args.offset < 0:
        raise UsageError(f"--offset must be >= 0, not {args.offset}")
    if args.from_timestamp is not None and args.from_timestamp < 0:
        raise UsageError(f"--from-timestamp must be milliseconds since the epoch, >= 0, "
                         f"not {args.from_timestamp}")
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError(f"--max-messages must be >= 0, not {args.max_messages}")


def _position(c, args, tps) -> None:
    """Seek the assigned ``tps`` as the start flags say."""
    if args.offset is not None:
        for tp in tps:
            c.seek(tp, args.offset)
    elif args.from_beginning:
        c.seek_to_beginning(*tps)
    elif args.from_timestamp is not None:
        found = c.offsets_for_times({tp: args.from_timestamp for tp in tps})
        late = [tp for tp, o in found.items() if o is None]
        for tp, o in found.items():
            if o is not None:
                c.seek(tp, o.offset)
        if late:  # no record that new: from the end, as kafka-console-consumer
            c.seek_to_end(*late)
    elif args.from_end is not None:
        n = abs(args.from_end)
        start, end = c.beginning_offsets(tps), c.end_offsets(tps)
        for tp in tps:
            c.seek(tp, max(start[tp], end[tp] - n))
    else:
        c.seek_to_end(*tps)
        _note_start_at_end(c, args, tps)


def _note_start_at_end(c, args, tps) -> None:
    """One stderr line when a consume starts at the end of partitions that hold records
    (kafka-console-consumer's default -- kcat and rpk read from the start): how many it
    will not show and the flag that shows them. Only a note: any error leaves it out."""
    try:
        begin, end = c.beginning_offsets(tps), c.end_offsets(tps)
        earlier = sum(max(end[tp] - begin[tp], 0) for tp in tps)
    except Exception:  # noqa: BLE001 -- a note, never a failure
        return
    if earlier:
        whom = f"group {args.group!r} has no committed offsets: " if args.group else ""
        print(f"raftlog consume: {whom}starting at the end of {args.topic!r}, after "
              f"{earlier} earlier record{'s' if earlier != 1 else ''} (--from-beginning "
              f"reads them)", file=sys.stderr, flush=True)


def _open_consumer(args):
    from .consumer import Consumer
    from .types import TopicPartition

    reset = "earliest" if args.from_beginning else "latest"
    if args.group is not None:
        c = Consumer(args.bootstrap_server, group_id=args.group, auto_offset_reset=reset,
                     client_id="raftlog-cli", isolation_level=args.isolation_level,
                     **security_kwargs(args))
        try:
            parts = c.partitions_for_topic(args.topic)  # (an unknown topic: a clear error)
            tps = [TopicPartition(args.topic, p) for p in sorted(parts)]
            if not args.from_beginning and all(c.committed(tp) is None for tp in tps):
                _note_start_at_end(c, args, tps)  # (a new group starts at the end)
            c.subscribe([args.topic])
        except BaseException:
            c.close()
            raise
        return c
    c = Consumer(args.bootstrap_server, auto_offset_reset=reset,
                 isolation_level=args.isolation_level, **security_kwargs(args))
    try:
        parts = ([args.partition] if args.partition is not None
                 else sorted(c.partitions_for_topic(args.topic)))
        if args.partition is not None and args.partition not in c.partitions_for_topic(
                args.topic):
            raise ValueError(f"topic {args.topic!r} has no partition {args.partition}")
        tps = [TopicPartition(args.topic, p) for p in parts]
        c.assign(tps)
        _position(c, args, tps)
    except BaseException:
        c.close()
        raise
    return c


@_topic_hint
def cmd_consume(args) -> int:
    _check_consume_args(args)
    fmt = consume_format(args)
    out = sys.stdout.buffer
    seen = 0
    c = None
    flag = InterruptFlag()
    try:
        c = _open_consumer(args)
        with flag:
            seen = _consume_loop(c, args, fmt, out, flag)
        out.flush()
        if args.group is not None and not flag.interrupted:
            c.commit()
        if flag.interrupted:
            raise KeyboardInterrupt
        failing = c.fetch_error
        if failing is not None and (args.max_messages is None or seen < args.max_messages):
            # (--timeout-ms ran out while the node kept refusing: say why, not just stop)
            print(f"raftlog consume: stopped after {seen} records: fetching failed: "
                  f"{failing}", file=sys.stderr, flush=True)
            return 1
    except KeyboardInterrupt:
        _flush_quietly(out)
        if args.group is not None and c is not None:
            _commit_quietly(c)
        print(f"\nraftlog consume: interrupted after {seen} records", file=sys.stderr,
              flush=True)
        return flag.exit_code if flag.interrupted else EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (| head): stop, quietly
        _quiet_stdout()
        return 0
    finally:
        if c is not None:
            c.close()
    return 0


def _consume_loop(c, args, fmt, out, flag) -> int:
    """Poll and print until --max-messages, --timeout-ms or Ctrl-C (``flag``); returns
    how many records were written to ``out``."""
    seen = 0
    deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
    while (args.max_messages is None or seen < args.max_messages) and not flag.interrupted:
        if deadline is not None and time.monotonic() > deadline:
            break
        want = (CONSUME_POLL_RECORDS_MAX if args.max_messages is None
                else min(CONSUME_POLL_RECORDS_MAX, args.max_messages - seen))
        recs = c.poll(timeout_ms=200, max_records=want)
        for r in recs:
            out.write(render_record(r, fmt, args.print_key, args.print_headers,
                                    args.print_timestamp))
            seen += 1
        if recs:
            out.flush()
    return seen


def _commit_quietly(c) -> None:
    """Commit what was printed before Ctrl-C; a failure is said, not raised."""
    try:
        c.commit()
    except Exception as e:  # noqa: BLE001 -- interrupted: report, then exit 130
        print(f"raftlog consume: could not commit the group's offsets: {e}", file=sys.stderr)


def _flush_quietly(out) -> None:
    try:
        out.flush()
    except BrokenPipeError:
        _quiet_stdout()


# --------------------------------------------------------------------------- parsers


def add_topic_args(parser) -> None:
    """The topic as ``--topic T`` (kafka-console-*'s way) or as the first word after
    the command (rpk's and ``raftlog topics``'s way): ``raftlog produce demo``. Which
    one was given is settled by :func:`resolve_topic`."""
    parser.add_argument("topic_word", nargs="?", metavar="TOPIC",
                        help="the topic (or --topic TOPIC)")
    parser.add_argument("--topic", help="the topic (or give it as the first word)")


def resolve_topic(args) -> str | None:
    """The one topic of ``args`` (from TOPIC or --topic) into ``args.topic``; an error
    message when neither or two different ones were given."""
    word = getattr(args, "topic_word", None)
    if word is not None and args.topic is not None and word != args.topic:
        return f"two topics given ({word!r} and --topic {args.topic!r}): give one"
    args.topic = args.topic if args.topic is not None else word
    if args.topic is None:
        return "which topic? give it as the first word or as --topic TOPIC"
    return None


def add_parsers(sub, with_bootstrap) -> None:
    from raftlog.records import COMPRESSION_NAMES

    produce = with_bootstrap(sub.add_parser(
        "produce", help="stdin lines -> records (like kafka-console-producer)"))
    add_topic_args(produce)
    produce.add_argument("--key-separator", help="split each line into key SEP value")
    produce.add_argument("--partition", type=int, metavar="P",
                         help="write every record to partition P (default: by key, or "
                              "sticky for records without a key)")
    produce.add_argument("--acks", default="all")
    produce.add_argument("--header", action="append", metavar="KEY=VALUE",
                         help="a header on every record (repeatable)")
    produce.add_argument("--compression", choices=sorted(COMPRESSION_NAMES), default="none",
                         help="compress batches (default none)")
    produce.set_defaults(fn=cmd_produce)

    consume = with_bootstrap(sub.add_parser(
        "consume", help="records -> stdout (like kafka-console-consumer and kcat)"))
    add_topic_args(consume)
    consume.add_argument("--partition", type=int, help="only this partition")
    consume.add_argument("--group", metavar="G",
                         help="consume as a member of group G: partitions shared with the "
                              "group's other members, starting at its committed offsets, "
                              "and committing what was printed")
    consume.add_argument("--from-beginning", action="store_true",
                         help="from the log start (with --group: for a group without "
                              "committed offsets)")
    consume.add_argument("--offset", type=int, metavar="N",
                         help="from offset N (of each partition read)")
    consume.add_argument("--from-timestamp", type=int, metavar="MS",
                         help="from the first record at or after MS (ms since the epoch)")
    consume.add_argument("--from-end", type=int, metavar="-N",
                         help="the last N records of each partition, then new ones")
    consume.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                         default="read_committed",
                         help="read_committed (the default, as the SDK): up to the last "
                              "stable offset, no aborted records; read_uncommitted: up to "
                              "the high watermark, open and aborted transactions' records too")
    consume.add_argument("--max-messages", type=int)
    consume.add_argument(
        "--timeout-ms", type=int, default=0, help="stop after this long (0: never)"
    )
    consume.add_argument("--print-key", action="store_true", help="text: show the key")
    consume.add_argument("--print-headers", action="store_true", help="text: show headers")
    consume.add_argument("--print-timestamp", action="store_true",
                         help="text: show the timestamp (CreateTime:MS)")
    consume.add_argument(
        "--format", default="text", metavar="text|json|raw|FMT",
        help="text (P:OFFSET<TAB>KEY<TAB>VALUE), json (one object a line), raw (values), "
             "or kcat's -f format: %%t topic, %%p partition, %%o offset, %%k key, "
             "%%s value, %%T timestamp, %%h headers, %%K/%%S key/value length, \\n \\t")
    consume.set_defaults(fn=cmd_consume)
