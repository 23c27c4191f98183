"""Tells live, finished and crashed applications apart from their records.

Pure: the clock reading, the host name and the process probe are passed in, so the rules are
unit-tested without processes or storage.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable


class Liveness(enum.Enum):
    LIVE = "live"
    FINISHED = "finished"
    CRASHED = "crashed"


@dataclass(frozen=True)
class DriverIdentity:
    """Where an application's driver runs; ``pid_start`` guards against pid reuse."""

    host: str
    pid: int
    pid_start: int | None


ProcessProbe = Callable[[int, "int | None"], bool]


def classify(*, finished: bool, heartbeat_at: float, driver: DriverIdentity, now: float,
             heartbeat_timeout: float, this_host: str, process_alive: ProcessProbe) -> Liveness:
    """Liveness of one application.

    A finished record is final. On the driver's own host a vanished driver process means crashed
    at once; elsewhere a heartbeat older than ``heartbeat_timeout`` does.
    """
    if finished:
        return Liveness.FINISHED
    if driver.host == this_host and not process_alive(driver.pid, driver.pid_start):
        return Liveness.CRASHED
    if now - heartbeat_at > heartbeat_timeout:
        return Liveness.CRASHED
    return Liveness.LIVE
