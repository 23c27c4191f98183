"""The identity of the Python code in a plan, for cached tables shared across applications.

A pickled command's bytes are not enough: cloudpickle ships a function defined in an importable
module *by reference* (its module and name), so two applications whose ``udfs.py`` differ send
equal bytes. Here a command is read by an unpickler that executes nothing: every global it names
becomes a stand-in, every call a record, so hostile bytes cannot run code and the driver's state is
untouched. The walk of that record gives:

- a canonical digest of the command, in which broadcasts are replaced by the digest of their
  content (their ids differ between applications) and spark-steward's own context broadcast and
  accumulators by a fixed token;
- every module named by reference (a function, class or ``import``), whose source file is hashed,
  with, for modules of the user's own code, the modules their namespace uses in turn; for a
  third-party package also its ``__version__``; standard-library modules go by the Python version.

Whatever cannot be pinned down raises :class:`~spark_steward.errors.UnidentifiedCode`: the table
is then cached for the application only.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
import sysconfig
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Sequence

from spark_steward.tables.errors import UnidentifiedCode

#: Modules reached through a user module's namespace at most (a bound on the walk, not a guess:
#: past it the code is not identified and the table is not shared).
MAX_MODULES = 256
#: Bytes of a pickled command that may be read (its size is bounded by Spark's broadcast
#: threshold anyway; past it pyspark ships the command as a broadcast).
MAX_COMMAND_BYTES = 64 << 20

#: Where pyspark's broadcasts and accumulators unpickle (pyspark.core.* since 4.0).
_BROADCASTS = {("pyspark.broadcast", "_from_id"), ("pyspark.core.broadcast", "_from_id")}
_ACCUMULATORS = {("pyspark.accumulators", "_deserialize_accumulator"),
                 ("pyspark.core.accumulators", "_deserialize_accumulator")}
_SUBIMPORTS = {"subimport", "dynamic_subimport"}


@dataclass(frozen=True)
class CodeIdentity:
    """The digest of one command and the modules it names by reference."""

    digest: str
    modules: frozenset[str]


class _Stand:
    """What the unpickler builds instead of any object a global would make: a record of the
    global, call, construction, state and items it stood for."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "_Stand":
        if isinstance(cls, _Stand):  # NEWOBJ on a stand-in class
            return _stand(cls.log, "new", cls, args, kwargs)
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> "_Stand":
        return _stand(self.log, "call", self, args, kwargs)

    def __setstate__(self, state: Any) -> None:
        self.states.append(state)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items.append((key, value))

    def append(self, item: Any) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[Any]) -> None:
        self.items.extend(items)

    def add(self, item: Any) -> None:
        self.items.append(item)

    kind: str
    target: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    states: list[Any]
    items: list[Any]
    log: list["_Stand"]


def _stand(log: list[_Stand], kind: str, target: Any, args: tuple[Any, ...] = (),
           kwargs: dict[str, Any] | None = None) -> _Stand:
    """A new record, also appended to ``log``: a call whose result the pickle discards (how
    cloudpickle sets a function's closure and globals) still counts."""
    made = object.__new__(_Stand)
    made.kind, made.target, made.args, made.kwargs = kind, target, args, kwargs or {}
    made.states, made.items, made.log = [], [], log
    log.append(made)
    return made


class _TracingUnpickler(pickle._Unpickler):  # type: ignore[name-defined, misc]
    """pickle's pure-Python unpickler with every global replaced by a stand-in."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.log: list[_Stand] = []

    def find_class(self, module: str, name: str) -> _Stand:
        return _stand(self.log, "global", (module, name))

    def persistent_load(self, pid: Any) -> Any:
        raise UnidentifiedCode("it uses a persistent id, which spark-steward cannot identify")


def _trace(data: bytes) -> tuple[Any, list[_Stand]]:
    """The object a pickle stands for, and every record made while reading it, in order."""
    if len(data) > MAX_COMMAND_BYTES:
        raise UnidentifiedCode(f"its pickled command has {len(data)} bytes (over "
                               f"{MAX_COMMAND_BYTES})")
    try:
        unpickler = _TracingUnpickler(data)
        return unpickler.load(), unpickler.log
    except UnidentifiedCode:
        raise
    except Exception as exc:
        raise UnidentifiedCode(f"its pickled command cannot be read ({type(exc).__name__}: "
                               f"{exc})") from None


def _looks_pickled(data: bytes) -> bool:
    return len(data) > 2 and data[0] == 0x80 and 2 <= data[1] <= pickle.HIGHEST_PROTOCOL


class _Canonical:
    """Feeds a traced object graph into a digest in a form equal for equal code, whatever the
    application: broadcast ids become their content's digest, accumulators a token."""

    def __init__(self, broadcasts: Mapping[int, str], context_broadcast: int | None) -> None:
        self.broadcasts = broadcasts
        self.context_broadcast = context_broadcast
        self.digest = hashlib.sha256()
        self.modules: set[str] = set()
        self.seen: dict[int, int] = {}
        self.keep: list[Any] = []  # holds walked objects so their ids stay unique

    def token(self, text: str) -> None:
        self.digest.update(f"{len(text)}:{text};".encode("utf-8", "surrogatepass"))

    def walk(self, obj: Any, depth: int = 0) -> None:
        if depth > 2000:
            raise UnidentifiedCode("its pickled command nests too deeply")
        if obj is None or isinstance(obj, (bool, int, float, complex, str)):
            self.token(f"{type(obj).__name__}:{obj!r}")
            return
        if isinstance(obj, (bytes, bytearray)):
            self.bytes_value(bytes(obj), depth)
            return
        key = id(obj)
        if key in self.seen:
            self.token(f"@{self.seen[key]}")
            return
        self.seen[key] = len(self.seen)
        self.keep.append(obj)
        if isinstance(obj, (tuple, list)):
            self.token(f"{type(obj).__name__}[{len(obj)}")
            for item in obj:
                self.walk(item, depth + 1)
            self.token("]")
        elif isinstance(obj, dict):
            self.token(f"dict[{len(obj)}")
            for k, v in obj.items():  # pickled order: the same code pickles the same order
                self.walk(k, depth + 1)
                self.walk(v, depth + 1)
            self.token("]")
        elif isinstance(obj, (set, frozenset)):
            self.sorted_set(obj, depth)
        elif isinstance(obj, _Stand):
            self.stand(obj, depth)
        else:
            raise UnidentifiedCode(f"its pickled command holds a {type(obj).__name__}")

    def traced(self, traced: tuple[Any, list[_Stand]], depth: int = 0) -> None:
        """The object, then every record it does not reach (discarded calls), in order."""
        root, log = traced
        self.walk(root, depth)
        for record in log:
            if id(record) not in self.seen:
                self.token("effect")
                self.walk(record, depth)

    def bytes_value(self, data: bytes, depth: int) -> None:
        if _looks_pickled(data):
            try:
                inner = _trace(data)
            except UnidentifiedCode:
                pass
            else:  # a command pickled inside a command (spark-steward's carrier does this)
                self.token("pickle(")
                self.traced(inner, depth + 1)
                self.token(")")
                return
        self.token(f"bytes:{hashlib.sha256(data).hexdigest()}")

    def sorted_set(self, obj: Any, depth: int) -> None:
        parts = []
        for item in obj:
            sub = _Canonical(self.broadcasts, self.context_broadcast)
            sub.walk(item, depth + 1)
            self.modules |= sub.modules
            parts.append(sub.digest.hexdigest())
        self.token(f"{type(obj).__name__}{{{','.join(sorted(parts))}}}")

    def stand(self, obj: _Stand, depth: int) -> None:
        if obj.kind == "global":
            module, name = obj.target
            self.modules.add(module)
            self.token(f"global:{module}:{name}")
            return
        target = obj.target
        if obj.kind == "call" and isinstance(target, _Stand) and target.kind == "global":
            module, name = target.target
            if (module, name) in _BROADCASTS:
                self.broadcast(obj.args)
                return
            if (module, name) in _ACCUMULATORS:
                self.token("accumulator")
                return
            if name in _SUBIMPORTS and obj.args and isinstance(obj.args[0], str):
                self.modules.add(obj.args[0])
        self.token(f"{obj.kind}(")
        self.walk(target, depth + 1)
        self.walk(obj.args, depth + 1)
        self.walk(obj.kwargs, depth + 1)
        self.walk(obj.states, depth + 1)
        self.walk(obj.items, depth + 1)
        self.token(")")

    def broadcast(self, args: tuple[Any, ...]) -> None:
        bid = args[0] if args else None
        if not isinstance(bid, int):
            raise UnidentifiedCode("it references a broadcast spark-steward cannot read")
        if bid == self.context_broadcast:
            self.token("broadcast:spark-steward")
            return
        content = self.broadcasts.get(bid, "")
        if not content:
            raise UnidentifiedCode(f"it reads broadcast {bid}, whose content spark-steward "
                                   "cannot read on the driver")
        self.token(f"broadcast:{content}")


def command_identity(command: bytes, broadcasts: Mapping[int, str],
                     context_broadcast: int | None = None) -> CodeIdentity:
    """The identity of one pickled Python command: ``broadcasts`` maps the id of every
    broadcast it uses to the SHA-256 of its pickled value ("" when unreadable);
    ``context_broadcast`` is spark-steward's own, which differs per application by design."""
    canonical = _Canonical(broadcasts, context_broadcast)
    canonical.traced(_trace(command))
    return CodeIdentity(canonical.digest.hexdigest(), frozenset(canonical.modules))


# -- modules -------------------------------------------------------------------------------------

_STDLIB_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                      for k in ("stdlib", "platstdlib")})
_THIRD_PARTY_DIRS = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep
                           for k in ("purelib", "platlib")})
_file_digests: dict[tuple[str, int, int, int, int], str] = {}
_digest_lock = threading.Lock()


def _cached_digest(stat_of: str, path: str, read: Callable[[], bytes]) -> str:
    """SHA-256 of ``read()``, remembered while the file ``stat_of`` (the module's own file, or
    the archive holding it) keeps its size, times and inode."""
    st = os.stat(stat_of)
    key = (path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    with _digest_lock:
        known = _file_digests.get(key)
    if known is not None:
        return known
    value = hashlib.sha256(read()).hexdigest()
    with _digest_lock:
        if len(_file_digests) > 4096:
            _file_digests.clear()
        _file_digests[key] = value
    return value


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _module_digest(name: str, module: ModuleType, path: str | None) -> str:
    """SHA-256 of the module's file, also where it is loaded from an archive (spark-submit puts
    pyspark.zip and --py-files archives on the path)."""
    try:
        if path and os.path.isfile(path):
            return _cached_digest(path, path, lambda: _read_file(path))
        loader: Any = getattr(getattr(module, "__spec__", None), "loader", None)
        archive = _archive_of(path) if path else None
        if path and archive is not None and hasattr(loader, "get_data"):
            return _cached_digest(archive, path, lambda: loader.get_data(path))
    except OSError as exc:
        raise UnidentifiedCode(f"module {name!r}'s file {path} cannot be read "
                               f"({exc.strerror or exc})") from None
    raise UnidentifiedCode(f"it uses module {name!r}, which has no source file to identify "
                           "its code by")


def _archive_of(path: str) -> str | None:
    """The archive file a path inside an archive (``.../pyspark.zip/pyspark/x.py``) is in."""
    head = path
    while True:
        head, tail = os.path.split(head)
        if not tail:
            return None
        if os.path.isfile(head):
            return head


def _is_stdlib(name: str, module: ModuleType | None) -> bool:
    top = name.partition(".")[0]
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        path = getattr(module, "__file__", None)
        return path is None or os.path.realpath(path).startswith(_STDLIB_DIRS)
    return False


def _is_third_party(path: str) -> bool:
    real = os.path.realpath(path)
    return real.startswith(_THIRD_PARTY_DIRS) or "site-packages" in real.split(os.sep)


def modules_identity(names: Iterable[str]) -> list[str]:
    """One line per module the code reaches: its name and its source's digest (or, for the
    standard library, nothing beyond the Python version the caller adds). The user's own
    modules are followed through the modules and functions their namespace uses."""
    loaded = sys.modules
    pending = sorted(set(names))
    done: set[str] = set()
    lines: list[str] = []
    while pending:
        name = pending.pop()
        if name in done:
            continue
        done.add(name)
        if len(done) > MAX_MODULES:
            raise UnidentifiedCode(f"its code reaches more than {MAX_MODULES} modules")
        module = loaded.get(name)
        if module is None:
            raise UnidentifiedCode(f"it uses module {name!r}, which is not loaded on the driver")
        if _is_stdlib(name, module):
            continue
        path = getattr(module, "__file__", None)
        lines.append(f"module {name} {_module_digest(name, module, path)}")
        top = name.partition(".")[0]
        if path and _is_third_party(path):
            version = getattr(loaded.get(top), "__version__", None)
            lines.append(f"package {top} {version if isinstance(version, str) else '?'}")
            continue
        pending.extend(sorted(_namespace_modules(module) - done))
    return sorted(set(lines))


def _namespace_modules(module: ModuleType) -> set[str]:
    """The modules a user module's namespace refers to: imported modules and the modules that
    define its imported functions and classes (a change there can change its results)."""
    found: set[str] = set()
    for value in list(vars(module).values()):
        if isinstance(value, ModuleType):
            found.add(value.__name__)
        else:
            owner = getattr(value, "__module__", None)
            if isinstance(owner, str) and callable(value):
                found.add(owner)
    found.discard(module.__name__)
    return {name for name in found if name in sys.modules}


def python_identity(commands: Sequence[tuple[bytes, Mapping[int, str]]],
                    context_broadcast: int | None = None) -> str:
    """The text that identifies every Python function of a plan: each command's canonical digest
    and the digest of every module the commands reach, with the Python version."""
    lines = [f"python {sys.version}"]
    names: set[str] = set()
    for command, broadcasts in commands:
        identity = command_identity(command, broadcasts, context_broadcast)
        lines.append(f"command {identity.digest}")
        names |= identity.modules
    lines.extend(modules_identity(names))
    return "\n".join(lines)


def unframe(text: str) -> list[str]:
    """The items of the shim's framed answer: "count\\n", then "length\\nitem" for each."""
    head, _, rest = text.partition("\n")
    items: list[str] = []
    pos = 0
    for _ in range(int(head)):
        newline = rest.index("\n", pos)
        size = int(rest[pos:newline])
        items.append(rest[newline + 1:newline + 1 + size])
        pos = newline + 1 + size
    if pos != len(rest):
        raise ValueError(f"the shim's answer has {len(rest) - pos} characters past its items")
    return items


def parse_broadcasts(text: str) -> dict[int, str]:
    """``"3=ab12..,5="`` (the shim's list of a function's broadcasts) as {3: "ab12..", 5: ""}."""
    out: dict[int, str] = {}
    for item in filter(None, text.split(",")):
        bid, _, digest = item.partition("=")
        out[int(bid)] = digest
    return out
