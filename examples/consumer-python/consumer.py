#!/usr/bin/env python3
"""A consumer of an outboxd stream in its own consumer group, written with
Python's standard library only (a small RESP client over a socket).

It reads the stream with XREADGROUP, prints one JSON line per event
({"eventId", "type", "payload"}) and acknowledges each entry with XACK
after printing it (at-least-once: an entry it did not acknowledge is read
again from its pending list when it starts again). A message carries the
payload when outboxd runs with --message-payload; one flagged payloadRef (a
payload over --message-payload-max) is fetched from GET /v1/events/{id}
(--server, --token).

    python3 consumer.py --redis-url redis://127.0.0.1:6379/0 \\
        --stream event-stream --group my-consumer --types order.placed

With --partitions P > 1, run one per partition's stream key.
"""

import argparse
import json
import socket
import sys
import urllib.parse
import urllib.request


class RedisError(Exception):
    """An error reply from Redis."""


class Redis:
    """A minimal RESP2 client: one connection, one command at a time."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        if u.scheme != "redis":
            raise ValueError("only redis:// URLs are supported, got %r" % url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 6379))
        self.buf = self.sock.makefile("rb")
        if u.password:
            self.call("AUTH", *([u.username, u.password] if u.username else [u.password]))
        db = (u.path or "/0").lstrip("/") or "0"
        if db != "0":
            self.call("SELECT", db)

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return self.reply()

    def reply(self):
        line = self.buf.readline()
        if not line:
            raise ConnectionError("Redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.buf.read(n + 2)[:-2]
            return data.decode()
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self.reply() for _ in range(n)]
        raise RedisError("unexpected reply %r" % line)


def fetch(server, token, event_id):
    """The original of event_id, from outboxd's API."""
    req = urllib.request.Request(server.rstrip("/") + "/v1/events/" + urllib.parse.quote(event_id))
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--stream", default="event-stream")
    p.add_argument("--group", required=True, help="this consumer's own group (never outboxd's)")
    p.add_argument("--consumer", default="consumer-1")
    p.add_argument("--types", default="", help="comma-separated event types to print (all when empty); others are acknowledged and skipped")
    p.add_argument("--server", default="http://127.0.0.1:8080", help="outboxd's API, to fetch payloads sent by reference")
    p.add_argument("--token", default="", help="a bearer token for --server")
    p.add_argument("--count", type=int, default=0, help="exit after acknowledging this many entries (0: run until stopped)")
    p.add_argument("--idle-exit", type=float, default=0, help="exit after this many seconds without an entry (0: never)")
    args = p.parse_args()
    types = {t for t in args.types.split(",") if t}

    r = Redis(args.redis_url)
    try:
        r.call("XGROUP", "CREATE", args.stream, args.group, "0", "MKSTREAM")
    except RedisError as e:
        if not str(e).startswith("BUSYGROUP"):
            raise
    acked, idle, start = 0, 0.0, "0"  # "0": our own pending entries first, then ">"
    block_ms = 500
    while args.count == 0 or acked < args.count:
        reply = r.call("XREADGROUP", "GROUP", args.group, args.consumer, "COUNT", 100,
                       "BLOCK", block_ms, "STREAMS", args.stream, start)
        entries = reply[0][1] if reply else []
        if start == "0" and not entries:
            start = ">"
            continue
        if not entries:
            idle += block_ms / 1000
            if args.idle_exit and idle >= args.idle_exit:
                break
            continue
        idle = 0.0
        for entry_id, fields in entries:
            if fields is None:  # trimmed while pending
                r.call("XACK", args.stream, args.group, entry_id)
                acked += 1
                continue
            values = dict(zip(fields[0::2], fields[1::2]))
            msg = json.loads(values["payload"])
            if not types or msg.get("type") in types:
                payload = msg.get("payload")
                if msg.get("payloadRef"):
                    payload = fetch(args.server, args.token, msg["eventId"]).get("payload")
                print(json.dumps({"eventId": msg["eventId"], "type": msg.get("type"), "payload": payload,
                                  "origin": msg.get("origin")}), flush=True)
            r.call("XACK", args.stream, args.group, entry_id)
            acked += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
