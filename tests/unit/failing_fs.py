"""An in-memory fsspec filesystem that fails on command, for storage fault tests.

::

    fs = FailingFileSystem()
    fs.fail("rm", times=3, error=PermissionError(13, "denied"))  # the next 3 rm calls raise
    fs.fail("pipe_file")                                         # one transient OSError
    fs.fail_paths("*/data/*", ops=("rm_file",))                  # until fs.allow()
    fs.fail_partial_rm(after=2)          # the next recursive rm removes 2 files, then raises
    fs.fail("rm", landed=True)           # the rm takes effect, then reports a failure
    fs.calls["rm"], fs.failures["rm"], fs.log                    # what happened, in order

Every instance has its own store (nothing is shared with ``memory://`` URLs or other tests).
Each instrumented call is counted and logged, including the calls fsspec makes internally (a
recursive ``rm`` calls ``rm_file`` per file, ``exists`` calls ``info``): failures apply to those
too, which is how real backends behave. File times come from :attr:`FailingFileSystem.clock`, so
age-based logic can be driven by a fake clock.
"""

from __future__ import annotations

import copy
import errno
import fnmatch
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from fsspec.implementations.memory import MemoryFileSystem

from spark_steward.storage import Storage

#: Instrumented operations (fsspec method names); the aliases map onto them.
OPS = ("rm", "rm_file", "pipe_file", "cat_file", "ls", "find", "mv", "info", "makedirs")
ALIASES = {"write": "pipe_file", "read": "cat_file", "delete": "rm", "list": "ls"}

ErrorSpec = BaseException | type[BaseException] | Callable[[str, str], BaseException]


def transient(op: str = "op", path: str = "") -> OSError:
    return OSError(errno.EIO, f"injected transient failure of {op}", path)


def denied(op: str = "op", path: str = "") -> PermissionError:
    return PermissionError(errno.EACCES, f"injected permission denied for {op}", path)


@dataclass
class Call:
    op: str
    path: str
    data: bytes | None = None
    failed: bool = False


@dataclass
class Rule:
    op: str
    times: int | None  # None: until removed with allow()
    error: ErrorSpec
    pattern: str | None = None
    skip: int = 0  # matching calls let through before the rule starts failing
    landed: bool = False  # the call takes effect first, then raises (outcome unknown)

    def matches(self, op: str, path: str) -> bool:
        return self.op == op and (self.pattern is None or fnmatch.fnmatchcase(path, self.pattern))

    def make_error(self, op: str, path: str) -> BaseException:
        spec = self.error
        if isinstance(spec, BaseException):
            try:
                return copy.copy(spec)
            except Exception:  # noqa: BLE001 - an exception that does not copy is reused
                return spec
        if isinstance(spec, type):
            return spec(f"injected {spec.__name__} for {op} of {path}")
        return spec(op, path)


def _op(name: str) -> str:
    op = ALIASES.get(name, name)
    if op not in OPS:
        raise ValueError(f"unknown operation {name!r}; one of {', '.join(OPS)}")
    return op


class FailingFileSystem(MemoryFileSystem):
    """MemoryFileSystem with a private store, call counting and injected failures."""

    protocol = "memory"
    cachable = False  # fsspec would hand every caller the same instance otherwise

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(global_store=False)
        self.clock = clock
        self.calls: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.log: list[Call] = []
        self._rules: list[Rule] = []
        self._hooks: dict[str, list[Callable[[str], None]]] = {}
        self._guard = threading.RLock()

    # -- commands ----------------------------------------------------------------------------

    def fail(self, op: str, times: int | None = 1, error: ErrorSpec = transient, *,
             path: str | None = None, skip: int = 0, landed: bool = False) -> Rule:
        """The next ``times`` calls of ``op`` (matching the glob ``path``, if given) raise
        ``error`` (an exception, an exception type, or ``f(op, path)``); None: until allowed.
        ``skip`` lets that many matching calls through first; ``landed`` lets the call take
        effect and raises afterwards (a timeout after the backend applied it)."""
        rule = Rule(_op(op), times, error, path, skip, landed)
        with self._guard:
            self._rules.append(rule)
        return rule

    def fail_paths(self, pattern: str, ops: Iterable[str] = ("rm", "rm_file", "pipe_file", "mv"),
                   error: ErrorSpec = denied) -> list[Rule]:
        """Every call of ``ops`` on a path matching the glob ``pattern`` fails until allowed."""
        return [self.fail(op, None, error, path=pattern) for op in ops]

    def fail_partial_rm(self, after: int, error: ErrorSpec = transient, *,
                        path: str | None = None) -> Rule:
        """The next recursive ``rm`` removes ``after`` files, then raises (a partial delete)."""
        return self.fail("rm_file", 1, error, path=path, skip=after)

    def allow(self, op: str | None = None) -> None:
        """Removes the rules of ``op`` (all rules when None)."""
        with self._guard:
            self._rules = [r for r in self._rules if op is not None and r.op != _op(op)]

    def on(self, op: str, hook: Callable[[str], None]) -> None:
        """Calls ``hook(path)`` before every ``op`` (before failure rules are applied)."""
        with self._guard:
            self._hooks.setdefault(_op(op), []).append(hook)

    def reset_counts(self) -> None:
        with self._guard:
            self.calls.clear()
            self.failures.clear()
            self.log.clear()

    # -- inspection ----------------------------------------------------------------------------

    def files(self, prefix: str = "") -> list[str]:
        """Every stored file path (starting with ``prefix``), sorted."""
        return sorted(p for p in tuple(self.store) if p.startswith(prefix))

    def ops(self, *names: str) -> list[tuple[str, str]]:
        """``(op, path)`` of the logged calls of ``names`` (all when empty), in order."""
        wanted = {_op(n) for n in names}
        with self._guard:
            return [(c.op, c.path) for c in self.log if not wanted or c.op in wanted]

    def set_mtime(self, prefix: str, when: float) -> None:
        """Sets the time of every file at or below ``prefix``."""
        stamp = datetime.fromtimestamp(when, tz=timezone.utc)
        prefix = self._strip_protocol(prefix)
        for path, f in tuple(self.store.items()):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                f.created = f.modified = stamp

    # -- the instrumented operations -------------------------------------------------------

    def _enter(self, op: str, path: Any, data: bytes | None = None) -> BaseException | None:
        """Counts and logs the call; raises an injected failure, or returns one to raise after
        the call took effect."""
        spath = self._strip_protocol(path) if isinstance(path, str) else str(path)
        with self._guard:
            hooks = list(self._hooks.get(op, ()))
        for hook in hooks:
            hook(spath)
        with self._guard:
            self.calls[op] += 1
            call = Call(op, spath, data)
            self.log.append(call)
            for rule in self._rules:
                if not rule.matches(op, spath):
                    continue
                if rule.skip > 0:
                    rule.skip -= 1
                    continue
                if rule.times is not None:
                    rule.times -= 1
                    if rule.times <= 0:
                        self._rules.remove(rule)
                call.failed = True
                self.failures[op] += 1
                if rule.landed:
                    return rule.make_error(op, spath)
                raise rule.make_error(op, spath)
        return None

    @staticmethod
    def _after(error: BaseException | None) -> None:
        if error is not None:
            raise error

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        after = self._enter("rm", path)
        super().rm(path, recursive=recursive, maxdepth=maxdepth)
        self._after(after)

    def rm_file(self, path: str) -> None:
        after = self._enter("rm_file", path)
        super().rm_file(path)
        self._after(after)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        after = self._enter("pipe_file", path, bytes(value))
        super().pipe_file(path, value, mode=mode, **kwargs)
        stored = self.store.get(self._strip_protocol(path))
        if stored is not None:
            stored.created = stored.modified = datetime.fromtimestamp(self.clock(),
                                                                      tz=timezone.utc)
        self._after(after)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        after = self._enter("cat_file", path)
        data: bytes = super().cat_file(path, start=start, end=end, **kwargs)
        self._after(after)
        return data

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
        after = self._enter("ls", path)
        found = super().ls(path, detail=detail, **kwargs)
        self._after(after)
        return found

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
             detail: bool = False, **kwargs: Any) -> Any:
        after = self._enter("find", path)
        found = super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        self._after(after)
        return found

    def mv(self, path1: str, path2: str, *args: Any, **kwargs: Any) -> None:
        after = self._enter("mv", path1)
        super().mv(path1, path2, *args, **kwargs)
        self._after(after)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        after = self._enter("info", path)
        found: dict[str, Any] = super().info(path, **kwargs)
        self._after(after)
        return found

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        after = self._enter("makedirs", path)
        super().makedirs(path, exist_ok=exist_ok)
        self._after(after)


def failing_storage(fs: FailingFileSystem | None = None, root: str = "/steward"
                    ) -> tuple[Storage, FailingFileSystem]:
    """A Storage rooted at ``root`` of a (new) failing filesystem."""
    fs = fs if fs is not None else FailingFileSystem()
    return Storage(fs, root, f"memory://{root.strip('/')}"), fs
