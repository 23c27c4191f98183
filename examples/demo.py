"""Runs examples/demo_job.py end to end under spark-steward on the embedded default: a
local-cluster[2,1,1024] Spark and a local storage directory. Shows the flags it uses, the job's
output, and what spark-steward recorded.

    python examples/demo.py [--storage URL]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from spark_steward.cli import conf_pairs
from spark_steward.config import default_storage_dir

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", default=default_storage_dir(),
                        help="spark.steward.storage.dir (default: %(default)s)")
    args = parser.parse_args()

    flags = [f"{k}={v}" for k, v in conf_pairs(args.storage, None)]
    flags.append("spark.steward.cache.transparent=true")  # df.cache() through spark-steward
    print("[demo] spark-submit with the flags `spark-steward conf` prints:")
    for flag in flags:
        print(f"         --conf {flag}")
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    log4j = HERE.parent / "conf" / "log4j2.properties"
    cmd = [str(submit), "--master", "local-cluster[2,1,1024]",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j2.configurationFile={log4j}",
           "--conf", f"spark.executor.extraJavaOptions=-Dlog4j2.configurationFile={log4j}"]
    for flag in flags:
        cmd += ["--conf", flag]
    cmd.append(str(HERE / "demo_job.py"))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        print(f"[demo] the job failed with exit code {result.returncode}", file=sys.stderr)
        return result.returncode
    print("[demo] what spark-steward recorded (spark-steward status):")
    status = subprocess.run([sys.executable, "-m", "spark_steward.cli", "status", "--storage",
                             args.storage]).returncode
    print("[demo] checkpoints left behind (spark-steward checkpoints ls):")
    listing = subprocess.run([sys.executable, "-m", "spark_steward.cli", "checkpoints", "ls",
                              "--storage", args.storage]).returncode
    print("[demo] cached tables left behind (spark-steward cache ls):")
    tables = subprocess.run([sys.executable, "-m", "spark_steward.cli", "cache", "ls",
                             "--storage", args.storage]).returncode
    return status or listing or tables


if __name__ == "__main__":
    sys.exit(main())
