"""Other bytes with the same crc32c: what anyone who can write a copy of a blob can make.

crc32c is affine over GF(2): flipping a set of message bits changes the crc by the XOR of what
each bit alone changes it by, whatever the rest of the message is. So the 32 bits of any four
consecutive bytes can be solved for, by Gaussian elimination, to give any wanted crc. Used by
tests/faults/test_blob_hardening.py and tests/spark/scripts/blob_forgery_job.py (self-contained:
spark-submit's driver imports it from this directory).
"""

from __future__ import annotations

import crc32c


def forge_crc32c(data: bytes | bytearray, target: int, at: int) -> bytes:
    """``data`` with the four bytes at ``at`` replaced so that the result's crc32c is
    ``target``; same length."""
    if not 0 <= at <= len(data) - 4:
        raise ValueError(f"four bytes at {at} do not fit in {len(data)} bytes")
    message = bytearray(data)
    message[at:at + 4] = bytes(4)
    base = crc32c.crc32c(message)
    # What flipping each of the 32 bits alone does to the crc (affine: independent of the rest).
    columns = []
    for bit in range(32):
        message[at + bit // 8] ^= 1 << (bit % 8)
        columns.append(crc32c.crc32c(message) ^ base)
        message[at + bit // 8] ^= 1 << (bit % 8)
    # Reduce to a basis keyed by leading bit, remembering which bits make each vector.
    basis: dict[int, tuple[int, int]] = {}
    for bit, vector in enumerate(columns):
        combo = 1 << bit
        while vector:
            lead = vector.bit_length() - 1
            if lead not in basis:
                basis[lead] = (vector, combo)
                break
            vector ^= basis[lead][0]
            combo ^= basis[lead][1]
    want, flips = base ^ target, 0
    while want:
        vector, combo = basis[want.bit_length() - 1]  # 4 consecutive bytes: always full rank
        want ^= vector
        flips ^= combo
    for bit in range(32):
        if flips >> bit & 1:
            message[at + bit // 8] ^= 1 << (bit % 8)
    forged = bytes(message)
    assert crc32c.crc32c(forged) == target
    return forged


def forged_twin(data: bytes, payload: bytes = b"FORGED BY SOMEONE WITHOUT THE KEY") -> bytes:
    """Other bytes of ``data``'s length and crc32c: ``payload`` written over its start, four
    bytes after it fixed up."""
    if len(data) < len(payload) + 4:
        raise ValueError("data too short to forge")
    edited = bytearray(data)
    edited[:len(payload)] = payload
    forged = forge_crc32c(edited, crc32c.crc32c(data), len(payload))
    assert forged != data and len(forged) == len(data)
    return forged
