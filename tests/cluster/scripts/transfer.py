"""A timed TCP transfer between two harness hosts (stdlib only).

    transfer.py recv PORT              listen on every address of this host; print "listening",
                                       then, per connection, one JSON line: bytes and the
                                       seconds from the first byte to EOF
    transfer.py send HOST PORT MIB     send MIB MiB; print one JSON line: the seconds the TCP
                                       connect took (one round trip) and the total seconds
"""

from __future__ import annotations

import json
import socket
import sys
import time


def recv(port: int) -> None:
    with socket.create_server(("0.0.0.0", port)) as server:
        print("listening", flush=True)
        conn, _ = server.accept()
        with conn:
            total = 0
            first = None
            while True:
                chunk = conn.recv(1 << 20)
                if first is None:
                    first = time.monotonic()
                if not chunk:
                    break
                total += len(chunk)
            seconds = time.monotonic() - (first or time.monotonic())
            print(json.dumps({"bytes": total, "seconds": seconds}), flush=True)
            conn.sendall(b"k")  # the sender waits for this: its time covers delivery too


def send(host: str, port: int, mib: int) -> None:
    block = b"\0" * (1 << 20)
    began = time.monotonic()
    with socket.create_connection((host, port), timeout=60) as conn:
        connected = time.monotonic()
        for _ in range(mib):
            conn.sendall(block)
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)
        done = time.monotonic()
    print(json.dumps({"connect": connected - began, "seconds": done - connected}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "recv":
        recv(int(sys.argv[2]))
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
