"""crc32c helpers: the fast verification every stored artifact carries."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import mmap
import os
from typing import Any, BinaryIO, Callable


def _load_crc32c() -> Callable[..., int]:
    """The ``crc32c`` package's C function, loaded without running the package's ``__init__``.

    That ``__init__`` asks ``importlib.metadata`` for the package's version, which scans every
    ``sys.path`` entry: in a Spark Python worker (pyspark's and py4j's zips, Spark's jars) that
    took 60-73 ms of every new worker's first task, against 0.6 ms for the extension alone.
    Anything unexpected falls back to the plain import.
    """
    try:
        spec = importlib.util.find_spec("crc32c")
        folders = list(spec.submodule_search_locations or []) if spec else []
        for folder in folders:
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                path = os.path.join(folder, "_crc32c" + suffix)
                if os.path.isfile(path):
                    loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                    found = importlib.util.spec_from_loader("crc32c._crc32c", loader,
                                                            origin=path)
                    if found is None:
                        continue
                    module: Any = importlib.util.module_from_spec(found)
                    loader.exec_module(module)
                    function: Callable[..., int] = module.crc32c
                    if function(b"123456789") == 0xE3069283:  # the check value of CRC-32C
                        return function
    except (ImportError, OSError, AttributeError, ValueError):
        pass
    import crc32c

    return crc32c.crc32c  # type: ignore[no-any-return]


#: ``crc32c_update(data, value=0)``: crc32c of ``data`` continuing from ``value``, in C.
crc32c_update = _load_crc32c()

CHUNK = 4 << 20
#: Read size of :func:`crc_of_file` when a file cannot be mapped.
FILE_CHUNK = 8 << 20


def crc32c_of(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """crc32c of ``data``, continuing from ``value`` for streamed input."""
    return int(crc32c_update(data, value))


def crc32c_stream(stream: BinaryIO, chunk: int = CHUNK) -> tuple[int, int]:
    """Returns ``(crc32c, size)`` of everything left in ``stream``."""
    value, size = 0, 0
    buf = bytearray(chunk)
    view = memoryview(buf)
    while True:
        n = stream.readinto(view)  # type: ignore[attr-defined]
        if not n:
            return value, size
        value = crc32c_of(view[:n], value)
        size += n


def crc_of_file(path: str | os.PathLike[str]) -> tuple[int, int]:
    """``(crc32c, size)`` of a file (see :func:`crc_of_fd`)."""
    with open(path, "rb", buffering=0) as src:
        return crc_of_fd(src.fileno())


def crc_of_fd(fd: int) -> tuple[int, int]:
    """``(crc32c, size)`` of the open file ``fd``, from its start; the offset is unchanged.

    A read-only mapping lets crc32c run over the page cache without copying it (about the raw
    crc32c speed; a read loop costs a quarter more). Files checked here (blobs, working-dir
    files) are only ever replaced by rename, never truncated in place, so the mapping cannot
    lose its pages under us.
    """
    size = os.fstat(fd).st_size
    if size == 0:
        return 0, 0
    try:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
            return crc32c_update(mapped), len(mapped)
    except (OSError, ValueError):
        pass  # not mappable (a special file): stream it
    crc = 0
    size = 0
    buf = bytearray(FILE_CHUNK)
    view = memoryview(buf)
    while n := os.preadv(fd, [buf], size):
        crc = crc32c_update(view[:n], crc)
        size += n
    return crc, size


def format_crc(value: int) -> str:
    """Eight lower-case hex digits, the form stored in records."""
    return f"{value & 0xFFFFFFFF:08x}"
