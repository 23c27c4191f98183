"""A harness owner that ends in the way argv[1] says, for the teardown tests.

    teardown_child.py MODE    MODE: exit | error | atexit | wait

Starts ``Cluster(workers=1, spark=False)``, prints ``READY <prefix>``, then: ``exit`` leaves
the ``with`` block normally, ``error`` raises in it, ``atexit`` never closes (the harness's
atexit hook must), ``wait`` sleeps in the block until a signal (SIGINT, SIGTERM or SIGKILL from
the test) ends it.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.cluster.harness import Cluster  # noqa: E402


def main() -> None:
    mode = sys.argv[1]
    # Whatever the test runner's own dispositions: Ctrl-C and SIGTERM as a shell gives them.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    cluster = Cluster(workers=1, spark=False)
    if mode == "atexit":
        cluster.start()
        print(f"READY {cluster.prefix}", flush=True)
        return
    with cluster:
        print(f"READY {cluster.prefix}", flush=True)
        if mode == "error":
            raise RuntimeError("boom in the body")
        if mode == "wait":
            time.sleep(600)


if __name__ == "__main__":
    main()
