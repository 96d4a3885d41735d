#!/usr/bin/env python3
"""Two ingest processes, a dispatcher restarted while they take writes, on
the MongoDB store the OUTBOXD_* environment names (the mongo workflow's
replica set or mongos): every device's events reach the Redis stream in
the order its client wrote them, which `work --ordered` projects in.

Each device's events alternate between the two ingest processes, one after
the other (its client waits for each 201), so within one second the two
processes' ObjectIDs interleave on one device: a catch-up in _id order
would relay them out of order. Usage: ordered_restarts.py OUTBOXD_BINARY.
Written for the workflow; it has not run on the machines outboxd is
developed on (no MongoDB there).
"""
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

BIN = sys.argv[1]
STREAM = os.environ["OUTBOXD_STREAM"]
DEVICES, PER_DEVICE = 8, 60
INGEST = ["127.0.0.1:8081", "127.0.0.1:8082"]


def start(role, addr):
    env = dict(os.environ, OUTBOXD_HTTP_ADDR=addr)
    return subprocess.Popen([BIN, role], env=env)


def stop(proc):
    proc.terminate()
    proc.wait(timeout=60)


def wait_ready(addr):
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://{addr}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"{addr} never became ready")


def post(addr, device, i):
    body = json.dumps({"sourceKey": "ordered", "deviceKey": device,
                       "occurredAt": "2026-11-01T10:00:00Z", "payload": {"i": i}}).encode()
    for _ in range(50):
        req = urllib.request.Request(f"http://{addr}/v1/events", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)["id"]
        except OSError:
            time.sleep(0.2)  # 503 during a restart: the same request again
    sys.exit(f"posting to {addr} kept failing")


def main():
    subprocess.run([BIN, "migrate"], check=True)
    procs = [start("ingest", a) for a in INGEST]
    dispatcher = start("dispatch", "127.0.0.1:8083")
    for a in INGEST + ["127.0.0.1:8083"]:
        wait_ready(a)
    written = {}

    def client(d):
        device = f"dev-{d}"
        written[device] = [post(INGEST[i % 2], device, i) for i in range(PER_DEVICE)]

    threads = [threading.Thread(target=client, args=(d,)) for d in range(DEVICES)]
    for t in threads:
        t.start()
    for _ in range(4):  # restarts while the clients write
        time.sleep(1.5)
        stop(dispatcher)
        time.sleep(0.5)
        dispatcher = start("dispatch", "127.0.0.1:8083")
    for t in threads:
        t.join()

    want = sum(len(ids) for ids in written.values())
    deadline = time.time() + 120
    while True:
        raw = subprocess.run(["redis-cli", "--raw", "XRANGE", STREAM, "-", "+"],
                             check=True, capture_output=True, text=True).stdout.splitlines()
        order, seen = {}, set()
        for k in range(0, len(raw) - 2, 3):  # id, field, payload
            msg = json.loads(raw[k + 2])
            if msg["eventId"] not in seen:
                seen.add(msg["eventId"])
                order.setdefault(msg["deviceKey"], []).append(msg["eventId"])
        if len(seen) >= want or time.time() > deadline:
            break
        time.sleep(1)
    stop(dispatcher)
    for p in procs:
        stop(p)
    if len(seen) < want:
        sys.exit(f"{len(seen)} of {want} events reached the stream")
    bad = [d for d, ids in written.items() if order.get(d) != ids]
    if bad:
        sys.exit(f"devices relayed out of their write order: {bad}")
    print(f"{want} events of {DEVICES} devices in write order through 4 dispatcher restarts")


main()
