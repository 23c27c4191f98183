"""Tells live, finished and crashed applications apart from their records.

Pure: the clock reading, where the caller runs and the process probe are passed in, so the rules
are unit-tested without processes or storage.

A pid names a process only inside one PID namespace of one boot of one host: a job runner in a
container that shares the host's name and network but not its PID namespace sees no process with
the driver's pid even while the driver runs. So the probe is asked only when hostname, boot id and
PID namespace all match the caller's; everywhere else, and for records that do not say where
their driver runs, the heartbeat decides.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

#: The driver identity a record written by this version carries (host, boot id, PID namespace,
#: pid, pid start). 0 is a record from before identities: only host, pid and pid start.
IDENTITY_FORMAT = 1
KNOWN_IDENTITY_FORMATS = frozenset({0, IDENTITY_FORMAT})


class Liveness(enum.Enum):
    LIVE = "live"
    FINISHED = "finished"
    CRASHED = "crashed"
    #: The record's driver identity is in a format this version does not know: left alone.
    UNKNOWN = "unknown"

    @property
    def dead(self) -> bool:
        """Whether what the application owns may be collected: only on proof of its end."""
        return self in (Liveness.FINISHED, Liveness.CRASHED)


@dataclass(frozen=True)
class Place:
    """Where a process runs, as far as its pid means anything: "" is unknown."""

    host: str
    boot_id: str = ""
    pid_ns: str = ""

    def shares_pids_with(self, other: "Place") -> bool:
        """True when a pid of one is the same process in the other: same host, same boot, same
        PID namespace, all three known."""
        return (bool(self.host and self.boot_id and self.pid_ns)
                and (self.host, self.boot_id, self.pid_ns)
                == (other.host, other.boot_id, other.pid_ns))


@dataclass(frozen=True)
class DriverIdentity:
    """Where an application's driver runs; ``pid_start`` guards against pid reuse."""

    host: str
    pid: int
    pid_start: int | None
    boot_id: str = ""
    pid_ns: str = ""

    @property
    def place(self) -> Place:
        """The host, boot and pid namespace the driver ran in."""
        return Place(self.host, self.boot_id, self.pid_ns)


ProcessProbe = Callable[[int, "int | None"], bool]


def classify(*, finished: bool, heartbeat_at: float, driver: DriverIdentity, now: float,
             heartbeat_timeout: float, here: Place, process_alive: ProcessProbe,
             identity_format: int = IDENTITY_FORMAT) -> Liveness:
    """Liveness of one application, seen from a process running at ``here``.

    A record whose identity format is unknown is UNKNOWN (never collected). A finished record is
    final. Where the caller shares the driver's host, boot and PID namespace, the process probe
    decides (a vanished driver is crashed at once, a running one is live). Elsewhere, and for
    records without that identity, a heartbeat older than ``heartbeat_timeout`` means crashed.
    """
    if identity_format not in KNOWN_IDENTITY_FORMATS:
        return Liveness.UNKNOWN
    if finished:
        return Liveness.FINISHED
    if identity_format == IDENTITY_FORMAT and driver.place.shares_pids_with(here):
        alive = process_alive(driver.pid, driver.pid_start)
        return Liveness.LIVE if alive else Liveness.CRASHED
    if now - heartbeat_at > heartbeat_timeout:
        return Liveness.CRASHED
    return Liveness.LIVE
