"""An attacker without the secret: holds idle TCP connections to a blob server and re-opens
every one the server drops, from several loopback source addresses, for a while.

It never sends a byte. Runs in its own process (another host's attacker does not share the
server's interpreter lock), non-blocking, one thread. Prints one JSON line at the end:
``{"opened": N, "dropped": M, "errors": {...}}``.

usage: idle_socket_attacker.py HOST PORT SECONDS SOURCE=COUNT [SOURCE=COUNT ...]
       (COUNT idle sockets held open from loopback address SOURCE)
"""

from __future__ import annotations

import errno
import json
import selectors
import socket
import sys
import time
from collections import Counter

IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)  # Linux


def main() -> None:
    host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    wanted = [(source, int(count)) for source, count in
              (arg.split("=", 1) for arg in sys.argv[4:])]
    selector = selectors.DefaultSelector()
    opened, dropped = 0, 0
    errors: Counter[str] = Counter()

    def open_one(source: str) -> None:
        nonlocal opened
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
            sock.setblocking(False)
            code = sock.connect_ex((host, port))
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, errno.errorcode.get(code, str(code)))
        except OSError as e:
            errors[type(e).__name__ + ":" + str(e.errno)] += 1
            sock.close()
            return
        selector.register(sock, selectors.EVENT_READ, source)
        opened += 1

    for source, count in wanted:
        for _ in range(count):
            open_one(source)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        missing: list[str] = []
        for key, _ in selector.select(min(left, 0.05)):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)  # the server's hello: read, never answered
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # dropped (pushed out, or the handshake deadline): come back
                selector.unregister(sock)
                sock.close()
                dropped += 1
                missing.append(key.data)
        for source in missing:
            open_one(source)
        # Sockets that failed to open are retried too, so the pressure never eases.
        have = Counter(key.data for key in selector.get_map().values())
        for source, count in wanted:
            for _ in range(count - have[source]):
                open_one(source)
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    print(json.dumps({"opened": opened, "dropped": dropped, "errors": dict(errors)}),
          flush=True)


if __name__ == "__main__":
    main()
