"""Streaming checkpoint locations (issue 24): the same stateful query with plain Spark and with
spark-steward, each in fresh applications (spark-submit on local-cluster[2,1,1024]).

The query (bench/streams_job.py): rate source, aggregation over 10,000 keys,
``--partitions`` shuffle partitions (200), Spark's default HDFS state store and retention
(``minBatchesToRetain`` 100, a snapshot every 10 deltas, maintenance every 60 s), noop sink,
``--batches`` micro-batches (150). Both variants count every checkpoint-file operation Spark
asks for through the test delegate ``FaultyCheckpointFiles`` (tests/support/java): as Spark's
``checkpointFileManagerClass`` in the plain run, as spark-steward's delegate in the other, which
also reports the file-system calls spark-steward makes itself. Per variant and round:

* physical files and bytes in the location after the run (steady state past 100 batches);
* operations per batch: creates, opens, lists, exists, deletes, mkdirs (Spark's), plus
  spark-steward's own;
* batch duration (``triggerExecution``) p50 and p95 over the run;
* restart: a second fresh application starts the query on the location; the time from
  ``start()`` to its first completed batch.

The variants run in alternating order per round; ratios are steward / spark per round, reported
as medians with min..max. Then once, with failing storage: the same query (retention 10 batches,
maintenance every 2 s, ``--fault-batches`` 40 batches) while 30% of the deletes Spark asks for
leave the file in place (a file system answering false; one that throws stops a plain Spark
query at its first metadata-log delete) until two thirds of the batches ran: files Spark
deleted that are still there after the application ended, for each variant. Last,
``spark-steward streams drop`` of each spark-steward variant's location: files left.

    python bench/streams.py [--rounds 1] [--partitions 200] [--batches 150]
                            [--variants spark,steward[,packed]] [--fault-batches 40]
                            [--skip-faults] [--out FILE.json]

``packed`` is spark-steward with ``spark.steward.streams.pack.enabled`` (FLIP-306): its files
are the physical files in the location, packs included.

A round at the defaults takes about 25 minutes on the 2-core VM (200 tasks a batch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.faulty_files import CLASS as FAULTY, DIR_KEY, deletes_asked, faulty_jar, ops  # noqa: E402

JOB = Path(__file__).with_name("streams_job.py")
OPS = ("creates", "opens", "lists", "exists", "deletes", "mkdirs", "steward")


def spark_submit() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def flags(variant: str, work: Path, faults: Path, partitions: int,
          extra: dict[str, str] | None = None) -> list[str]:
    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.executor.cores": "1", "spark.sql.shuffle.partitions": str(partitions),
            "spark.sql.streaming.numRecentProgressUpdates": "100000", DIR_KEY: str(faults),
            **(extra or {})}
    if variant == "spark":
        conf["spark.sql.streaming.checkpointFileManagerClass"] = FAULTY
    else:
        conf.update({"spark.steward.enabled": "true",
                     "spark.steward.storage.dir": (work / "storage").as_uri(),
                     "spark.steward.streams.delegate-class": FAULTY})
    if variant == "packed":
        conf["spark.steward.streams.pack.enabled"] = "true"
    out = ["--master", "local-cluster[2,1,1024]", "--jars", str(faulty_jar())]
    for key, value in conf.items():
        out += ["--conf", f"{key}={value}"]
    return out


def run_job(variant: str, work: Path, location: Path, faults: Path, partitions: int,
            batches: int, extra: dict[str, str] | None = None, *more: str) -> dict[str, Any]:
    out = work / f"job-{time.monotonic_ns()}.json"
    cmd = [spark_submit(), *flags(variant, work, faults, partitions, extra), str(JOB), str(out),
           str(location), "--batches", str(batches), *more]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"{variant} run failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def files_in(location: Path) -> tuple[int, int]:
    found = [p for p in location.rglob("*") if p.is_file()] if location.exists() else []
    return len(found), sum(p.stat().st_size for p in found)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(variant: str, root: Path, partitions: int, batches: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"{variant}-", dir=root))
    location, faults = work / "ckpt", work / "faults"
    faults.mkdir()
    job = run_job(variant, work, location, faults, partitions, batches)
    time.sleep(1.5)  # the delegate writes its counts once a second
    counted = ops(faults)
    ran = job["last_batch_id"] - job["first_batch_id"] + 1
    files, size = files_in(location)
    restart = run_job(variant, work, location, faults, partitions, 2)
    durations = job["durations_ms"]
    return {"variant": variant, "batches": ran, "files": files, "bytes": size,
            "ops_per_batch": {k: counted.get(k, 0) / ran for k in OPS},
            "p50_ms": statistics.median(durations), "p95_ms": percentile(durations, 0.95),
            "restart_s": restart["first_batch_s"], "first_start_s": job["first_batch_s"],
            "work": str(work)}


def faults_run(variant: str, root: Path, partitions: int, batches: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"faults-{variant}-", dir=root))
    location, faults = work / "ckpt", work / "faults"
    faults.mkdir()
    (faults / "fail-deletes").write_text("0.3")
    (faults / "fail-mode").write_text("false")
    retain = {"spark.sql.streaming.minBatchesToRetain": "10",
              "spark.sql.streaming.stateStore.maintenanceInterval": "2s"}
    run_job(variant, work, location, faults, partitions, batches, retain,
            "--recover-after", str(batches * 2 // 3), "--faults", str(faults))
    asked = set(deletes_asked(faults))
    left = [p for p in asked if os.path.exists(p)]
    result: dict[str, Any] = {"variant": variant, "deletes_asked": len(asked),
                              "left_behind": len(left), "files": files_in(location)[0]}
    if variant != "spark":
        drop = subprocess.run([sys.executable, "-m", "spark_steward.cli", "streams", "drop",
                               str(location), "--storage", (work / "storage").as_uri(),
                               "--drop-grace", "0s"], capture_output=True, text=True)
        result["drop"] = drop.stdout.strip() or drop.stderr.strip()
        result["files_after_drop"] = files_in(location)[0]
    return result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}..{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--fault-batches", type=int, default=40)
    parser.add_argument("--variants", default="spark,steward",
                        help="spark, steward (registration and retried deletes), packed "
                             "(also spark.steward.streams.pack.enabled)")
    parser.add_argument("--skip-faults", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    variants = tuple(args.variants.split(","))
    ours = [v for v in variants if v != "spark"]
    root = Path(tempfile.mkdtemp(prefix="bench-streams-"))
    rounds: list[dict[str, dict[str, Any]]] = []
    for i in range(args.rounds):
        order = variants if i % 2 == 0 else tuple(reversed(variants))
        found = {v: measure(v, root, args.partitions, args.batches) for v in order}
        rounds.append(found)
        for v in variants:
            r = found[v]
            print(f"round {i + 1} {v:8s} batches {r['batches']}  files {r['files']}  "
                  f"bytes {r['bytes']}  p50 {r['p50_ms']:.0f} ms  p95 {r['p95_ms']:.0f} ms  "
                  f"restart {r['restart_s']:.2f} s  ops/batch "
                  + " ".join(f"{k} {r['ops_per_batch'][k]:.1f}" for k in OPS), flush=True)
    ratio = {f"{v}/{key}": [r[v][key] / r["spark"][key] for r in rounds]
             for v in ours for key in ("files", "p50_ms", "p95_ms", "restart_s")}
    print(f"\nvariant / spark over {args.rounds} round(s), {args.partitions} partitions, "
          f"{args.batches} batches:")
    for key, values in ratio.items():
        print(f"  {key:18s} {spread(values)}")
    if args.skip_faults:
        if args.out:
            Path(args.out).write_text(json.dumps({"rounds": rounds, "ratios": ratio,
                                                  "args": vars(args)}, indent=2))
        return
    fault = {v: faults_run(v, root, args.partitions, args.fault_batches)
             for v in ("spark", *ours)}
    print("\n30% of deletes failing until 2/3 of the run, then recovered:")
    for v, r in fault.items():
        print(f"  {v:8s} deletes asked {r['deletes_asked']}, files Spark deleted still there "
              f"{r['left_behind']}" + (f"; after streams drop: {r['files_after_drop']} files"
                                       if "files_after_drop" in r else ""))
    if args.out:
        Path(args.out).write_text(json.dumps({"rounds": rounds, "ratios": ratio,
                                              "faults": fault, "args": vars(args)}, indent=2))


if __name__ == "__main__":
    main()
