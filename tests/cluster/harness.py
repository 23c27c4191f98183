"""A multi-host Spark standalone cluster on one Linux machine, for tests and benchmarks.

What it models: a small data centre. Every *host* (``driver``, ``master``, ``w1``..``wN`` and,
with ``s3=True``, ``s3``) is a set of Linux namespaces held open by one holder process
(``scripts/holder.py``), the init of the host's PID namespace:

- network namespace: the host has its own ``lo`` and an ``eth0`` on a private bridge, address
  ``198.18.<k>.x/24`` and no default route, so hosts talk to each other (and the test process,
  which reaches them through the bridge at ``198.18.<k>.1``) exactly as separate machines would,
  over a link that :meth:`Cluster.shape` can slow down (tc tbf + netem, both directions), and
  can reach nothing else;
- UTS namespace: its own host name (``sst-w1``), which Spark and Python report;
- PID namespace: the host's processes see only each other, and SIGKILL of the holder kills all
  of them at once (:meth:`Cluster.kill_host` is a machine losing power);
- mount namespace (private): its own ``/tmp`` (Spark's local dirs, worker dirs, Python's
  tempfiles: the host-local disk), its own ``/etc/hosts`` naming every host (Java resolves its
  own host name at start-up), and the shared dir mounted at the same path on every host, as an
  NFS export would be. The rest of the file system (the OS, Java, site-packages, this repo) is
  the machine's, the same on every host, as an image would be: where the checkout, the Python
  environment, pyspark or a ``PYTHONPATH`` entry lies under ``/tmp`` (a clone and a venv made
  there), each host sees it through its private ``/tmp`` too (:func:`kept_paths`).

Spark runs from the pip pyspark's jars: a standalone master on host ``master`` and one worker
per worker host, started with ``java`` directly (``SPARK_HOME``, ``SPARK_SCALA_VERSION``,
``SPARK_LOCAL_IP`` set as ``spark-class`` would), and :meth:`Cluster.submit` runs
``spark-submit`` on host ``driver``; every daemon and the driver bind to their host's address.

Everything lives under ``/var/tmp/spark-steward-harness/<k>/`` (not /tmp: hosts replace /tmp),
with an ``owner.json`` naming the owning process (which holds ``owner.lock``). ``close()`` removes every namespace, link,
qdisc, mount, process and file it made; it also runs on exceptions, Ctrl-C, SIGTERM (turned into
:class:`Terminated` while a cluster is open) and at exit. A SIGKILLed owner cannot clean up: its
holders die with it (they watch a lifeline pipe) and the next ``start()`` sweeps the rest.

The machine needs root, iproute2 (``ip``, ``tc``), util-linux (``unshare``, ``nsenter``) and
Java; :func:`unavailable` says in one line what is missing. Network traffic goes only to
loopback and to harness hosts in 198.18.0.0/15 (RFC 2544 benchmarking addresses).

Usage::

    with Cluster(workers=3, link=Link(rate_mbit=1000), s3=True) as cluster:
        done = cluster.submit("job.py", "arg", conf={"spark.executor.cores": "1"})
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import importlib.util
import ipaddress
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, TYPE_CHECKING, Any, Callable

__all__ = ["Cluster", "HarnessError", "HostProcess", "Link", "Terminated", "delay_unavailable",
           "leftovers", "sweep_stale", "unavailable"]

BASE = Path("/var/tmp/spark-steward-harness")
HOLDER = Path(__file__).resolve().parent / "scripts" / "holder.py"
NETWORK = ipaddress.ip_network("198.18.0.0/15")
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
S3_PORT = 5000
# Daemons only: quick start matters more than peak JIT throughput (executors keep Spark's).
DAEMON_JAVA_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
_NAME = re.compile(r"^sst(\d{1,3})(?:br|-[a-z0-9]+)$")
_PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy"}
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy

if TYPE_CHECKING:
    _PopenBase = subprocess.Popen[Any]
else:
    _PopenBase = subprocess.Popen


# -- public types ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Link:
    """A host's network link, applied to both directions of its ``eth0``.

    ``rate_mbit`` caps each direction (tc tbf); ``delay_ms`` is added one way in each direction
    (tc netem), so two shaped hosts see a one-way delay of the sum of their two delays and a
    round trip of twice that; 0 is no delay. ``Link()`` is an unshaped link (veth speed).
    Kernels without netem cannot delay: :func:`delay_unavailable` says so beforehand, and
    shaping with a delay there fails with ``link: delay_ms needs the netem qdisc...``."""

    rate_mbit: float | None = None
    delay_ms: float | None = None

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and not self.rate_mbit > 0:
            raise ValueError(f"Link.rate_mbit must be positive or None, not {self.rate_mbit!r}")
        if self.delay_ms is not None and not self.delay_ms >= 0:
            raise ValueError(f"Link.delay_ms must be >= 0 or None, not {self.delay_ms!r}")


class HarnessError(Exception):
    """A harness step failed. ``str(e)`` is one line that starts with the step (``namespace``,
    ``link``, ``mount``, ``master``, ``worker w2``, ``s3``, ``teardown``...) so a skipped or
    failed test says what broke; ``log`` holds the tail of the failing process's log."""

    def __init__(self, step: str, detail: str, log: str = "") -> None:
        self.step = step
        self.detail = _one_line(detail)
        self.log = log
        super().__init__(f"{step}: {self.detail}")


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a cluster was open. A KeyboardInterrupt, so that pytest and
    ordinary scripts stop (and unwind through ``with`` blocks, closing clusters) as on Ctrl-C,
    instead of treating it as one failed test and carrying on."""


class HostProcess(_PopenBase):
    """A process run on a harness host through ``nsenter``. ``pid`` is nsenter's, which waits
    for the real process and exits as it does; signals (``terminate``, ``kill``, ``send_signal``
    and so timeouts) go to the real process, not to nsenter, which would not forward them."""

    host: str = ""

    def inner_pid(self) -> int | None:
        """The real process's pid (as seen from the root namespaces), once nsenter forked it."""
        children = _children(self.pid)
        return children[0] if children else None

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is not None:
            return
        inner = self.inner_pid()
        if inner is None:
            super().send_signal(sig)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(inner, sig)


# -- availability ----------------------------------------------------------------------------

_UNAVAILABLE: list[str | None] = []


def unavailable() -> str | None:
    """``None`` when a harness can run here, else one line saying why not (checked once per
    process: root, the tools, Java, pyspark, and that ``ip netns add`` and ``unshare`` work)."""
    if not _UNAVAILABLE:
        _UNAVAILABLE.append(_check_available())
    return _UNAVAILABLE[0]


def _check_available() -> str | None:
    if not sys.platform.startswith("linux"):
        return f"needs Linux namespaces, not {sys.platform}"
    if os.geteuid() != 0:
        return "not root: namespaces, bridges and mounts need root"
    for tool in ("ip", "tc", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            package = "iproute2" if tool in ("ip", "tc") else "util-linux"
            return f"`{tool}` missing (apt-get install {package})"
    if _find_java() is None:
        return "`java` missing (set JAVA_HOME or put java on PATH)"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark missing (pip install pyspark)"
    probe = f"sstprobe{os.getpid()}"
    done = _cmd(["ip", "netns", "add", probe])
    if done.returncode != 0:
        return f"`ip netns add` fails: {_one_line(done.stderr) or done.returncode}"
    try:
        done = _cmd(["ip", "netns", "exec", probe, "unshare", "--uts", "--pid", "--mount",
                     "--fork", "--mount-proc", "--propagation", "private", "true"])
        if done.returncode != 0:
            return f"`unshare --pid --mount --uts` fails: {_one_line(done.stderr)}"
    finally:
        _cmd(["ip", "netns", "del", probe])
    return None


_NO_NETEM = "the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM)"
_DELAY_UNAVAILABLE: list[str | None] = []


def delay_unavailable() -> str | None:
    """``None`` when :class:`Link` ``delay_ms`` works here, else why not: delays need tc's
    netem qdisc, which some kernels (e.g. minimal VM kernels) leave out. Rates need only tbf.
    Checked once per process, in a scratch network namespace."""
    if not _DELAY_UNAVAILABLE:
        reason = unavailable()
        if reason is None:
            probe = f"sstprobe{os.getpid()}"
            done = _cmd(["ip", "netns", "add", probe])
            if done.returncode != 0:
                reason = f"`ip netns add` fails: {_one_line(done.stderr)}"
            else:
                try:
                    done = _cmd(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root",
                                 "netem", "delay", "1ms"])
                    if done.returncode != 0:
                        reason = (f"needs {_NO_NETEM}" if "kind is unknown" in done.stderr
                                  else f"tc netem fails: {_one_line(done.stderr)}")
                finally:
                    _cmd(["ip", "netns", "del", probe])
        _DELAY_UNAVAILABLE.append(reason)
    return _DELAY_UNAVAILABLE[0]


def _find_java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


# -- the cluster -----------------------------------------------------------------------------

@dataclass
class _Host:
    name: str
    address: str
    netns: str
    veth: str
    dir: Path
    holder: int | None = None  # root-namespace pid of the holder (the host's PID 1)
    holder_start: int | None = None
    pidns: int | None = None  # inode of the host's pid namespace
    launcher: subprocess.Popen[bytes] | None = None  # `ip netns exec ... unshare` (holder's parent)
    services: dict[str, HostProcess] = field(default_factory=dict)
    logs: list[IO[bytes]] = field(default_factory=list)

    @property
    def tmp(self) -> Path:
        return self.dir / "tmp"


def _environment_paths() -> list[Path]:
    """Where the hosts' processes load code from: this checkout, the Python environment (and
    the one it was made from), its site-packages, pyspark (Spark's jars) and ``PYTHONPATH``."""
    import sysconfig

    paths = [Path(__file__).resolve().parents[2], Path(sys.prefix), Path(sys.base_prefix),
             Path(sys.executable).resolve().parent]
    paths += [Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")]
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        paths.append(Path(spec.origin).parent)
    paths += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return paths


def kept_paths(paths: Iterable[Path]) -> list[Path]:
    """The paths under ``/tmp`` among ``paths`` (resolved, existing), without those inside
    another: each host's private ``/tmp`` would hide them, so its holder binds them in place."""
    tmp = Path("/tmp")
    found: set[Path] = set()
    for path in paths:
        real = Path(os.path.realpath(path))
        if tmp in real.parents and real.exists():
            found.add(real)
    return sorted(p for p in found if not any(other in p.parents for other in found))


class Cluster:
    """A Spark standalone cluster of separate emulated hosts; see the module docstring.

    ``Cluster(workers=3, link=None, worker_cores=1, worker_memory="1g", s3=False)`` creates
    nothing until :meth:`start` (or ``with``). ``spark=False`` makes the hosts without starting
    the master and workers (for harness tests); ``java`` overrides the Java binary;
    ``start_timeout`` bounds each wait of the start-up. ``keep`` names more paths under
    ``/tmp`` every host must see as they are. ``class_cache`` lets the master and
    workers start from a class-data-sharing archive of Spark's classes (made by the first
    cluster of a machine at its close, kept under ``/var/tmp/spark-steward-harness/cds``):
    about a third less JVM start-up. ``spark_conf_dir`` is every host process's
    SPARK_CONF_DIR (the drivers' and, through the workers, the executors' class path: an
    empty one lets them map the test JVMs' own archive, tests/support/class_cache.py)."""

    def __init__(self, workers: int = 3, link: Link | None = None, worker_cores: int = 1,
                 worker_memory: str = "1g", s3: bool = False, *, spark: bool = True,
                 java: str | None = None, start_timeout: float = 120.0,
                 class_cache: bool = True, keep: Sequence[Path] = (),
                 spark_conf_dir: Path | None = None) -> None:
        if not 1 <= workers <= 200:
            raise ValueError(f"workers must be 1..200, not {workers}")
        self._n_workers = workers
        self._link = link
        self._worker_cores = worker_cores
        self._worker_memory = worker_memory
        self._s3 = s3
        self._spark = spark
        self._java = java
        self._timeout = start_timeout
        self._class_cache = class_cache
        self._spark_conf_dir = spark_conf_dir
        self._keep = kept_paths([*_environment_paths(), *keep])
        self._cds_dump: Path | None = None  # where this cluster's master dumps its classes
        self._k: int | None = None
        self._hosts: dict[str, _Host] = {}
        self._lifeline: tuple[int, int] | None = None
        self._owner = os.getpid()
        self._owner_lock: int | None = None
        self._state = "new"  # new -> starting -> started -> closed
        self._lock = threading.RLock()
        self.timings: dict[str, float] = {}
        """Seconds each start-up phase took (``network``, ``holders``, ``master``,
        ``workers``, ``s3``, ``start``) and, after close, ``close``."""

    # -- facts ---------------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        """``sst<k>``: the prefix of this harness's namespaces and links (for :func:`leftovers`)."""
        return f"sst{self._need_k()}"

    @property
    def root(self) -> Path:
        """The harness root dir (per-host dirs, logs, the shared dir, owner.json)."""
        return BASE / str(self._need_k())

    @property
    def shared(self) -> Path:
        """A dir every host (and the test process) sees at this same path: shared storage."""
        return self.root / "shared"

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host's name: ``driver``, ``master``, ``w1``..``wN`` and ``s3`` if asked for."""
        return tuple(self._hosts) if self._hosts else self._host_names()

    @property
    def workers(self) -> tuple[str, ...]:
        """The worker hosts' names, ``w1``..``wN``."""
        return tuple(f"w{i}" for i in range(1, self._n_workers + 1))

    @property
    def spark(self) -> bool:
        """Whether this cluster runs Spark's master and workers (``spark=True``, the default)."""
        return self._spark

    @property
    def gateway(self) -> str:
        """The test process's own address on the bridge (hosts see its connections from it)."""
        return f"198.18.{self._need_k()}.1"

    def address(self, host: str) -> str:
        """The IPv4 address of ``host`` (reachable from the test process and every host)."""
        return self._host(host).address

    def hostname(self, host: str) -> str:
        """The host name ``host`` reports (``sst-w1``); every host's /etc/hosts resolves it."""
        self._host(host)
        return f"sst-{host}"

    @property
    def master_url(self) -> str:
        """``spark://<master address>:7077``."""
        return f"spark://{self.address('master')}:{MASTER_PORT}"

    @property
    def master_ui(self) -> str:
        """The master's web UI (``/json/`` lists workers and applications)."""
        return f"http://{self.address('master')}:{MASTER_UI_PORT}"

    @property
    def s3_endpoint(self) -> str:
        """``http://<s3 host>:5000``: the moto S3 server on host ``s3`` (``s3=True`` only)."""
        if not self._s3:
            raise HarnessError("s3", "this cluster was made without s3=True")
        return f"http://{self.address('s3')}:{S3_PORT}"

    @property
    def s3_env(self) -> dict[str, str]:
        """AWS variables that point boto3/s3fs at the harness's S3 (empty without s3). Every
        process run on a host gets them by default; the test process can use them too."""
        if not self._s3:
            return {}
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.s3_endpoint,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def host_path(self, host: str, path: str | os.PathLike[str]) -> Path:
        """Where the file ``path`` of ``host`` is in the root namespace: ``/tmp/...`` maps into
        the host's private /tmp, a path in :attr:`shared` is itself."""
        h = self._host(host)
        p = Path(path)
        if not p.is_absolute():
            raise ValueError(f"host_path needs an absolute path, not {str(p)!r}")
        if p == Path("/tmp") or Path("/tmp") in p.parents:
            return h.tmp / p.relative_to("/tmp")
        if p == self.shared or self.shared in p.parents:
            return p
        raise ValueError(f"{str(p)!r} is neither in a host's private /tmp nor in {self.shared}")

    def master_state(self) -> dict[str, Any]:
        """The master's ``/json/`` (workers with id, host and state; applications; status),
        fetched over the bridge."""
        try:
            state = self._master_json()
        except (OSError, ValueError) as e:
            raise HarnessError("master", f"{self.master_ui}/json/ unreachable: {e}") from None
        if state is None:
            raise HarnessError("master", f"{self.master_ui}/json/ is not a JSON object")
        return state

    def alive_workers(self) -> list[str]:
        """The worker hosts the master lists as ALIVE now, in ``workers`` order."""
        alive = {str(w.get("host")) for w in self._master_workers()
                 if w.get("state") == "ALIVE"}
        return [w for w in self.workers if self._hosts[w].address in alive]

    def holder_pid(self, host: str) -> int:
        """Root-namespace pid of ``host``'s holder (``nsenter -t PID -a`` enters the host)."""
        h = self._host(host)
        if h.holder is None:
            raise HarnessError(f"host {host}", "is down (killed and not restarted)")
        return h.holder

    def log_path(self, host: str, service: str) -> Path:
        """The log of a harness service (``master``, ``worker``, ``s3``, ``holder``) on a host,
        until close() removes the harness root."""
        return self._host(host).dir / f"{service}.log"

    # -- life cycle ----------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
            return
        try:
            self.close()
        except HarnessError as e:  # keep the body's exception; say what teardown left
            print(f"spark-steward harness: {e}", file=sys.stderr)

    def start(self) -> Cluster:
        """Sweeps stale harnesses, then makes the hosts and starts the services; returns self.
        On any failure (or interrupt) everything made so far is removed before the
        :class:`HarnessError` (or the interrupt) propagates."""
        with self._lock:
            if self._state == "started":
                return self
            if self._state != "new":
                raise HarnessError("cluster", f"cannot start a cluster that is {self._state}")
            reason = _check_tools()
            if reason:
                raise HarnessError("namespace", reason)
            self._state = "starting"
            _register_open(self)
        began = time.monotonic()
        try:
            sweep_stale()
            self._claim()
            self._make_network()
            self._start_holders(list(self._hosts))
            if self._link is not None:
                for host in self._hosts:
                    self.shape(host, self._link)
            self._start_services()
        except BaseException:
            try:
                self.close()
            except HarnessError as e:
                print(f"spark-steward harness: {e}", file=sys.stderr)
            raise
        self.timings["start"] = time.monotonic() - began
        self._state = "started"
        return self

    def close(self) -> None:
        """Kills every host, removes the namespaces, links (and so qdiscs), mounts and the
        harness root, then checks that nothing is left (else HarnessError ``teardown: ...``).
        Idempotent; a no-op in a forked child of the owner."""
        with self._lock:
            if self._state == "closed" or os.getpid() != self._owner:
                return
            if self._k is None:
                self._state = "closed"
                _unregister_open(self)
                return
            began = time.monotonic()
            problems: list[str] = []
            with _deferred_signals():
                try:
                    with contextlib.suppress(OSError, HarnessError):
                        self._save_class_cache()
                    hosts = list(self._hosts.values())
                    for h in hosts:
                        _signal_holder(h)
                    if self._lifeline is not None:
                        for fd in self._lifeline:
                            with contextlib.suppress(OSError):
                                os.close(fd)
                        self._lifeline = None
                    for h in hosts:
                        try:
                            _wait_host_empty(h)
                        except HarnessError as e:
                            problems.append(e.detail)
                    problems += _destroy(self._k)
                    for h in hosts:
                        _reap_host(h)
                finally:
                    self._state = "closed"
                    if self._owner_lock is not None:
                        os.close(self._owner_lock)
                        self._owner_lock = None
                    _unregister_open(self)
                left = leftovers(self.prefix)
            self.timings["close"] = time.monotonic() - began
            if left or problems:
                raise HarnessError("teardown", "; ".join(problems + left))

    # -- running things on hosts ---------------------------------------------------------

    def popen(self, host: str, argv: Sequence[str | os.PathLike[str]], *,
              env: Mapping[str, str] | None = None, cwd: str = "/tmp",
              **kw: Any) -> HostProcess:
        """Starts ``argv`` on ``host`` (its network, UTS, PID and mount namespaces; ``cwd`` is
        resolved inside the host). ``env`` adds to the host's base environment (the test
        process's, less proxy and SPARK_* variables, plus SPARK_HOME, SPARK_LOCAL_IP,
        PYSPARK_PYTHON and the S3 variables). Other keywords go to :class:`subprocess.Popen`;
        ``start_new_session`` defaults to True so a terminal's Ctrl-C reaches only the owner,
        which then tears everything down."""
        h = self._host(host)
        if self._state == "closed":
            raise HarnessError(f"host {host}", "the cluster is closed")
        if h.holder is None:
            raise HarnessError(f"host {host}", "is down (killed and not restarted)")
        if _start_time(h.holder) != h.holder_start:  # never nsenter a reused pid
            raise HarnessError(f"host {host}", f"is down: its holder {h.holder} died")
        full = ["nsenter", "-t", str(h.holder), "--net", "--uts", "--pid", "--mount",
                f"--wdns={cwd}", "--", *map(str, argv)]
        kw.setdefault("start_new_session", True)
        kw.setdefault("stdin", subprocess.DEVNULL)
        proc = HostProcess(full, env=self._env(h, env), **kw)
        proc.host = host
        return proc

    def run(self, host: str, argv: Sequence[str | os.PathLike[str]], *,
            env: Mapping[str, str] | None = None, timeout: float | None = None,
            input: str | None = None, cwd: str = "/tmp", check: bool = False
            ) -> subprocess.CompletedProcess[str]:
        """Runs ``argv`` on ``host`` to the end and returns its text output (like
        :func:`subprocess.run` with ``capture_output=True, text=True``). On timeout the
        process is killed and :class:`subprocess.TimeoutExpired` raised."""
        with self.popen(host, argv, env=env, cwd=cwd, text=True, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        stdin=subprocess.DEVNULL if input is None else subprocess.PIPE) as proc:
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired([str(a) for a in argv], timeout or 0, out,
                                                err) from None
            except BaseException:
                proc.kill()
                raise
        done = subprocess.CompletedProcess([str(a) for a in argv], proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    def submit(self, script: str | os.PathLike[str], *args: str | os.PathLike[str],
               conf: Mapping[str, str] | Sequence[str] = (), timeout: float | None = 300,
               env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``spark-submit`` of ``script`` on the driver host against this cluster's master,
        with the driver bound to the driver host's address and no UI. ``conf`` is a mapping of
        ``--conf`` keys or a list of raw arguments (e.g. ``spark-steward conf`` output)."""
        return self.run("driver", self._submit_argv(script, args, conf), env=env,
                        timeout=timeout)

    def submit_background(self, script: str | os.PathLike[str], *args: str | os.PathLike[str],
                          conf: Mapping[str, str] | Sequence[str] = (),
                          env: Mapping[str, str] | None = None, **kw: Any) -> HostProcess:
        """:meth:`submit` without waiting: a :class:`HostProcess` (text mode, stdout and
        stderr piped unless given in ``kw``)."""
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return self.popen("driver", self._submit_argv(script, args, conf), env=env, **kw)

    # -- faults and links ----------------------------------------------------------------

    def kill_host(self, host: str) -> None:
        """SIGKILLs every process of ``host`` at once (its holder, so the kernel kills the rest
        of its pid namespace) and waits until none is left. The host's network namespace,
        address, link shaping and private /tmp stay, as a powered-off machine's disk would."""
        h = self._host(host)
        with self._lock:
            _signal_holder(h)
            _wait_host_empty(h)
            _reap_host(h)

    def restart_worker(self, host: str) -> None:
        """Brings a worker host back after :meth:`kill_host` (killing it first if it is still
        up): a new holder with the same private /tmp and address, and a new worker process,
        registered with the master before this returns."""
        if host not in self.workers:
            raise ValueError(f"{host!r} is not a worker host: {', '.join(self.workers)}")
        h = self._host(host)
        with self._lock:
            if h.holder is not None:
                self.kill_host(host)
            before = {w["id"] for w in self._master_workers()} if self._spark else set()
            self._start_holders([host])
            if self._spark:
                self._start_worker(h)
                self._wait_workers([h], exclude_ids=before)

    def shape(self, host: str, link: Link) -> None:
        """Shapes both directions of ``host``'s link (egress of its ``eth0`` inside the host
        and egress of the bridge-side veth): tbf for ``rate_mbit``, netem for ``delay_ms``.
        ``Link()`` removes the shaping."""
        h = self._host(host)
        for netns, dev in ((h.netns, "eth0"), (None, h.veth)):
            _set_qdisc(netns, dev, link)

    # -- internals: start-up -------------------------------------------------------------

    def _host_names(self) -> tuple[str, ...]:
        return ("driver", "master", *self.workers, *(("s3",) if self._s3 else ()))

    def _need_k(self) -> int:
        if self._k is None:
            raise HarnessError("cluster", "not started (call start() or use `with Cluster(...)`)")
        return self._k

    def _host(self, host: str) -> _Host:
        self._need_k()
        try:
            return self._hosts[host]
        except KeyError:
            raise ValueError(f"no host {host!r}: hosts are {', '.join(self._hosts)}") from None

    def _claim(self) -> None:
        """Picks a free k (no 198.18.k.0/24 use, no sst<k> name, no root dir) and makes the
        root dir with owner.json, under the harness lock so two runs never pick the same k."""
        with _harness_lock():
            used = _used_ks()
            free = [k for k in range(1, 255) if k not in used]
            if not free:
                raise HarnessError("namespace", "no free 198.18.<k>.0/24 for k in 1..254")
            k = free[0]
            root = BASE / str(k)
            root.mkdir(mode=0o755)
            self._k = k  # from here on close() removes it, whatever fails next
            # Held until this process ends: the kernel drops it even on SIGKILL, so a sweeper
            # can tell a dead owner from a live one in any pid namespace. owner.json is the
            # fallback (and says who it is to a person).
            self._owner_lock = os.open(root / "owner.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self._owner_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            owner = {"pid": os.getpid(), "start_time": _start_time(os.getpid()),
                     "boot_id": _boot_id(), "argv": sys.argv, "created": time.time()}
            (root / "owner.json").write_text(json.dumps(owner))
        (root / "shared").mkdir(mode=0o777)
        os.chmod(root / "shared", 0o1777)
        (root / "hosts").mkdir()
        names = self._host_names()
        for i, name in enumerate(names):
            h = _Host(name=name, address=f"198.18.{k}.{i + 2}", netns=f"sst{k}-{name}",
                      veth=f"sst{k}-{name}", dir=root / "hosts" / name)
            if len(h.veth) > 15:
                raise HarnessError("link", f"link name {h.veth!r} is longer than 15 characters")
            self._hosts[name] = h
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{h.address} sst-{h.name} {h.name}" for h in self._hosts.values()]
        for h in self._hosts.values():
            h.tmp.mkdir(parents=True)
            os.chmod(h.tmp, 0o1777)
            (h.dir / "hosts").write_text("\n".join(lines) + "\n")
            # No name server: names outside /etc/hosts fail at once, on the host's loopback.
            (h.dir / "resolv.conf").write_text("# spark-steward harness: /etc/hosts only\n"
                                               "nameserver 127.0.0.1\noptions timeout:1 "
                                               "attempts:1\n")

    def _make_network(self) -> None:
        began = time.monotonic()
        k = self._need_k()
        bridge = f"sst{k}br"
        hosts = list(self._hosts.values())
        _ip_batch("namespace", [f"netns add {h.netns}" for h in hosts])
        _ip_batch("link", [f"link add {bridge} type bridge"]
                  + [f"link add {h.veth} type veth peer name eth0 netns {h.netns}"
                     for h in hosts])
        # No IPv6 link-local addresses, so no IPv6 chatter at all; best effort (a kernel
        # without IPv6 has none to turn off).
        _cmd(["ip", "-force", "-batch", "-"], input="".join(
            f"link set {dev} addrgenmode none\n" for dev in [bridge] + [h.veth for h in hosts]))
        _ip_batch("link", [f"addr add 198.18.{k}.1/24 dev {bridge}", f"link set {bridge} up"]
                  + [f"link set {h.veth} master {bridge}" for h in hosts]
                  + [f"link set {h.veth} up" for h in hosts])
        for h in hosts:
            _cmd(["ip", "-n", h.netns, "link", "set", "eth0", "addrgenmode", "none"])
            _ip_batch("link", [f"addr add {h.address}/24 dev eth0",
                               "link set lo up", "link set eth0 up"], netns=h.netns)
        self.timings["network"] = time.monotonic() - began

    def _start_holders(self, names: list[str]) -> None:
        began = time.monotonic()
        if self._lifeline is None:
            self._lifeline = os.pipe()
        read_end = self._lifeline[0]
        started: list[_Host] = []
        for name in names:
            h = self._hosts[name]
            log = open(h.dir / "holder.log", "ab")
            h.logs.append(log)
            argv = ["ip", "netns", "exec", h.netns, "unshare", "--uts", "--pid", "--mount",
                    "--fork", "--mount-proc", "--propagation", "private", sys.executable, "-I",
                    "-S", str(HOLDER), "--root", str(self.root), "--hostname", f"sst-{name}",
                    "--tmp", str(h.tmp), "--hosts-file", str(h.dir / "hosts"),
                    "--resolv-file", str(h.dir / "resolv.conf"), "--shared", str(self.shared),
                    "--lifeline", str(read_end),
                    *(arg for path in self._keep for arg in ("--keep", str(path)))]
            h.launcher = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                pass_fds=(read_end,), start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
                     "LANG": "C.UTF-8"})
            started.append(h)
        deadline = time.monotonic() + 30
        for h in started:
            assert h.launcher is not None and h.launcher.stdout is not None
            line = _read_line(h.launcher.stdout, deadline)
            h.launcher.stdout.close()
            if line != "ready":
                tail = _tail(h.dir / "holder.log")
                if line.startswith("error: "):
                    detail = line[len("error: "):]
                    step = "namespace" if detail.startswith("not the init") else "mount"
                else:
                    step, detail = "namespace", (f"holder exited with code "
                                                 f"{h.launcher.poll()}" if line == "" else
                                                 f"holder said {line!r}")
                raise HarnessError(step, f"host {h.name}: {detail}: {_last_lines(tail)}",
                                   tail)
            children = _children(h.launcher.pid)
            if len(children) != 1:
                raise HarnessError("namespace", f"host {h.name}: cannot find the holder "
                                   f"under pid {h.launcher.pid}")
            h.holder = children[0]
            h.holder_start = _start_time(h.holder)
            h.pidns = os.stat(f"/proc/{h.holder}/ns/pid").st_ino
        self.timings["holders"] = time.monotonic() - began

    def _start_services(self) -> None:
        if self._s3:
            self._start_s3()
        if self._spark:
            began = time.monotonic()
            self._start_master()
            self.timings["master"] = time.monotonic() - began
            began = time.monotonic()
            hosts = [self._hosts[w] for w in self.workers]
            for h in hosts:
                self._start_worker(h)
            self._wait_workers(hosts, exclude_ids=set())
            self.timings["workers"] = time.monotonic() - began
        if self._s3:
            began = time.monotonic()
            self._wait_s3()
            self.timings["s3"] = time.monotonic() - began

    def _service(self, host: str, service: str, argv: Sequence[str]) -> HostProcess:
        h = self._hosts[host]
        log = open(h.dir / f"{service}.log", "ab")
        h.logs.append(log)
        proc = self.popen(host, argv, stdout=log, stderr=subprocess.STDOUT)
        h.services[service] = proc
        return proc

    def _java_argv(self, role: str) -> list[str]:
        java = self._java or _find_java()
        if java is None:
            raise HarnessError("master", "`java` missing (set JAVA_HOME or put java on PATH)")
        argv = [java, "-cp", str(_spark_home() / "jars" / "*"), *DAEMON_JAVA_OPTS]
        if self._class_cache:
            archive = _cds_archive(java)
            if archive is None:
                pass
            elif archive.is_file():
                # A stale or foreign archive only costs a warning in the log: -Xshare:auto.
                argv.append(f"-XX:SharedArchiveFile={archive}")
            elif role == "master" and self._cds_dump is None:
                self._cds_dump = self.root / "classes.jsa"
                argv.append(f"-XX:ArchiveClassesAtExit={self._cds_dump}")
        return argv

    def _save_class_cache(self) -> None:
        """Stops the master gracefully so its JVM dumps the classes it loaded (Spark's RPC,
        Netty, Jetty, Scala: most of what a worker loads too) and keeps the archive for the
        next clusters. Costs this close a second or two, once per machine and Java/Spark."""
        if self._cds_dump is None or self._state != "started":
            return
        master = self._hosts["master"].services.get("master")
        if master is None or master.poll() is not None:
            return
        master.terminate()
        try:
            master.wait(30)
        except subprocess.TimeoutExpired:
            return
        java = self._java or _find_java()
        archive = _cds_archive(java) if java else None
        if archive is not None and self._cds_dump.is_file() and self._cds_dump.stat().st_size:
            archive.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._cds_dump, archive)  # atomic: concurrent clusters never see half

    def _start_master(self) -> None:
        master = self._hosts["master"]
        proc = self._service("master", "master", [
            *self._java_argv("master"), "-Dspark.master.rest.enabled=false",
            "org.apache.spark.deploy.master.Master", "--host", master.address,
            "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)])
        # Workers retry a refused registration only after 5-15 s: wait until the master is
        # elected (its JSON says ALIVE) before starting them.
        deadline = time.monotonic() + self._timeout
        while True:
            code = proc.poll()
            if code is not None:
                self._fail("master", "master", f"exited with code {code} before serving")
            state = self._master_json(quiet=True)
            if state is not None and state.get("status") == "ALIVE":
                return
            if time.monotonic() > deadline:
                self._fail("master", "master", f"not ALIVE at {self.master_ui}/json/ within "
                           f"{self._timeout:.0f}s")
            time.sleep(0.05)

    def _start_worker(self, h: _Host) -> None:
        self._service(h.name, "worker", [
            *self._java_argv("worker"), "org.apache.spark.deploy.worker.Worker",
            "--host", h.address, "--cores", str(self._worker_cores),
            "--memory", self._worker_memory, "--work-dir", "/tmp/spark-work",
            "--webui-port", str(WORKER_UI_PORT), self.master_url])

    def _wait_workers(self, hosts: list[_Host], exclude_ids: set[str]) -> None:
        deadline = time.monotonic() + self._timeout
        waiting = {h.address: h for h in hosts}
        while True:
            for h in waiting.values():
                code = h.services["worker"].poll()
                if code is not None:
                    self._fail(f"worker {h.name}", "worker",
                               f"exited with code {code} before registering with the master",
                               host=h.name)
            code = self._hosts["master"].services["master"].poll()
            if code is not None:
                self._fail("master", "master", f"exited with code {code}")
            for w in self._master_workers():
                if w.get("state") == "ALIVE" and w.get("id") not in exclude_ids:
                    waiting.pop(str(w.get("host")), None)
            if not waiting:
                return
            if time.monotonic() > deadline:
                h = next(iter(waiting.values()))
                self._fail(f"worker {h.name}", "worker", f"not registered with the master "
                           f"within {self._timeout:.0f}s", host=h.name)
            time.sleep(0.1)

    def _start_s3(self) -> None:
        if importlib.util.find_spec("moto") is None:
            raise HarnessError("s3", "moto missing (pip install 'moto[server]')")
        self._service("s3", "s3", [sys.executable, "-m", "moto.server", "-H",
                                   self.address("s3"), "-p", str(S3_PORT)])

    def _wait_s3(self) -> None:
        proc = self._hosts["s3"].services["s3"]
        deadline = time.monotonic() + self._timeout
        while True:
            code = proc.poll()
            if code is not None:
                self._fail("s3", "s3", f"moto server exited with code {code}", host="s3")
            try:
                _NO_PROXY.open(self.s3_endpoint + "/moto-api/", timeout=2).close()
                return
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self._fail("s3", "s3", f"moto server not answering at {self.s3_endpoint} "
                           f"within {self._timeout:.0f}s", host="s3")
            time.sleep(0.1)

    def _fail(self, step: str, service: str, what: str, host: str | None = None) -> None:
        tail = _tail(self._hosts[host or service].dir / f"{service}.log")
        raise HarnessError(step, f"{what}: {_last_lines(tail)}", tail)

    def _master_json(self, quiet: bool = False) -> dict[str, Any] | None:
        try:
            with _NO_PROXY.open(self.master_ui + "/json/", timeout=2) as response:
                data = json.loads(response.read())
                return data if isinstance(data, dict) else None
        except (OSError, ValueError, urllib.error.URLError):
            if quiet:
                return None
            raise

    def _master_workers(self) -> list[dict[str, Any]]:
        state = self._master_json(quiet=True)
        workers = state.get("workers") if state else None
        return [w for w in workers if isinstance(w, dict)] if isinstance(workers, list) else []

    def _env(self, h: _Host, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items()
               if key.lower() not in _PROXY_VARS and not key.startswith(("SPARK_", "PYSPARK_"))
               and key != "TMPDIR"}
        # SPARK_SCALA_VERSION: spark-class's load-spark-env.sh sets it; a worker started
        # without that script cannot build its executors' command line without it.
        env.update(SPARK_HOME=str(_spark_home()), SPARK_SCALA_VERSION=_scala_version(),
                   SPARK_LOCAL_IP=h.address,
                   PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   HOSTNAME=f"sst-{h.name}")
        if self._spark_conf_dir is not None:
            env["SPARK_CONF_DIR"] = str(self._spark_conf_dir)
        env.update(self.s3_env)
        env.update(extra or {})
        return env

    def _submit_argv(self, script: str | os.PathLike[str], args: Iterable[str | os.PathLike[str]],
                     conf: Mapping[str, str] | Sequence[str]) -> list[str]:
        driver = self.address("driver")
        flags: list[str] = []
        if isinstance(conf, Mapping):
            for key, value in conf.items():
                flags += ["--conf", f"{key}={value}"]
        else:
            flags += [str(c) for c in conf]
        return [str(_spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
                "--conf", f"spark.driver.host={driver}",
                "--conf", f"spark.driver.bindAddress={driver}",
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.ui.showConsoleProgress=false",
                *flags, str(script), *map(str, args)]


# -- stale harnesses and leftovers -----------------------------------------------------------

def sweep_stale() -> list[str]:
    """Removes every harness whose owner is dead (nobody holds its owner.lock; without one, the
    pid, start time and boot in owner.json say), and any ``sst<k>`` namespace, link or holder
    with no harness dir at all; never a live owner's. Returns the prefixes it removed.
    :meth:`Cluster.start` calls it first."""
    removed: list[str] = []
    if not BASE.is_dir() and not _names_by_k() and not _holders():
        return removed
    with _harness_lock():
        for line in _cmd(["ip", "netns", "list"]).stdout.splitlines():
            m = re.match(r"sstprobe(\d+)\b", line)
            if m and not Path(f"/proc/{m.group(1)}").exists():  # unavailable()'s, interrupted
                _cmd(["ip", "netns", "del", f"sstprobe{m.group(1)}"])
        dirs = {int(p.name): p for p in BASE.iterdir() if p.name.isdigit()}
        stale = {k for k, p in dirs.items() if not _owner_alive(p)}
        orphans = (set(_names_by_k()) | {k for k, _ in _holders()}) - set(dirs)
        for k in sorted(stale | orphans):
            _destroy(k)
            removed.append(f"sst{k}")
    return removed


def leftovers(prefix: str | None = None) -> list[str]:
    """Every harness namespace, link, qdisc, mount, process and root dir still present, one
    readable line each; only those of harness ``prefix`` (``"sst7"``) if given."""
    k = _parse_prefix(prefix)
    out: list[str] = []
    names = _names_by_k()
    for kk, items in sorted(names.items()):
        if k is None or kk == k:
            out += [f"{kind} {name}" for kind, name in items]
    done = _cmd(["tc", "qdisc", "show"])
    for line in done.stdout.splitlines():
        parts = line.split()
        if "dev" in parts:
            dev = parts[parts.index("dev") + 1]
            m = _NAME.match(dev)
            if m and (k is None or int(m.group(1)) == k):
                out.append(f"qdisc {line.strip()}")
    for point in _mount_points():
        mount_k = _mount_k(point)
        if mount_k is not None and (k is None or mount_k == k):
            out.append(f"mount {point}")
    for proc in _harness_processes(None if k is None else {k}):
        out.append(f"process {proc.pid} {' '.join(proc.cmdline)[:100]}")
    if BASE.is_dir():
        for p in sorted(BASE.iterdir()):
            if p.name.isdigit() and (k is None or int(p.name) == k):
                out.append(f"dir {p}")
    return out


# -- internals: processes --------------------------------------------------------------------

@dataclass
class _Proc:
    pid: int
    start: int
    zombie: bool
    netns: int
    pidns: int
    cmdline: list[str]


def _scan() -> list[_Proc]:
    procs = []
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            netns = os.stat(f"/proc/{pid}/ns/net").st_ino
            pidns = os.stat(f"/proc/{pid}/ns/pid").st_ino
        except (OSError, ValueError):
            continue  # gone meanwhile, or a kernel thread
        procs.append(_Proc(pid, int(fields[19]), fields[0] in ("Z", "X"), netns, pidns,
                           cmdline))
    return procs


def _holder_k(cmdline: list[str]) -> int | None:
    """k of a harness holder's command line (``holder.py ... --root BASE/<k>``), else None."""
    if not any(a.endswith("holder.py") for a in cmdline) or "--root" not in cmdline:
        return None
    i = cmdline.index("--root")
    if i + 1 < len(cmdline):
        root = Path(cmdline[i + 1])
        if root.parent == BASE and root.name.isdigit():
            return int(root.name)
    return None


def _holders(procs: list[_Proc] | None = None) -> list[tuple[int, _Proc]]:
    out = []
    for p in procs if procs is not None else _scan():
        k = _holder_k(p.cmdline)
        if k is not None and not p.zombie:
            out.append((k, p))
    return out


def _harness_processes(ks: set[int] | None) -> list[_Proc]:
    """Live processes of the harnesses ``ks`` (all if None): holders, anything in their pid
    namespaces and anything in their network namespaces (nsenter and unshare wrappers too)."""
    procs = _scan()
    netns = set()
    for k, items in _names_by_k().items():
        if ks is None or k in ks:
            for kind, name in items:
                if kind == "namespace":
                    with contextlib.suppress(OSError):
                        netns.add(os.stat(f"/run/netns/{name}").st_ino)
    holders = [p for k, p in _holders(procs) if ks is None or k in ks]
    pidns = {p.pidns for p in holders}
    root_pidns = os.stat("/proc/self/ns/pid").st_ino
    pidns.discard(root_pidns)
    return [p for p in procs if not p.zombie and (p in holders or p.netns in netns
                                                  or p.pidns in pidns)]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _owner_alive(root: Path) -> bool:
    try:
        fd = os.open(root / "owner.lock", os.O_RDWR)
    except OSError:
        pass  # no lock file: judge by owner.json
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False  # nobody holds it: the owner is gone
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
    try:
        owner = json.loads((root / "owner.json").read_text())
        pid, start, boot = int(owner["pid"]), int(owner["start_time"]), str(owner["boot_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # written under the lock before anything else: missing means crashed
    return boot == _boot_id() and _start_time(pid) == start


def _signal_holder(h: _Host) -> None:
    """SIGKILL of the host's init: the kernel kills the rest of its pid namespace."""
    if h.holder is not None and _start_time(h.holder) == h.holder_start:
        with contextlib.suppress(ProcessLookupError):
            os.kill(h.holder, signal.SIGKILL)


def _wait_host_empty(h: _Host, timeout: float = 30) -> None:
    """Waits until no process is left in the host's pid namespace."""
    if h.pidns is None:
        return
    deadline = time.monotonic() + timeout
    while any(p.pidns == h.pidns and not p.zombie for p in _scan()):
        if time.monotonic() > deadline:
            raise HarnessError("teardown", f"host {h.name}: processes left in its pid "
                               f"namespace {timeout:.0f} s after SIGKILL of its holder")
        time.sleep(0.02)
    h.holder = h.holder_start = h.pidns = None


def _reap_host(h: _Host) -> None:
    """Waits for the wrappers (unshare, nsenter) of a dead host and closes its logs."""
    for proc in [h.launcher, *h.services.values()]:
        if proc is not None:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    h.launcher = None
    h.services.clear()
    for log in h.logs:
        log.close()
    h.logs.clear()


def _destroy(k: int) -> list[str]:
    """Removes harness k whatever state it is in: processes (holders first), network
    namespaces, links, root-namespace mounts, the root dir. Returns what it could not do."""
    problems: list[str] = []
    procs = _harness_processes({k})
    for p in sorted(procs, key=lambda p: _holder_k(p.cmdline) is None):
        if _start_time(p.pid) == p.start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        alive = [p for p in procs if _start_time(p.pid) == p.start and not _is_zombie(p.pid)]
        if not alive:
            break
        if time.monotonic() > deadline:
            problems.append(f"processes {[p.pid for p in alive]} survive SIGKILL")
            break
        time.sleep(0.02)
    items = _names_by_k().get(k, [])
    netns = [name for kind, name in items if kind == "namespace"]
    links = sorted((name for kind, name in items if kind == "link"),
                   key=lambda n: n.endswith("br"))  # veths first, then the bridge
    for batch, lines in (("namespace", [f"netns del {n}" for n in netns]),
                         ("link", [f"link del {n}" for n in links])):
        if lines:
            done = _cmd(["ip", "-force", "-batch", "-"], input="\n".join(lines) + "\n")
            if done.returncode != 0:
                # A veth goes with its namespace: deleting it again is not a problem.
                still = {name for kind, name in _names_by_k().get(k, []) if kind == batch}
                if still:
                    problems.append(f"ip {batch} del: {_one_line(done.stderr)}")
    root = BASE / str(k)
    points = sorted((p for p in _mount_points() if _mount_k(p) == k), key=len, reverse=True)
    for point in points:
        done = _cmd(["umount", "-l", point])
        if done.returncode != 0:
            problems.append(f"umount {point}: {_one_line(done.stderr)}")
    if any(_mount_k(p) == k for p in _mount_points()):
        problems.append(f"mounts left under {root}: not removing it")
    elif root.exists():
        shutil.rmtree(root, ignore_errors=True)
        if root.exists():
            problems.append(f"cannot remove {root}")
    return problems


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] in "ZX"
    except (OSError, ValueError, IndexError):
        return True


# -- internals: names, addresses, mounts ------------------------------------------------------

def _names_by_k() -> dict[int, list[tuple[str, str]]]:
    """Harness network namespaces and root-namespace links, by k."""
    out: dict[int, list[tuple[str, str]]] = {}
    for line in _cmd(["ip", "netns", "list"]).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m:
            out.setdefault(int(m.group(1)), []).append(("namespace", name))
    for line in _cmd(["ip", "-o", "link", "show"]).stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        m = _NAME.match(name)
        if m:
            out.setdefault(int(m.group(1)), []).append(("link", name))
    return out


def _used_ks() -> set[int]:
    used = set(_names_by_k()) | {k for k, _ in _holders()}
    if BASE.is_dir():
        used |= {int(p.name) for p in BASE.iterdir() if p.name.isdigit()}
    nets = []
    for line in _cmd(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            nets.append(parts[parts.index("inet") + 1])
    route_types = {"local", "broadcast", "unicast", "anycast", "multicast", "blackhole",
                   "unreachable", "prohibit", "throw", "nat"}
    for line in _cmd(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        parts = line.split()
        if parts and parts[0] in route_types:
            parts = parts[1:]
        if parts and parts[0] != "default":
            nets.append(parts[0])
    for text in nets:
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue
        if not isinstance(net, ipaddress.IPv4Network) or net.prefixlen < NETWORK.prefixlen:
            continue  # a default or wider route is not a use of one /24
        for k in range(1, 255):
            if net.overlaps(ipaddress.ip_network(f"198.18.{k}.0/24")):
                used.add(k)
    return used


def _mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4].replace("\\040", " ") for line in f]
    except OSError:
        return []


def _mount_k(point: str) -> int | None:
    path = Path(point)
    if BASE in path.parents:
        name = path.relative_to(BASE).parts[0]
        return int(name) if name.isdigit() else None
    if path.parent == Path("/run/netns"):
        m = _NAME.match(path.name)
        return int(m.group(1)) if m else None
    return None


def _parse_prefix(prefix: str | None) -> int | None:
    if prefix is None:
        return None
    m = re.fullmatch(r"sst(\d{1,3})", prefix)
    if not m:
        raise ValueError(f"a harness prefix looks like 'sst7', not {prefix!r}")
    return int(m.group(1))


@contextlib.contextmanager
def _harness_lock() -> Iterator[None]:
    """Serialises sweeping and claiming between harnesses of every process on this machine."""
    BASE.mkdir(parents=True, exist_ok=True)
    with open(BASE / ".lock", "a") as f:
        deadline = time.monotonic() + 120
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise HarnessError("namespace", f"{BASE / '.lock'} held for 120 s by "
                                       "another harness") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


# -- internals: commands, links --------------------------------------------------------------

def _cmd(argv: list[str], input: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, input=input, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(argv, 127, "", str(e))


def _ip_batch(step: str, lines: list[str], netns: str | None = None) -> None:
    argv = ["ip", *(("-n", netns) if netns else ()), "-batch", "-"]
    done = _cmd(argv, input="\n".join(lines) + "\n")
    if done.returncode != 0:
        where = f" in {netns}" if netns else ""
        raise HarnessError(step, f"`ip -batch`{where} failed: {_one_line(done.stderr)}")


def _set_qdisc(netns: str | None, dev: str, link: Link) -> None:
    tc = ["tc", *(("-n", netns) if netns else ())]
    _cmd([*tc, "qdisc", "del", "dev", dev, "root"])  # none yet is fine
    lines = []
    tbf = ""
    if link.rate_mbit is not None:
        rate_bytes = link.rate_mbit * 1e6 / 8
        # burst: 5 ms of traffic, at least one 64 KiB GSO segment; latency bounds the queue.
        burst = max(64 * 1024, int(rate_bytes * 0.005))
        tbf = f"tbf rate {max(1, round(link.rate_mbit * 1000))}kbit burst {burst} latency 50ms"
    if link.delay_ms:
        # netem's queue must hold a bandwidth-delay product of packets (10 Gbit/s if unshaped).
        rate_bytes = (link.rate_mbit or 10_000) * 1e6 / 8
        limit = max(1000, int(2 * rate_bytes * link.delay_ms / 1000 / 1500))
        lines.append(f"qdisc add dev {dev} root handle 1: netem delay {link.delay_ms}ms "
                     f"limit {limit}")
        if tbf:
            lines.append(f"qdisc add dev {dev} parent 1:1 handle 10: {tbf}")
    elif tbf:
        lines.append(f"qdisc add dev {dev} root handle 1: {tbf}")
    if lines:
        done = _cmd([*tc, "-batch", "-"], input="\n".join(lines) + "\n")
        if done.returncode != 0:
            if link.delay_ms and "kind is unknown" in done.stderr:
                raise HarnessError("link", f"delay_ms needs {_NO_NETEM}")
            where = f" in {netns}" if netns else ""
            raise HarnessError("link", f"tc on {dev}{where} failed: {_one_line(done.stderr)}")


def _check_tools() -> str | None:
    if os.geteuid() != 0:
        return "not root: namespaces, bridges and mounts need root"
    for tool in ("ip", "tc", "unshare", "nsenter", "umount"):
        if shutil.which(tool) is None:
            return f"`{tool}` missing"
    return None


def _spark_home() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise HarnessError("master", "pyspark missing (pip install pyspark)")
    return Path(spec.origin).parent


def _cds_archive(java: str) -> Path | None:
    """The class-data-sharing archive for this Java binary, Spark jars and daemon options
    (None if the binary is not there: the start fails and says so)."""
    import hashlib

    jars = _spark_home() / "jars"
    real = os.path.realpath(java)
    try:
        key = "\n".join([real, str(os.stat(real).st_mtime_ns), str(jars),
                         *sorted(p.name for p in jars.iterdir()), *DAEMON_JAVA_OPTS])
    except OSError:
        return None
    return BASE / "cds" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def _scala_version() -> str:
    """``2.13`` from the pip pyspark's ``spark-core_2.13-*.jar``."""
    for jar in (_spark_home() / "jars").glob("spark-core_*.jar"):
        m = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if m:
            return m.group(1)
    raise HarnessError("master", f"no spark-core jar in {_spark_home() / 'jars'}")


# -- internals: text -------------------------------------------------------------------------

def _one_line(text: str, limit: int = 900) -> str:
    line = " | ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_STACK_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more|Caused by: )|^\s*$")


def _last_lines(tail: str, n: int = 3) -> str:
    """The last few meaningful log lines (no Java stack frames), for a one-line message; the
    full tail is in :attr:`HarnessError.log`."""
    lines = [line for line in tail.splitlines() if not _STACK_FRAME.match(line)]
    return _one_line("\n".join(lines[-n:]), 600) or "(empty log)"


def _read_line(stream: IO[bytes], deadline: float) -> str:
    """One line from a pipe, or "" at EOF or after the deadline."""
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            return buf.decode(errors="replace").strip()
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").strip()


# -- internals: signals and exit -------------------------------------------------------------

_OPEN: set[Cluster] = set()
_OPEN_LOCK = threading.Lock()
_SIGTERM_INSTALLED: list[Any] = []  # [previous handler] while ours is installed
_ATEXIT: list[bool] = []


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    with _OPEN_LOCK:
        is_open = bool(_OPEN)
    if not is_open:  # our handler outlived its clusters (closed from another thread)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated("SIGTERM")


def _register_open(cluster: Cluster) -> None:
    with _OPEN_LOCK:
        if not _ATEXIT:
            atexit.register(_close_all)
            _ATEXIT.append(True)
        if not _OPEN and threading.current_thread() is threading.main_thread():
            previous = _get_handler(signal.SIGTERM)
            if previous in (signal.SIG_DFL, None):  # a program's own SIGTERM policy stays
                _set_handler(signal.SIGTERM, _on_sigterm)
                _SIGTERM_INSTALLED[:] = [previous]
        _OPEN.add(cluster)


def _unregister_open(cluster: Cluster) -> None:
    with _OPEN_LOCK:
        _OPEN.discard(cluster)
        if not _OPEN and _SIGTERM_INSTALLED \
                and threading.current_thread() is threading.main_thread():
            if _get_handler(signal.SIGTERM) is _on_sigterm:
                _set_handler(signal.SIGTERM, _SIGTERM_INSTALLED[0] or signal.SIG_DFL)
            _SIGTERM_INSTALLED.clear()


def _close_all() -> None:
    with _OPEN_LOCK:
        clusters = list(_OPEN)
    for cluster in clusters:
        try:
            cluster.close()
        except Exception as e:  # at exit: report, go on with the others
            print(f"spark-steward harness: {e}", file=sys.stderr)


_Handler = Callable[[int, "FrameType | None"], Any] | int | None
_DEFERRED: list[dict[int, _Handler]] = []  # the handlers to restore, while deferring


def _get_handler(sig: int) -> _Handler:
    return _DEFERRED[-1][sig] if _DEFERRED else signal.getsignal(sig)


def _set_handler(sig: int, handler: _Handler) -> None:
    if _DEFERRED:
        _DEFERRED[-1][sig] = handler  # installed when the deferral ends
    else:
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _deferred_signals() -> Iterator[None]:
    """Holds SIGINT and SIGTERM back while a teardown runs (a second Ctrl-C must not leave
    half a harness), then delivers them to the handlers in force by then. Main thread only;
    elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread() or _DEFERRED:
        yield
        return
    pending: list[int] = []
    saved: dict[int, _Handler] = {}
    for sig in (int(signal.SIGINT), int(signal.SIGTERM)):
        saved[sig] = signal.getsignal(sig)
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    _DEFERRED.append(saved)
    try:
        yield
    finally:
        _DEFERRED.clear()
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)
