"""A port forwarder standing in for NAT (a container's published ports, a Kubernetes Service):
connections to LISTEN:PORT are relayed to TARGET:PORT, for every PORT given.

usage: forward.py LISTEN TARGET PORT...

Prints ``listening`` once every port is bound, then relays until killed. Standard library only.
"""

from __future__ import annotations

import asyncio
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except (ConnectionError, OSError):
            pass


async def main() -> None:
    listen, target, ports = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3:]]

    def relay_to(port: int):  # type: ignore[no-untyped-def]
        async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(target, port)
            except OSError:
                writer.close()
                return
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

        return relay

    servers = [await asyncio.start_server(relay_to(port), listen, port) for port in ports]
    print("listening", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
