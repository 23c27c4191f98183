"""The driver runtime beside a driver no Python of ours started (a Spark Connect server, a
JVM-launched driver): ``python -m spark_steward.kernel.host``, run and watched by the shim's
``RuntimeHost``.

It connects to the driver's py4j gateway (given in ``PYSPARK_GATEWAY_PORT``/``_SECRET``),
waits until the SparkContext is built, attaches the runtime to it exactly as the autoload does
in a classic driver, then holds it until its stdin says ``stop`` (the application ends: the
services get their last word and detach) or closes (the driver died: the process exits at
once, touching nothing in a JVM that is gone, and ``spark-steward gc`` collects what the
application owned, as after any crashed driver). It never stops the SparkContext.

Exit statuses, which the host logs: 0 after a stop; 3 when the driver went away; 4 when the
context did not start within :data:`CONTEXT_TIMEOUT`; 5 when the attach failed (the reason is
in the driver's log); 6 when the driver's JVM stopped answering through the gateway. After 4,
5 and 6 the host starts the runtime again after its back-off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import IO, Callable

log = logging.getLogger(__name__)

#: How long the runtime waits for the driver's SparkContext to finish starting.
CONTEXT_TIMEOUT = 300.0

EXIT_STOPPED, EXIT_DRIVER_GONE, EXIT_NO_CONTEXT, EXIT_ATTACH_FAILED = 0, 3, 4, 5
#: The driver's JVM stopped answering through the gateway while the lifeline stays open: the
#: host starts the runtime again with a new gateway.
EXIT_GATEWAY_LOST = 6

#: How often the runtime checks that the driver's JVM still answers, and after how many
#: failed checks in a row it gives up.
PROBE_INTERVAL = 5.0
PROBE_FAILURES = 3

#: What the host runs (``python -m MODULE``): this module's name, also when run as __main__.
MODULE = "spark_steward.kernel.host"

#: The driver JVM's pid, set by the host: this process's parent while the driver lives.
DRIVER_PID_ENV = "SPARK_STEWARD_DRIVER_PID"

#: The line the host writes to stop the runtime (``RuntimeHost.STOP_LINE``).
STOP_LINE = "stop"


def wait_for_stop(stdin: IO[str]) -> bool:
    """Blocks until the host's lifeline says ``stop`` (True) or closes (False)."""
    for line in stdin:
        if line.strip() == STOP_LINE:
            return True
    return False


def hold(stdin: IO[str], probe: Callable[[], object], *, interval: float = PROBE_INTERVAL,
         failures: int = PROBE_FAILURES) -> int | None:
    """Holds the runtime: None once the lifeline says ``stop``; :data:`EXIT_DRIVER_GONE` when
    it closes; :data:`EXIT_GATEWAY_LOST` when ``probe`` (a call into the driver's JVM) failed
    ``failures`` times in a row, every ``interval`` seconds."""
    said: list[bool] = []
    ended = threading.Event()

    def listen() -> None:
        said.append(wait_for_stop(stdin))
        ended.set()

    threading.Thread(target=listen, name="spark-steward-lifeline", daemon=True).start()
    failed = 0
    while not ended.wait(interval):
        try:
            probe()
            failed = 0
        except Exception:  # noqa: BLE001 - any failure of the gateway counts
            failed += 1
            if failed >= failures:
                return EXIT_GATEWAY_LOST
    return None if said[0] else EXIT_DRIVER_GONE


def main(stdin: IO[str] | None = None) -> int:
    """Attaches the runtime to the driver of this process's gateway and holds it (see above)."""
    stdin = stdin or sys.stdin
    if str(os.getppid()) != os.environ.get(DRIVER_PID_ENV):
        return EXIT_DRIVER_GONE  # the JVM that started us died before we ran (or none did)
    # No stderr handler: the runtime's logs go to the driver's log4j once it attaches; what
    # reaches stderr before (Python's last-resort handler, tracebacks) the host logs as WARN.
    from spark_steward.errors import StewardError
    from spark_steward.kernel import jvm, runtime

    sc = jvm.hosted_context(CONTEXT_TIMEOUT)
    if sc is None:
        print("spark-steward: the driver's SparkContext did not start (or is stopping); the "
              "runtime exits", file=sys.stderr)
        return EXIT_NO_CONTEXT
    try:
        attached = runtime.attach(sc, explicit=False, hosted=True)
    except StewardError as exc:
        log.error("spark-steward's driver runtime could not attach to %s: %s",
                  sc.applicationId, exc)
        return EXIT_ATTACH_FAILED
    ended = hold(stdin, lambda: jvm.ping(sc))
    if ended is not None:
        # The driver is gone, or its JVM no longer answers here: any call into it would hang
        # or fail. Gone, `spark-steward gc` collects what the application owned; still
        # running, the host starts a runtime again, which takes the application over.
        why = ("the driver is gone" if ended == EXIT_DRIVER_GONE
               else "the gateway to the driver stopped answering")
        try:  # to the host's pipe, which a dead driver no longer reads (EPIPE)
            print(f"spark-steward: the driver runtime exits ({why})", file=sys.stderr,
                  flush=True)
        finally:  # never a normal exit: its atexit detach would end the application
            os._exit(ended)
    if attached is not None:
        attached.before_context_stop()
    runtime.detach("the application ended (hosted runtime)")
    return EXIT_STOPPED


if __name__ == "__main__":
    sys.exit(main())
