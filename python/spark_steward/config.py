"""Every ``spark.steward.*`` key in one table: name, type, default, doc.

The kernel's keys are declared here; each capability declares its own in its folder (the
``config`` module its :class:`~spark_steward.capabilities.Capability` names, e.g.
``blob/config_keys.py``) with the same :class:`ConfigKey`, and :data:`KEYS` lists them all: the
kernel's first, then each capability's in capability order. A capability's key is also reached
here by its constant's name (``config.BLOB_HA``), as before the keys moved.

Code reads typed values through :class:`StewardConf`, never raw strings. The configuration table
in docs/ is generated from :data:`KEYS` (``spark-steward conf --markdown``) and a test keeps the
two in sync. A bad value raises :class:`~spark_steward.errors.ConfigError` with one line naming
the key, the value and what is allowed.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, TypeVar

from spark_steward import capabilities
from spark_steward.errors import ConfigError
from spark_steward.lifecycle.retry import RetryStrategy

log = logging.getLogger(__name__)

PREFIX = "spark.steward."
STORAGE_OPTION_PREFIX = "spark.steward.storage.option."
#: Written by the driver's Python into the conf of a starting SparkContext: the values the JVM
#: shim acts on, resolved (:mod:`spark_steward.kernel.handover`). Not a user key.
RESOLVED_KEY = "spark.steward.resolved"
T = TypeVar("T")

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_NUMBER_WITH_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def _parse_bool(raw: str) -> bool:
    """Exactly what Spark accepts for its own boolean keys (``true``/``false``, any case,
    surrounding blanks ignored). The shim reads a session's switches with this grammar
    (``kernel.Handover.sessionSwitch``, held equal by tests/spark/test_handover_jvm.py): a value
    one side takes as "on" is never refused or read as "off" by the other."""
    value = raw.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    raise ValueError("true or false")


def _parse_int(raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ValueError("a whole number") from None


def _parse_duration(raw: str) -> float:
    """Spark-style durations: ``500ms``, ``10s``, ``5min``, ``1h``; a bare number is seconds."""
    match = _NUMBER_WITH_UNIT.match(raw)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _DURATION_UNITS and unit != "":
        raise ValueError("a duration such as 500ms, 10s, 5min or 1h")
    return float(match.group(1)) * _DURATION_UNITS.get(unit, 1.0)


def _parse_size(raw: str) -> int:
    """Spark-style sizes: ``512k``, ``64m``, ``1g``; a bare number is bytes."""
    match = _NUMBER_WITH_UNIT.match(raw)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ValueError("a size such as 512k, 64m or 1g")
    return int(float(match.group(1)) * _SIZE_UNITS[unit])


def _parse_float(raw: str) -> float:
    try:
        return float(raw.strip())
    except ValueError:
        raise ValueError("a number such as 2.0") from None


def _parse_retries(raw: str) -> int | None:
    """``infinite`` (None: retry until it succeeds) or a whole number of retries."""
    text = raw.strip().lower()
    if text in ("infinite", "inf", "unlimited"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError("a whole number of retries or infinite") from None
    if value < 0:
        raise ValueError("a whole number of retries (0 or more) or infinite")
    return value


def _parse_str(raw: str) -> str:
    return raw.strip()


@dataclass(frozen=True)
class ConfigType(Generic[T]):
    """How a key's raw string becomes a typed value."""

    name: str
    parse: Callable[[str], T]


BOOL: ConfigType[bool] = ConfigType("boolean", _parse_bool)
INT: ConfigType[int] = ConfigType("int", _parse_int)
DURATION: ConfigType[float] = ConfigType("duration", _parse_duration)
SIZE: ConfigType[int] = ConfigType("size", _parse_size)
FLOAT: ConfigType[float] = ConfigType("number", _parse_float)
STRING: ConfigType[str] = ConfigType("string", _parse_str)
RETRIES: ConfigType[int | None] = ConfigType("int or `infinite`", _parse_retries)


@dataclass(frozen=True)
class ConfigKey(Generic[T]):
    """One documented key. ``default_text`` is what README shows; ``minimum`` and ``maximum``
    bound numbers."""

    name: str
    type: ConfigType[T]
    default_text: str
    doc: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def parse(self, raw: str) -> T:
        """Typed value of ``raw``; raises ConfigError naming this key, the value and the rule."""
        try:
            value = self.type.parse(str(raw))
        except ValueError as exc:
            raise ConfigError(f"{self.name}={raw!r} is not valid: expected {exc}") from None
        if self.choices and value not in self.choices:
            raise ConfigError(
                f"{self.name}={raw!r} is not valid: expected one of {', '.join(self.choices)}")
        if self.minimum is not None and isinstance(value, (int, float)) and value < self.minimum:
            raise ConfigError(f"{self.name}={raw!r} is not valid: must be at least {self.minimum:g}")
        if self.maximum is not None and isinstance(value, (int, float)) and value > self.maximum:
            raise ConfigError(f"{self.name}={raw!r} is not valid: must be at most {self.maximum:g}")
        return value

    @property
    def default(self) -> T:
        """The key's default value, parsed."""
        return self.parse(self.default_text) if self.default_text != "" else self.type.parse("")


class KeyTable(Mapping[str, "ConfigKey[Any]"]):
    """Every key by name: the kernel's in declaration order, then each declared capability's
    (the ConfigKey constants of its ``config`` module, in their order), capabilities in
    :func:`spark_steward.capabilities.declared` order. Assembled on first read, so importing
    this module imports no capability."""

    def __init__(self) -> None:
        self._kernel: dict[str, ConfigKey[Any]] = {}
        self._assembled: tuple[capabilities.Declared, dict[str, ConfigKey[Any]]] | None = None

    def add(self, key: ConfigKey[Any]) -> None:
        """Declares one of the kernel's keys."""
        self._kernel[key.name] = key
        self._assembled = None

    def _keys(self) -> dict[str, ConfigKey[Any]]:
        declared = capabilities.declared()
        if self._assembled is None or self._assembled[0] is not declared:
            keys = dict(self._kernel)
            owners = dict.fromkeys(keys, "spark_steward.config")
            for capability, module in capabilities.loaded("config"):
                for key in capability_keys(module):
                    if keys.get(key.name, key) is not key:
                        raise ConfigError(f"{key.name} is declared twice: by {owners[key.name]} "
                                          f"and by {module.__name__} (capability "
                                          f"{capability.name!r})")
                    keys[key.name] = key
                    owners.setdefault(key.name, module.__name__)
            self._assembled = (declared, keys)
        return self._assembled[1]

    def __getitem__(self, name: str) -> ConfigKey[Any]:
        return self._keys()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


def capability_keys(module: Any) -> list[ConfigKey[Any]]:
    """The ConfigKey constants a capability's ``config`` module defines, in their order."""
    return [value for name, value in vars(module).items()
            if isinstance(value, ConfigKey) and name.isupper()]


KEYS = KeyTable()


@dataclass(frozen=True)
class JvmValue:
    """One value the JVM shim acts on, handed to every JVM of an application resolved
    (:mod:`spark_steward.kernel.handover`): its field in the record, its type (``bool``,
    ``int`` or ``str``; durations as whole milliseconds, sizes as bytes) and how it follows from
    a validated conf. A capability whose shim half needs values declares them as ``JVM_VALUES``
    in its ``config`` module; the shim reads each field by name in that capability's package."""

    field: str
    type: type
    resolve: Callable[["StewardConf"], Any]


def jvm_values() -> list[JvmValue]:
    """Every capability's declared :class:`JvmValue`, capabilities in declaration order."""
    found: list[JvmValue] = []
    for _, module in capabilities.loaded("config"):
        found.extend(getattr(module, "JVM_VALUES", ()))
    return found


def _key(name: str, type_: ConfigType[T], default: str, doc: str, *,
         choices: tuple[str, ...] = (), minimum: float | None = None) -> ConfigKey[T]:
    key = ConfigKey(name, type_, default, doc, choices, minimum)
    KEYS.add(key)
    return key


def __getattr__(name: str) -> ConfigKey[Any]:
    """A capability's key by its constant's name (``spark_steward.config.BLOB_HA``): the names
    the keys had here before each capability declared its own still answer."""
    if not name.startswith("__"):
        for _, module in capabilities.loaded("config"):
            value = vars(module).get(name)
            if isinstance(value, ConfigKey):
                return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _default_root() -> Path:
    """``<tmp>/spark-steward-<uid>``: one per user, so two users on a host never share a default
    dir. Resolved on the driver and handed to the JVMs (:mod:`spark_steward.kernel.handover`)."""
    return Path(tempfile.gettempdir()) / f"spark-steward-{os.getuid()}"


def default_storage_dir() -> str:
    """The embedded default: a local directory, so nothing else has to run."""
    return (_default_root() / "storage").as_uri()


def default_local_dir() -> str:
    """The host-local working directory used when ``spark.steward.local.dir`` is empty."""
    return str(_default_root() / "local")


ENABLED = _key(
    "spark.steward.enabled", BOOL, "false",
    "Turns spark-steward on. Read from the runtime conf of the SparkSession in use at every "
    "decision, so `spark.conf.set(\"spark.steward.enabled\", \"false\")` turns it off for that "
    "session only.")
STORAGE_DIR = _key(
    "spark.steward.storage.dir", STRING, "",
    "Durable storage URL for metadata, application records and HA copies: any fsspec URL "
    "(`file:///…`, `s3://bucket/prefix`, `hdfs://…`, `memory://…` in tests). Empty means a local "
    "directory under the system temp dir, `<system temp dir>/spark-steward-<uid>/storage` (the "
    "embedded default, single-host only). On a local filesystem its folders and files are "
    "created for the application's user only (0700/0600).")
LOCAL_DIR = _key(
    "spark.steward.local.dir", STRING, "",
    "Host-local working directory on the driver and every executor host. Empty means "
    "`<system temp dir>/spark-steward-<uid>/local`. It must outlive executor processes "
    "(standalone and YARN hosts keep it; on Kubernetes mount a persistent volume there): files "
    "in it survive executor restarts and are removed when their application ends. It is private "
    "to the application's user: an existing one that is a symbolic link, another user's or "
    "writable by others is refused.")
EVENTS_BUFFER_CAPACITY = _key(
    "spark.steward.events.buffer-capacity", INT, "100000",
    "Events the JVM shim holds for Python before it drops (and counts) new ones. Read by the "
    "shim at SparkContext start.", minimum=1)
EVENTS_BATCH_SIZE = _key(
    "spark.steward.events.batch-size", INT, "10000",
    "Most events carried by one call from Python into the JVM.", minimum=1)
EVENTS_POLL_INTERVAL = _key(
    "spark.steward.events.poll-interval", DURATION, "100ms",
    "How long one drain call waits in the JVM for a first event; bounds event latency.",
    minimum=0.001)
HEARTBEAT_INTERVAL = _key(
    "spark.steward.heartbeat.interval", DURATION, "10s",
    "How often a live application refreshes its record in the storage dir.", minimum=0.01)
HEARTBEAT_TIMEOUT = _key(
    "spark.steward.heartbeat.timeout", DURATION, "2min",
    "A running application whose heartbeat is older than this is taken as crashed. Where the "
    "judging process shares the driver's hostname, boot and PID namespace, the driver process "
    "decides instead: vanished is crashed at once, running is live.", minimum=0.01)
CLEANUP_STRATEGY = _key(
    "spark.steward.cleanup-strategy", STRING, "exponential-delay",
    "How failed cleanups (checkpoint discards) are retried, as Flink's `cleanup-strategy`: "
    "`exponential-delay`, `fixed-delay`, or `none` (one attempt and a warning naming what was "
    "left; it stays recorded so `spark-steward gc` or the next run finishes it).",
    choices=("exponential-delay", "fixed-delay", "none"))
CLEANUP_EXPONENTIAL_INITIAL = _key(
    "spark.steward.cleanup-strategy.exponential-delay.initial-backoff", DURATION, "1s",
    "First wait after a failed cleanup with the exponential-delay strategy; it doubles after "
    "each further failure.", minimum=0.001)
CLEANUP_EXPONENTIAL_MAX = _key(
    "spark.steward.cleanup-strategy.exponential-delay.max-backoff", DURATION, "1h",
    "Longest wait between cleanup retries with the exponential-delay strategy.", minimum=0.001)
CLEANUP_EXPONENTIAL_ATTEMPTS = _key(
    "spark.steward.cleanup-strategy.exponential-delay.attempts", RETRIES, "infinite",
    "How often a failed cleanup is retried with the exponential-delay strategy before it is "
    "given up (left recorded for `spark-steward gc`).")
CLEANUP_FIXED_DELAY = _key(
    "spark.steward.cleanup-strategy.fixed-delay.delay", DURATION, "1min",
    "Wait between cleanup retries with the fixed-delay strategy.", minimum=0.001)
CLEANUP_FIXED_ATTEMPTS = _key(
    "spark.steward.cleanup-strategy.fixed-delay.attempts", RETRIES, "infinite",
    "How often a failed cleanup is retried with the fixed-delay strategy before it is given "
    "up (left recorded for `spark-steward gc`).")
CLEANUP_THREADS = _key(
    "spark.steward.cleanup.io-threads", INT, "4",
    "Threads of the IO pool that runs cleanups off the threads that call save or stop.",
    minimum=1)
CLEANUP_SHUTDOWN_TIMEOUT = _key(
    "spark.steward.cleanup.shutdown-timeout", DURATION, "30s",
    "How long `spark.stop()` waits for outstanding cleanups; what is left stays recorded and "
    "the next attach or `spark-steward gc` finishes it.", minimum=0)
STORAGE_OPTIONS_DOC = (
    "`spark.steward.storage.option.<name>`", "string", "(none)",
    "Passed to the fsspec filesystem of the storage dir as keyword `<name>`, e.g. "
    "`spark.steward.storage.option.endpoint_url=http://127.0.0.1:9000` or `…option.anon=true` "
    "for s3://. `true`/`false` and whole numbers are passed as such. Travels to executors only "
    "inside the broadcast, never in local properties.")
SHIM_JAR = _key(
    "spark.steward.shim.jar", STRING, "",
    "Path of the JVM shim jar to load when the plugin is not on the classpath. Empty means the "
    "jar inside the installed package (`spark-steward jar`).")


class StewardConf:
    """Validated, typed view of the ``spark.steward.*`` pairs of one conf.

    Build it with :meth:`from_pairs`; every key is parsed up front so a bad value fails at attach,
    not in the middle of a job.
    """

    #: Spark keys that encrypt Spark's own transfers; blob transfers follow them (``auto``).
    SPARK_ENCRYPTION_KEYS = ("spark.network.crypto.enabled", "spark.ssl.enabled",
                             "spark.ssl.rpc.enabled")

    def __init__(self, values: Mapping[str, Any],
                 storage_options: Mapping[str, Any] | None = None, *,
                 spark_encrypts: bool = False, unlisted: Mapping[str, str] | None = None) -> None:
        self._values = dict(values)
        self._storage_options = dict(storage_options or {})
        self.spark_encrypts = spark_encrypts
        # spark.steward.* values of keys KEYS does not list in this process (a Python whose
        # package metadata is missing, as with a package shipped to executors by hand), parsed
        # by get() with the key asked for: a value set is never silently read as its default.
        self._unlisted = dict(unlisted or {})

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]], *, warn_unknown: bool = True
                   ) -> "StewardConf":
        """The conf of ``(key, value)`` pairs (a SparkConf's), every spark.steward.* value
        validated; unknown keys are warned about."""
        values: dict[str, Any] = {}
        options: dict[str, Any] = {}
        unlisted: dict[str, str] = {}
        spark_encrypts = False
        for name, raw in pairs:
            if name in cls.SPARK_ENCRYPTION_KEYS:
                try:
                    spark_encrypts |= _parse_bool(raw)
                except ValueError:
                    raise ConfigError(f"{name}={raw!r} is not a boolean (true or false)") from None
            if not name.startswith(PREFIX):
                continue
            if name.startswith(STORAGE_OPTION_PREFIX):
                option = name[len(STORAGE_OPTION_PREFIX):]
                if not option.isidentifier():
                    raise ConfigError(f"{name} is not valid: the part after "
                                      f"{STORAGE_OPTION_PREFIX} must be a keyword name")
                options[option] = parse_storage_option(raw)
                continue
            key = KEYS.get(name)
            if key is None:
                if warn_unknown and name != RESOLVED_KEY:
                    log.warning("%s", unknown_key_message(name))
                unlisted[name] = raw
                continue
            values[name] = key.parse(raw)
        return cls(values, options, spark_encrypts=spark_encrypts, unlisted=unlisted)

    def get(self, key: ConfigKey[T]) -> T:
        """The typed value of ``key``: the one set, else its default."""
        if key.name in self._values:
            return self._values[key.name]  # type: ignore[no-any-return]
        if key.name in self._unlisted:
            return key.parse(self._unlisted[key.name])
        return key.default

    def is_set(self, key: ConfigKey[Any]) -> bool:
        """True when ``key`` was set explicitly."""
        return key.name in self._values or key.name in self._unlisted

    def storage_dir(self) -> str:
        """The storage dir URL: ``spark.steward.storage.dir`` or the default under the temp dir."""
        return self.get(STORAGE_DIR) or default_storage_dir()

    def local_dir(self) -> str:
        """The host-local working directory: ``spark.steward.local.dir`` or its default."""
        return self.get(LOCAL_DIR) or default_local_dir()

    def retry_strategy(self) -> "RetryStrategy":
        """The cleanup retry strategy these values describe."""
        kind = self.get(CLEANUP_STRATEGY)
        if kind == "none":
            return RetryStrategy.no_retry()
        if kind == "fixed-delay":
            return RetryStrategy.fixed(self.get(CLEANUP_FIXED_DELAY),
                                       self.get(CLEANUP_FIXED_ATTEMPTS))
        return RetryStrategy.exponential(self.get(CLEANUP_EXPONENTIAL_INITIAL),
                                         self.get(CLEANUP_EXPONENTIAL_MAX),
                                         self.get(CLEANUP_EXPONENTIAL_ATTEMPTS))

    def storage_options(self) -> dict[str, Any]:
        """fsspec keyword arguments from ``spark.steward.storage.option.*``."""
        return dict(self._storage_options)

    def as_dict(self) -> dict[str, Any]:
        """Effective value of every key, defaults included."""
        return {name: self.get(key) for name, key in KEYS.items()}


def parse_storage_option(raw: str) -> Any:
    """A storage option's text as the value fsspec expects (bool, int, float, else the string)."""
    text = raw.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def unknown_key_message(name: str) -> str:
    # Compare what follows the shared prefix, or every key looks close to every other.
    """The warning for an unknown spark.steward.* key, naming the closest known key."""
    suffixes = {key[len(PREFIX):]: key for key in KEYS}
    close = difflib.get_close_matches(name[len(PREFIX):], list(suffixes), n=1, cutoff=0.75)
    hint = (f"; did you mean {suffixes[close[0]]}?" if close
            else "; known keys: spark-steward conf --markdown")
    return f"unknown spark-steward key {name}{hint}"


def render_markdown_table() -> str:
    """The configuration table of docs/configuration.md, generated from :data:`KEYS`."""
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key in KEYS.values():
        kind = key.type.name if not key.choices else " \\| ".join(f"`{c}`" for c in key.choices)
        default = f"`{key.default_text}`" if key.default_text else "(empty)"
        lines.append(f"| `{key.name}` | {kind} | {default} | {key.doc} |")
    name, kind, default, doc = STORAGE_OPTIONS_DOC
    lines.append(f"| {name} | {kind} | {default} | {doc} |")
    return "\n".join(lines)
