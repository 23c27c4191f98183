"""The host-local working dir's manifest records, written and read by either runtime.

- :class:`PythonManifest`: ``local/working_dir.py`` over ``records.py`` (the format's owner),
  writing a record as ``WorkingDir.install`` does and reading as ``WorkingDir.records`` does.
- :class:`JavaManifest`: the shim's ``LocalManifest`` (what the executors' table replicas
  write and read), in the conformance JVM.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from spark_steward.local.lifecycle import FileState, LocalFileRecord
from spark_steward.local.working_dir import WorkingDir
from tests.conformance import java_names
from tests.conformance.jvm import JvmDriver

APP_ID = "app-20261127123456-0001"
CAPABILITY = "tables"
SCOPE = "table-replicas"


class ManifestRecords(ABC):
    """One runtime's manifest records in a working dir."""

    runtime: ClassVar[str]

    @abstractmethod
    def write(self, workdir: Path, entry: str, *, size: int, crc32c: int, state: str,
              suffix: str) -> None:
        """Writes the record of ``entry`` (a file of its own name) under ``suffix``."""

    @abstractmethod
    def read(self, workdir: Path, entry: str, suffix: str) -> dict[str, Any] | None:
        """The verified body of the record, or None when there is none or it fails."""

    @abstractmethod
    def file_name(self, workdir: Path, entry: str, suffix: str) -> str:
        """The name of the record's file in the manifest folder."""

    @abstractmethod
    def usage(self, workdir: Path) -> int:
        """Bytes of the complete records' files: what counts against the working dir's
        bound."""


class PythonManifest(ManifestRecords):
    runtime = "python"

    def _dir(self, workdir: Path) -> WorkingDir:
        return WorkingDir(workdir, APP_ID)

    def write(self, workdir: Path, entry: str, *, size: int, crc32c: int, state: str,
              suffix: str) -> None:
        wd = self._dir(workdir)
        record = LocalFileRecord(entry=entry, file=entry, app_id=APP_ID, capability=CAPABILITY,
                                 scope=SCOPE, size=size, crc32c=crc32c, state=FileState(state),
                                 written_at=time.time())
        wd._write_record(wd._record_path(entry, suffix), record)

    def read(self, workdir: Path, entry: str, suffix: str) -> dict[str, Any] | None:
        wd = self._dir(workdir)
        record = wd._read_record(wd._record_path(entry, suffix))
        if record is None:
            return None
        if suffix == "rec":  # the listing the working dir's recovery and bound go by
            assert record in wd.records()
        return record.to_json()

    def file_name(self, workdir: Path, entry: str, suffix: str) -> str:
        return self._dir(workdir)._record_path(entry, suffix).name

    def usage(self, workdir: Path) -> int:
        return self._dir(workdir).usage()[1]


class JavaManifest(ManifestRecords):
    runtime = "java"

    def __init__(self, jvm: JvmDriver) -> None:
        self.jvm = jvm

    def _call(self, op: str, workdir: Path, **fields: Any) -> dict[str, Any]:
        return self.jvm.call(op, **{"class": java_names.LOCAL_MANIFEST}, workdir=str(workdir),
                             app_id=APP_ID, capability=CAPABILITY, scope=SCOPE, **fields)

    def write(self, workdir: Path, entry: str, *, size: int, crc32c: int, state: str,
              suffix: str) -> None:
        self._call("manifest.write", workdir, entry=entry, size=size, crc32c=crc32c,
                   state=state, suffix=suffix)

    def read(self, workdir: Path, entry: str, suffix: str) -> dict[str, Any] | None:
        return self._call("manifest.read", workdir, entry=entry, suffix=suffix)["body"]

    def file_name(self, workdir: Path, entry: str, suffix: str) -> str:
        return self._call("manifest.name", workdir, entry=entry, suffix=suffix)["name"]

    def usage(self, workdir: Path) -> int:
        return int(self._call("manifest.usage", workdir)["bytes"])
