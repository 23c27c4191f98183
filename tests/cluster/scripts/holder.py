"""PID 1 of one harness host: sets the host up, then holds its namespaces until told to go.

Started by ``tests/cluster/harness.py`` as::

    ip netns exec NS unshare --uts --pid --mount --fork --mount-proc --propagation private \\
        python -I -S holder.py --root R --hostname H --tmp T --hosts-file F --resolv-file C \\
        --shared S --lifeline FD [--keep /tmp/PATH ...]

so it runs in the host's network namespace and is the init of fresh UTS, PID and mount
namespaces. It makes its mount namespace private, detaches the copies of ``/run/netns`` it
inherited (they would keep other harnesses' network namespaces alive), hides the harness root's
``hosts`` folder (other hosts' private dirs), bind-mounts the host's private ``/tmp``,
``/etc/hosts`` and ``/etc/resolv.conf`` and the shared dir (with each ``--keep`` path, which lies
under the machine's /tmp, bound at the same path inside the private one: a checkout or venv made
in /tmp), sets the hostname and turns IPv6
off. Then it prints ``ready`` (or ``error: <one line>`` and exits 1) and reaps orphans until
the owner's lifeline pipe closes (the owner died or closed the cluster) or it is SIGKILLed.
When it exits the kernel kills every other process of the host: it is the pid namespace's init.

Standard library only, no site-packages (``-S``): it must start in milliseconds.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import socket
import sys

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL("libc.so.6", use_errno=True)  # find_library would fork ldconfig


class SetupError(Exception):
    pass


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(errno)}")


def mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None
          ) -> None:
    _check(_libc.mount(source.encode(), target.encode(),
                       fstype.encode() if fstype else None, flags,
                       data.encode() if data else None),
           f"mount {source} on {target}")


def umount_lazy(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


def mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f]


def setup(args: argparse.Namespace) -> None:
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    # Copies of other hosts' (and other harnesses') /run/netns/* bind mounts: drop them all,
    # deepest first, so this mount namespace pins no network namespace but its own.
    for point in sorted((p for p in mount_points()
                         if p == "/run/netns" or p.startswith("/run/netns/")),
                        key=len, reverse=True):
        try:
            umount_lazy(point)
        except SetupError:
            pass  # already gone with its parent
    for kept in args.keep:  # bound into the private /tmp before it hides the machine's
        inside = os.path.join(args.tmp, os.path.relpath(kept, "/tmp"))
        if os.path.isdir(kept):
            os.makedirs(inside, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            open(inside, "a").close()
        mount(kept, inside, None, MS_BIND | MS_REC)
    mount(args.tmp, "/tmp", None, MS_BIND | MS_REC)
    mount(args.hosts_file, "/etc/hosts", None, MS_BIND)
    mount(args.resolv_file, "/etc/resolv.conf", None, MS_BIND)
    mount(args.shared, args.shared, None, MS_BIND)
    # The rest of the harness root (every host's private dir) is not this host's business.
    mount("none", os.path.join(args.root, "hosts"), "tmpfs",
          MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    socket.sethostname(args.hostname)
    for key in ("all", "default"):
        try:
            with open(f"/proc/sys/net/ipv6/conf/{key}/disable_ipv6", "w") as f:
                f.write("1")
        except OSError:
            pass  # no IPv6 in this kernel: nothing to turn off


def reap(*_: object) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--root", "--hostname", "--tmp", "--hosts-file", "--resolv-file", "--shared"):
        parser.add_argument(name, required=True)
    parser.add_argument("--lifeline", type=int, required=True)
    parser.add_argument("--keep", action="append", default=[],
                        help="a path under /tmp every process of the host must see as it is")
    args = parser.parse_args()
    try:
        if os.getpid() != 1:
            raise SetupError(f"not the init of a new pid namespace (pid {os.getpid()})")
        setup(args)
    except (SetupError, OSError) as e:
        print(f"error: {e}".replace("\n", " "), flush=True)
        sys.exit(1)
    signal.signal(signal.SIGCHLD, reap)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)  # only SIGKILL or the lifeline end a host
    print("ready", flush=True)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # the owner stops reading: never block on a full pipe
    os.close(null)
    while True:
        ready, _, _ = select.select([args.lifeline], [], [])
        if ready and not os.read(args.lifeline, 64):
            os._exit(0)  # the owner is gone: the kernel kills the rest of the host


if __name__ == "__main__":
    main()
