"""A hand-driven blob protocol client, for requests BlobClient would never send; shared by the
blob server's fault tests."""

from __future__ import annotations

import socket
from typing import Any

from spark_steward.blob.protocol import auth_proof, encode_frame, exact_reader, read_frame


class RawConnection:
    """One connection from a chosen loopback source address; authenticated with ``secret``
    unless told not to (then only the server's hello has been read)."""

    def __init__(self, address: tuple[str, int], secret: str, *, source: str = "127.0.0.1",
                 authenticate: bool = True) -> None:
        self.sock = socket.create_connection(address, timeout=5, source_address=(source, 0))
        self._recv_exactly = exact_reader(self.sock.recv_into)
        self.hello = self.read()
        if authenticate:
            assert self.request({"auth": auth_proof(secret, self.hello["nonce"])}) == {"ok": True}

    def read(self) -> dict[str, Any]:
        return read_frame(self._recv_exactly, 1 << 20)

    def read_bytes(self, n: int) -> bytes:
        return self._recv_exactly(n)

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.sock.sendall(encode_frame(obj))
        return self.read()

    def closed_by_server(self) -> bool:
        """Whether the server ends the stream (after anything it still had to say)."""
        try:
            while self.sock.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()
