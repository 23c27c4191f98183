"""What Spark sees of one folder of a streaming checkpoint location, through either runtime.

- :class:`PythonFolderView`: the Python reader of the packs (``Packs.read().live()``, the
  format of ``streams/packs.py``) and the rule that loose files win (``logical_files``), over
  the folder's loose entries.
- :class:`JavaFolderView`: the shim's checkpoint file manager as Spark constructs it, with a
  Hadoop ``file:`` path, in the conformance JVM.

Both raise the same three errors, so a test reads the same whichever runs it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar, NamedTuple

from spark_steward.errors import StreamError
from spark_steward.storage import Storage
from spark_steward.streams.lifecycle.packs import logical_files
from spark_steward.streams.packs import Packs
from tests.conformance import java_names
from tests.conformance.jvm import JavaError, JvmDriver, decoded


class Listed(NamedTuple):
    length: int
    mtime_ms: int
    directory: bool


class Unreadable(Exception):
    """A pack (or the catalog) cannot be read: nothing of the location is served."""


class Missing(Exception):
    """No such file, or no such folder to list."""


class MemberCorrupt(Exception):
    """A packed file's bytes fail their checksum."""


class FolderView(ABC):
    """One runtime's view of a location's folders."""

    runtime: ClassVar[str]

    @abstractmethod
    def list(self, root: Path, folder: str) -> dict[str, Listed]:
        """The folder's files by name; Missing when the folder is neither loose nor packed."""

    @abstractmethod
    def exists(self, root: Path, folder: str, name: str) -> bool:
        """Whether the file is there, loose or packed."""

    @abstractmethod
    def read(self, root: Path, folder: str, name: str) -> bytes:
        """The file's bytes; Missing when it is not there."""

    def names(self, root: Path, folder: str) -> set[str]:
        return set(self.list(root, folder))


class PythonFolderView(FolderView):
    runtime = "python"

    def _live(self, root: Path) -> tuple[Packs, dict]:  # type: ignore[type-arg]
        packs = Packs(Storage.from_url(f"file://{root}"), str(root))
        try:
            return packs, packs.read().live()
        except StreamError as e:
            raise Unreadable(str(e)) from None

    def _packed(self, root: Path, folder: str) -> tuple[Packs, dict]:  # type: ignore[type-arg]
        packs, live = self._live(root)
        return packs, {rel.rpartition("/")[2]: member for rel, member in live.items()
                       if rel.rpartition("/")[0] == folder}

    def list(self, root: Path, folder: str) -> dict[str, Listed]:
        _, packed = self._packed(root, folder)
        directory = root / folder
        loose = {p.name: p for p in directory.iterdir()} if directory.is_dir() else {}
        if not loose and not packed and not directory.is_dir():
            raise Missing(f"{directory} is neither loose nor packed")
        out = {}
        for name in logical_files(loose, packed):
            if name in loose:
                st = loose[name].stat()
                out[name] = Listed(st.st_size, st.st_mtime_ns // 1_000_000, loose[name].is_dir())
            else:
                member = packed[name]
                out[name] = Listed(member.length, member.mtime_ms, False)
        return out

    def exists(self, root: Path, folder: str, name: str) -> bool:
        if (root / folder / name).exists():
            return True
        return name in self._packed(root, folder)[1]

    def read(self, root: Path, folder: str, name: str) -> bytes:
        path = root / folder / name
        if path.is_file():
            return path.read_bytes()
        packs, packed = self._packed(root, folder)
        if name not in packed:
            raise Missing(f"{path} is neither loose nor packed")
        try:
            return packs.member_bytes(packed[name])
        except StreamError as e:
            raise MemberCorrupt(str(e)) from None


class JavaFolderView(FolderView):
    runtime = "java"

    def __init__(self, jvm: JvmDriver) -> None:
        self.jvm = jvm
        self.manager = java_names.stream_checkpoint_files()

    def _call(self, op: str, root: Path, folder: str, **fields: str) -> dict:  # type: ignore[type-arg]
        try:
            return self.jvm.call(op, **{"class": self.manager}, folder=f"file:{root}/{folder}",
                                 **fields)
        except JavaError as e:
            if e.java_class == "java.io.FileNotFoundException":
                raise Missing(e.message) from None
            if "is unreadable (" in e.message or "not a regular file" in e.message:
                raise Unreadable(e.message) from None
            if "fails its checksum" in e.message:
                raise MemberCorrupt(e.message) from None
            raise

    def list(self, root: Path, folder: str) -> dict[str, Listed]:
        files = self._call("files.list", root, folder)["files"]
        return {name: Listed(f["length"], f["mtime"], f["directory"])
                for name, f in files.items()}

    def exists(self, root: Path, folder: str, name: str) -> bool:
        return bool(self._call("files.exists", root, folder, name=name)["exists"])

    def read(self, root: Path, folder: str, name: str) -> bytes:
        return decoded(self._call("files.read", root, folder, name=name))

