"""The blob service's public API (FLIP-19 for Spark).

On the driver::

    import spark_steward
    ref = spark_steward.blobs.put("/models/ranker.onnx")          # permanent, application scope
    with spark_steward.scope("nightly") as s:                      # a named owner scope
        lookup = spark_steward.blobs.put(b"...", kind="permanent")
        handle = spark_steward.blobs.offload(big_dict, receivers=8)
        df.rdd.map(lambda row: use(spark_steward.blobs.get(ref), handle.load())).count()
    # the scope's blobs are gone once it is closed and its last job has ended

Inside a task, :func:`get` returns the path of a verified host-local copy; :func:`open` and
:func:`read_bytes` are shortcuts; ``get(ref, unpack=True)`` returns the directory an archive
was unpacked into, once per host. A ref is small and picklable: capture it in closures.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from spark_steward.blob.archives import unpack_once
from spark_steward.blob.keys import BlobKey, BlobKind, BlobRef
from spark_steward.errors import NotAttached, SetupError, StewardError

if TYPE_CHECKING:
    from spark_steward.blob.service import BlobService

__all__ = ["BlobRef", "BlobKey", "put", "get", "open", "read_bytes", "offload", "Offloaded",
           "ls"]

_builtin_open = open


def _remote() -> Any:
    """The active Spark Connect session when no runtime is attached in this process (the
    thin client), else None."""
    from spark_steward.kernel.remote_client import connect_session
    from spark_steward.kernel.runtime import current_runtime

    return connect_session(None) if current_runtime() is None else None


def _service() -> "BlobService":
    from spark_steward.blob.service import BlobService
    from spark_steward.kernel.runtime import runtime_for

    try:
        return runtime_for(None).service(BlobService)
    except NotAttached:
        from spark_steward.kernel.remote_client import connect_session

        if connect_session(None) is not None:
            raise SetupError(
                "through Spark Connect, blobs are put with spark_steward.blobs.put and read "
                "inside tasks (UDFs) of the session; a copy on the client is "
                "spark_steward.blobs.put's source itself") from None
        raise


def put(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
        kind: str = "permanent", *, receivers: int = 0, name: str | None = None) -> BlobRef:
    """Stores a file or bytes as a blob of the current owner scope and returns its ref.

    ``kind="permanent"`` (files, models, archives) keeps its references when a job fails;
    ``kind="transient"`` with ``receivers=n`` is deleted as soon as ``n`` tasks that loaded it
    have succeeded. The put returns once the local store and, when configured, the HA store
    hold the blob. A blob no job has used within ``spark.steward.blob.retention.interval`` may
    be deleted (staged cleanup), so put it shortly before the job that needs it.
    """
    blob_kind = BlobKind.parse(kind)
    if not isinstance(receivers, int) or receivers < 0:
        raise StewardError(f"receivers={receivers!r} is not valid: expected a whole number >= 0")
    remote = _remote()
    if remote is not None:
        from spark_steward.blob import remote as remote_blobs

        return remote_blobs.put(remote, source, blob_kind.value, receivers, name)
    service = _service()
    scope = service.current_scope()
    if isinstance(source, (bytes, bytearray, memoryview)):
        return service.require_depot().put_bytes(source, scope=scope, kind=blob_kind,
                                       receivers=receivers, name=name or "")
    path = Path(source)
    return service.require_depot().put_file(path, scope=scope, kind=blob_kind, receivers=receivers,
                                  name=name if name is not None else path.name)


def _check_ref(ref: object) -> BlobRef:
    if not isinstance(ref, BlobRef):
        raise StewardError(f"expected the BlobRef returned by spark_steward.blobs.put, got "
                           f"{type(ref).__name__} {ref!r}")
    return ref


def _in_task() -> bool:
    from spark_steward.kernel.executor import current_context

    return current_context() is not None


def get(ref: BlobRef, *, unpack: bool = False) -> str:
    """Local path of a verified copy of ``ref`` (a directory when ``unpack`` is true).

    In a task the copy is in the executor's host-local cache and stays while the task runs;
    on the driver it is the blob server's own copy.
    """
    return _get(ref, unpack=unpack, received=False)


def _get(ref: BlobRef, *, unpack: bool, received: bool) -> str:
    """:func:`get`; ``received`` also acknowledges receipt of a transient blob to the driver
    (what :meth:`Offloaded.load` does), which users never do by hand."""
    ref = _check_ref(ref)
    if _in_task():
        from spark_steward.blob.executor import executor_blobs

        blobs = executor_blobs()
        if unpack:
            return str(blobs.unpacked(ref))
        return str(blobs.get(ref, received=received))
    service = _service()
    path = service.require_depot().local_path(ref.key, ref.scope)
    if unpack:
        assert service.local_app_dir is not None
        return str(unpack_once(path, ref.name,
                               service.local_app_dir / "unpacked" / ref.scope / ref.key.digest))
    return str(path)


def open(ref: BlobRef) -> IO[bytes]:  # noqa: A001 - mirrors the builtin on purpose
    """``get(ref)`` opened for binary reading."""
    return _builtin_open(get(ref), "rb")


def read_bytes(ref: BlobRef) -> bytes:
    """The whole content of ``ref``."""
    with open(ref) as f:
        return f.read()


class Offloaded:
    """A small handle to a payload stored as a transient blob; ``load()`` it in tasks."""

    __slots__ = ("ref",)

    def __init__(self, ref: BlobRef) -> None:
        self.ref = ref

    def load(self) -> Any:
        """The payload, read from the verified local copy; acknowledges receipt to the
        driver, whose reference is dropped when this task succeeds."""
        from pyspark import cloudpickle  # noqa: F401 - registers reducers cloudpickle output needs
        import pickle

        path = _get(self.ref, unpack=False, received=True)
        with _builtin_open(path, "rb") as f:
            return pickle.load(f)

    def __repr__(self) -> str:
        return f"Offloaded({self.ref}, {self.ref.size} bytes)"


def offload(obj: Any, receivers: int = 1) -> Offloaded:
    """Puts ``obj`` (pickled with cloudpickle) as a transient blob for ``receivers`` tasks.

    Use it for payloads too large to ship inside every task: tasks carry a ~200-byte handle
    and read the payload from their host's cache. It is deleted as soon as ``receivers`` tasks
    that loaded it have succeeded; if its job fails it waits in staged cleanup instead.
    """
    from pyspark import cloudpickle

    buffer = io.BytesIO()
    cloudpickle.dump(obj, buffer)
    return Offloaded(put(buffer.getbuffer(), "transient", receivers=receivers, name=""))


def ls() -> list[BlobRef]:
    """Every blob of this application the driver currently tracks (through Spark Connect:
    the blobs this session put)."""
    remote = _remote()
    if remote is not None:
        from spark_steward.blob import remote as remote_blobs

        return remote_blobs.ls(remote)
    return list(_service().require_depot().refs())
