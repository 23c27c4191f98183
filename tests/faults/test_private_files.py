"""Private files through real spark-submit runs (issue 21, point 4).

Another local user (``nobody``, in a process of its own) can neither list the application's
local dir nor read a blob, a ``local.state`` value, a ``SparkFiles.get`` copy or a storage file
while the application runs, although every directory above them is open to all. A local dir
another user made, one anybody may write, a symbolic link, or a default dir planted in a shared
temp dir fails the attach with one line naming the key and the path.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from tests.spark.conftest import NO_EXECUTOR, SCRIPTS, BackgroundJob, run_spark_submit

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="acts as another user: needs root")

PRIVATE_JOB = Path(__file__).parent / "scripts" / "private_job.py"
PLAIN = SCRIPTS / "plain_job.py"
NOBODY = 65534
KEY = "spark.steward.local.dir"
# The other user's interpreter: the test's own may sit below /root, which nobody may enter.
OTHER_PYTHON = next((p for p in ("/usr/bin/python3", "/bin/python3", sys.executable)
                     if os.path.exists(p)), sys.executable)
PROBE = r"""
import json, os, sys
got = {}
for path in json.load(sys.stdin):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
        got[path] = "ok"
    except OSError as exc:
        got[path] = type(exc).__name__
print(json.dumps(got))
"""


def as_nobody(paths: list[Path]) -> dict[str, str]:
    """What ``nobody`` gets listing each directory and reading each file: ``ok`` or the error."""
    result = subprocess.run([OTHER_PYTHON, "-I", "-c", PROBE], input=json.dumps(
        [str(p) for p in paths]), user=NOBODY, group=NOBODY, extra_groups=[], cwd="/",
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path is root's only): what keeps
    ``nobody`` out below it is spark-steward's own modes."""
    base = Path(tempfile.mkdtemp(prefix="steward-private-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def flags(storage: Path, local: str | None) -> list[str]:
    """``spark-steward conf`` for these dirs, as a user would paste it (``local`` None: the
    default, ``<tmp>/spark-steward-<uid>/local``)."""
    local_dir = ["--local-dir", local] if local else []
    return subprocess.run([sys.executable, "-m", "spark_steward.cli", "conf", "--storage",
                           storage.as_uri(), *local_dir],
                          check=True, capture_output=True, text=True).stdout.split()


def tree(root: Path) -> list[Path]:
    found = [root]
    for folder, dirs, files in os.walk(root):
        found += [Path(folder) / name for name in dirs + files]
    return found


def loose(paths: list[Path]) -> list[str]:
    """Paths with a group or other bit (links aside), or a directory other than 0700."""
    bad = []
    for path in paths:
        st = os.lstat(path)
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            continue
        if mode & 0o077 or (stat.S_ISDIR(st.st_mode) and mode != 0o700):
            bad.append(f"{path} {mode:04o}")
    return bad


def test_another_user_can_neither_list_nor_read_what_spark_steward_writes(open_base: Path
                                                                          ) -> None:
    local, storage, work = open_base / "local", open_base / "storage", open_base / "work"
    work.mkdir(mode=0o755)
    out = open_base / "out.json"
    job = BackgroundJob(PRIVATE_JOB, flags(storage, str(local)), out, str(work))
    try:
        result = job.wait_for_output(timeout=300)
        row = result["rows"][0]
        assert row["blob_size"] == 1 << 20 and result["total"] == sum(range(3000))
        app = local / result["app_id"]
        # Both tasks put the same state key: on one executor the later put's version replaced
        # the other's, on two each executor keeps its own.
        states = sorted({Path(r["state"]) for r in result["rows"] if Path(r["state"]).is_file()})
        assert 1 <= len(states) <= 2, result["rows"]
        written = [*states, Path(row["vocab"]),
                   Path(row["zip"]) / "t" / "a.csv", Path(row["tgz"]) / "bin" / "run.sh"]
        assert all(p.is_file() and p.is_relative_to(app) for p in written), written
        replicas = [p for p in tree(app / "table-replicas") if p.is_file()]
        assert replicas, "the executors' JVMs kept no table replica"
        ha_copies = [p for p in tree(storage / "apps") if p.is_file()]
        segments = [p for p in tree(storage / "checkpoints" / "merged") if p.is_file()]
        assert ha_copies and segments

        # Everything in the local dir, by Python or the JVM: 0700 folders, 0600 files (an
        # unpacked executable keeps its owner's bits only).
        everything_local = tree(local)
        assert loose(everything_local) == []
        assert stat.S_IMODE(os.stat(Path(row["tgz"]) / "bin" / "run.sh").st_mode) == 0o700
        # The storage dir: all that spark-steward writes itself; Spark's Parquet files keep
        # Hadoop's modes, inside folders that are private.
        spark_written = storage / "tables" / "data"
        assert loose([p for p in tree(storage) if not p.is_relative_to(spark_written)]) == []

        everything = everything_local + tree(storage)
        got = as_nobody([open_base, work / "vocab.txt", *everything])
        # The probe can read where the modes let it: what follows is their doing.
        assert got.pop(str(open_base)) == "ok" and got.pop(str(work / "vocab.txt")) == "ok"
        assert {p: r for p, r in got.items() if r != "PermissionError"} == {}
        for path in [local, storage, *written, *replicas, *ha_copies, *segments]:
            assert got[str(path)] == "PermissionError", path
    finally:
        Path(str(out) + ".release").touch()
        job.thread.join(timeout=120)
    assert job.result and job.result[0].returncode == 0, job.result[0].stderr[-3000:]


def _planted_other_user(base: Path) -> tuple[str, str]:
    local = base / "local"
    local.mkdir(mode=0o700)
    os.chown(local, NOBODY, NOBODY)
    return str(local), f"{local} is owned by uid {NOBODY}, not this user (uid 0)"


def _writable_by_all(base: Path) -> tuple[str, str]:
    local = base / "local"
    local.mkdir()
    local.chmod(0o777)
    return str(local), f"{local} is writable by other users (mode 0777)"


def _symbolic_link(base: Path) -> tuple[str, str]:
    real = base / "real"
    real.mkdir(mode=0o700)
    (base / "local").symlink_to(real)
    return str(base / "local"), f"{base / 'local'} is a symbolic link"


PLANTED = {"owned by another user": _planted_other_user, "writable by all": _writable_by_all,
           "a symbolic link": _symbolic_link}


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    # spark-submit's PythonRunner sends the Python driver's stderr to its own stdout.
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if "ConfigError" in line]
    assert lines, output[-3000:]
    return lines[-1]


@pytest.mark.parametrize("case", PLANTED)
def test_a_local_dir_others_could_reach_fails_the_attach_with_one_line(open_base: Path,
                                                                       case: str) -> None:
    local, why = PLANTED[case](open_base)
    before = sorted(os.listdir(local)) if os.path.isdir(local) else None
    result = run_spark_submit(PLAIN, flags(open_base / "storage", local),
                              str(open_base / "out.json"), master=NO_EXECUTOR)
    line = _one_line(result)
    assert line.startswith(f"spark_steward.errors.ConfigError: {KEY}: {why}"), line
    assert not (open_base / "out.json").exists()
    assert (sorted(os.listdir(local)) if os.path.isdir(local) else None) == before, \
        "something was written into the refused dir"


def test_a_default_dir_planted_in_the_shared_temp_dir_fails_the_attach(open_base: Path) -> None:
    """Someone made ``<tmp>/spark-steward-0`` first: the default local dir below it is refused
    before anything is created there."""
    shared = open_base / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / f"spark-steward-{os.getuid()}"
    planted.mkdir(mode=0o777)
    os.chown(planted, NOBODY, NOBODY)
    result = run_spark_submit(PLAIN, flags(open_base / "storage", None),
                              str(open_base / "out.json"), env={"TMPDIR": str(shared)},
                              master=NO_EXECUTOR)
    line = _one_line(result)
    assert line.startswith(f"spark_steward.errors.ConfigError: {KEY}: {planted} (on the way to "
                           f"{planted / 'local'}) is owned by uid {NOBODY}"), line
    assert os.listdir(planted) == []
