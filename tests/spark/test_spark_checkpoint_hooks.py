"""Spark's own checkpoints as spark_checkpoints.py sees them, on the shared local-cluster.

The call hooks report setCheckpointDir / RDD.checkpoint / DataFrame.checkpoint with the ids and
folders Spark really uses; the probes name those folders; and with cleanCheckpoints on and the
shim's CheckpointCleanWatch attached, Spark's ContextCleaner deletes the folder of a checkpoint
nobody references any more and a CheckpointCleaned event arrives through the runtime.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from spark_steward.checkpoint import spark_checkpoints as sc_hooks
from spark_steward.kernel.events import CheckpointCleaned, SparkEvent
from spark_steward.checkpoint.spark_checkpoints import (
    CLEAN_CHECKPOINTS,
    checkpoint_dir,
    checkpointed_rdd_of_dataframe,
    enable_clean_checkpoints,
    install_checkpoint_hooks,
    install_clean_watch,
    rdd_checkpoint_path,
    to_url,
)


def current_checkpoint_listener() -> Any:
    """The listener the hooks call now, if any."""
    return sc_hooks._listener


def clean_checkpoints_on(sc: Any) -> bool:
    """Whether checkpoints written from now on will be registered with Spark's ContextCleaner
    (the live conf value; the context must also have a cleaner)."""
    jsc = sc._jsc.sc()
    if not jsc.cleaner().isDefined():
        return False
    return str(jsc.conf().get(CLEAN_CHECKPOINTS, "false")).strip().lower() == "true"


class Recorder:
    """A CheckpointListener that records its calls; ``fail`` makes every method raise."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail = fail

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.fail:
            raise RuntimeError(f"listener failure in {call[0]}")

    def before_checkpoint_dir(self, sc: Any, requested_dir: str | None) -> None:
        self._record("before_checkpoint_dir", sc, requested_dir)

    def checkpoint_dir_set(self, sc: Any, actual_url: str | None) -> None:
        self._record("checkpoint_dir_set", sc, actual_url)

    def before_rdd_checkpoint(self, sc: Any, rdd_id: int, path: str) -> None:
        # Registered before any data is written: the folder must not exist yet.
        self._record("before_rdd_checkpoint", sc, rdd_id, path, _local(path).exists())

    def dataframe_checkpointed(self, sc: Any, rdd_id: int, path: str, written: bool,
                               session: Any) -> None:
        self._record("dataframe_checkpointed", sc, rdd_id, path, written, _local(path).exists())

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] == name]


def _local(url: str) -> Path:
    assert url.startswith("file:///"), url
    return Path(url[len("file://"):])


def _part_files(url: str) -> list[str]:
    return sorted(p.name for p in _local(url).iterdir() if p.name.startswith("part-"))


@pytest.fixture
def recorder_hooks() -> Iterator[Recorder]:
    listener = Recorder()
    remove = install_checkpoint_hooks(listener)
    yield listener
    remove()


@pytest.fixture
def ckpt_dir(spark: Any, tmp_path: Path) -> str:
    """A fresh checkpoint dir of the shared context (set without the hooks listening)."""
    requested = tmp_path / "checkpoints"
    spark.sparkContext.setCheckpointDir(str(requested))
    actual = checkpoint_dir(spark.sparkContext)
    assert actual is not None
    return actual


def test_set_checkpoint_dir_is_reported_before_and_after(spark: Any, tmp_path: Path,
                                                        recorder_hooks: Recorder) -> None:
    sc = spark.sparkContext
    requested = str(tmp_path / "ck")
    assert sc.setCheckpointDir(requested) is None
    (before, after) = recorder_hooks.calls
    assert before == ("before_checkpoint_dir", sc, requested)
    assert after[:2] == ("checkpoint_dir_set", sc)
    actual = after[2]
    # Spark makes <requested>/<uuid> at once; the URL is the form the probes return.
    assert actual == checkpoint_dir(sc) == to_url(sc.getCheckpointDir())
    assert actual.startswith((tmp_path / "ck").as_uri() + "/")
    assert _local(actual).is_dir() and _local(actual).parent == tmp_path / "ck"


def test_rdd_checkpoint_is_announced_before_spark_writes_it(spark: Any, ckpt_dir: str,
                                                           recorder_hooks: Recorder) -> None:
    sc = spark.sparkContext
    rdd = sc.parallelize(range(20), 2).map(lambda x: x + 1)
    assert rdd.checkpoint() is None
    ((_, got_sc, rdd_id, path, existed),) = recorder_hooks.named("before_rdd_checkpoint")
    assert got_sc is sc and rdd_id == rdd.id() and not existed
    assert path == f"{ckpt_dir}/rdd-{rdd_id}" == rdd_checkpoint_path(sc, rdd_id)
    assert rdd.getCheckpointFile() is None and not _local(path).exists()
    assert rdd.sum() == 210  # the first action writes the checkpoint, after the job
    assert to_url(rdd.getCheckpointFile()) == path
    assert _part_files(path) == ["part-00000", "part-00001"]


def test_eager_dataframe_checkpoint_is_reported_written(spark: Any, ckpt_dir: str,
                                                       recorder_hooks: Recorder) -> None:
    sc = spark.sparkContext
    df = spark.range(40, numPartitions=2).selectExpr("id", "id * 3 AS y")
    cp = df.checkpoint()
    ((_, got_sc, rdd_id, path, written, existed),) = recorder_hooks.named(
        "dataframe_checkpointed")
    assert got_sc is sc and written and existed
    assert path == f"{ckpt_dir}/rdd-{rdd_id}" == rdd_checkpoint_path(sc, rdd_id)
    assert _part_files(path) == ["part-00000", "part-00001"]
    assert checkpointed_rdd_of_dataframe(cp) == (rdd_id, path)
    assert type(cp) is type(df) and sorted(cp.collect()) == sorted(df.collect())


def test_lazy_dataframe_checkpoint_is_written_by_the_first_action(
        spark: Any, ckpt_dir: str, recorder_hooks: Recorder) -> None:
    cp = spark.range(30, numPartitions=3).checkpoint(eager=False)
    ((_, _, rdd_id, path, written, existed),) = recorder_hooks.named("dataframe_checkpointed")
    assert not written and not existed
    assert path == f"{ckpt_dir}/rdd-{rdd_id}"
    assert checkpointed_rdd_of_dataframe(cp) == (rdd_id, None)
    assert cp.count() == 30
    assert checkpointed_rdd_of_dataframe(cp) == (rdd_id, path)
    assert _part_files(path) == ["part-00000", "part-00001", "part-00002"]


def test_only_reliable_checkpoints_are_recognised(spark: Any, ckpt_dir: str) -> None:
    with pytest.raises(ValueError, match="not a checkpointed DataFrame"):
        checkpointed_rdd_of_dataframe(spark.range(3))
    with pytest.raises(ValueError, match="not reliably checkpointed"):
        checkpointed_rdd_of_dataframe(spark.range(3).localCheckpoint())
    with pytest.raises(ValueError, match="not a checkpointed DataFrame"):
        checkpointed_rdd_of_dataframe(spark.range(3).checkpoint().filter("id > 0"))


def test_a_failing_listener_changes_nothing_for_the_user(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from py4j.protocol import Py4JJavaError

    sc = spark.sparkContext
    listener = Recorder(fail=True)
    remove = install_checkpoint_hooks(listener)
    try:
        with caplog.at_level(logging.ERROR, logger=sc_hooks.__name__):
            assert sc.setCheckpointDir(str(tmp_path / "ck")) is None
            assert checkpoint_dir(sc) is not None
            rdd = sc.parallelize(range(4), 2)
            assert rdd.checkpoint() is None and rdd.count() == 4
            assert rdd.getCheckpointFile() is not None
            cp = spark.range(5).checkpoint()
            assert cp.count() == 5
            # Spark's own error passes through unchanged: no dir set, nothing announced.
            sc._jsc.sc().setCheckpointDir(None)
            with pytest.raises(Py4JJavaError, match="Checkpoint directory has not been set"):
                sc.parallelize(range(2)).checkpoint()
            with pytest.raises(Py4JJavaError, match="Checkpoint directory has not been set"):
                spark.range(2).checkpoint()
    finally:
        remove()
        sc.setCheckpointDir(str(tmp_path / "after"))
    assert [c[0] for c in listener.calls] == ["before_checkpoint_dir", "checkpoint_dir_set",
                                              "before_rdd_checkpoint", "dataframe_checkpointed"]
    failures = [r for r in caplog.records if "listener Recorder failed" in r.getMessage()]
    assert len(failures) == 4 and all(r.exc_info for r in failures)


def test_hooks_are_idempotent_and_unwind(spark: Any, tmp_path: Path) -> None:
    from pyspark import SparkContext

    outer = current_checkpoint_listener()  # the store's, when it runs here
    first, second = Recorder(), Recorder()
    remove_first = install_checkpoint_hooks(first)
    patched = SparkContext.setCheckpointDir
    remove_second = install_checkpoint_hooks(second)  # replaces the listener, not the patch
    assert SparkContext.setCheckpointDir is patched
    assert patched.__wrapped__.__name__ == "setCheckpointDir"  # type: ignore[attr-defined]
    remove_first()  # not the current one: no effect
    spark.sparkContext.setCheckpointDir(str(tmp_path / "a"))
    remove_second()  # back to ``first``
    assert current_checkpoint_listener() is first
    spark.sparkContext.setCheckpointDir(str(tmp_path / "b"))
    remove_first()
    assert current_checkpoint_listener() is outer
    assert len(first.calls) == 2 and len(second.calls) == 2
    assert first.calls[0][2] == str(tmp_path / "b") and second.calls[0][2] == str(tmp_path / "a")


# -- Spark's ContextCleaner ------------------------------------------------------------------------


@pytest.fixture
def cleaning(spark: Any, runtime: Any) -> Iterator[list[CheckpointCleaned]]:
    """cleanCheckpoints on (restored after) and the watch installed; yields the
    CheckpointCleaned events the runtime's dispatcher delivers."""
    sc = spark.sparkContext
    conf = sc._jsc.sc().conf()
    was_set = conf.contains(CLEAN_CHECKPOINTS)
    seen: list[CheckpointCleaned] = []
    lock = threading.Lock()

    def on_event(event: SparkEvent) -> None:
        if isinstance(event, CheckpointCleaned):
            with lock:
                seen.append(event)

    unsubscribe = runtime.dispatcher.subscribe(on_event, "test-checkpoint-cleaned")
    assert install_clean_watch(sc)
    assert install_clean_watch(sc)  # idempotent
    assert enable_clean_checkpoints(sc) and clean_checkpoints_on(sc)
    try:
        yield seen
    finally:
        unsubscribe()
        if not was_set:
            conf.remove(CLEAN_CHECKPOINTS)


def _collect_until(sc: Any, done: Any, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gc.collect()  # drops py4j proxies; py4j tells the JVM asynchronously
        sc._jvm.System.gc()
        if done():
            return True
        time.sleep(0.3)
    return False


def test_unreferenced_checkpoints_are_cleaned_by_spark_and_reported(
        spark: Any, runtime: Any, ckpt_dir: str, cleaning: list[CheckpointCleaned]) -> None:
    sc = spark.sparkContext
    cp = spark.range(20, numPartitions=2).selectExpr("id * 2 AS x").checkpoint()
    df_rdd, df_path = checkpointed_rdd_of_dataframe(cp)
    assert df_path is not None and _part_files(df_path)
    assert cp.agg({"x": "sum"}).first()[0] == 380  # used, then dropped

    rdd = sc.parallelize(range(10), 2).map(lambda x: -x)
    rdd.checkpoint()
    assert rdd.count() == 10
    rdd_id, rdd_path = rdd.id(), to_url(rdd.getCheckpointFile())
    assert _local(rdd_path).is_dir()

    kept = spark.range(5).checkpoint()  # still referenced: must survive
    kept_rdd, kept_path = checkpointed_rdd_of_dataframe(kept)
    assert kept_path is not None

    started = time.monotonic()
    del cp, rdd

    def both_cleaned() -> bool:
        ids = {e.rdd_id for e in cleaning}
        return {df_rdd, rdd_id} <= ids and not _local(df_path).exists() \
            and not _local(rdd_path).exists()

    assert _collect_until(sc, both_cleaned), (
        f"cleaned events {[e.rdd_id for e in cleaning]}, want {df_rdd} and {rdd_id}; "
        f"folders left: {[p for p in (df_path, rdd_path) if _local(p).exists()]}")
    logging.getLogger(__name__).info("cleaned after %.1fs", time.monotonic() - started)
    assert kept_rdd not in {e.rdd_id for e in cleaning} and _local(kept_path).is_dir()
    assert kept.count() == 5
    event = next(e for e in cleaning if e.rdd_id == df_rdd)
    assert event.seq > 0 and event.time > 0
    assert runtime.dispatcher.gaps == 0
