"""Constants both runtimes need stay one fact: the shim's Java declarations equal their Python
owners, and no Java file spells out a value that has a constant.

Read from the Java sources (each ``static final`` declaration parsed with a regex, no JVM), the
way delta-spark checks its protos against its Python. A drift fails with the constant, both
values and both files. The Java owner of each fact is the class named below; the Python owner is
the module attribute next to it.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from spark_steward import config

ROOT = Path(__file__).resolve().parents[2]
JAVA = ROOT / "jvm-shim" / "src" / "main" / "java" / "io" / "sparksteward" / "shim"
#: The Spark Connect server extensions, a source set compiled only against lines with Connect.
CONNECT_JAVA = ROOT / "jvm-shim" / "src" / "connect" / "java" / "io" / "sparksteward" / "shim"
PYTHON = ROOT / "python"

# -- reading the Java sources ---------------------------------------------------------------------

_TOKENS = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_DECLARATION = re.compile(
    r"\bstatic\s+final\s+(?:String|int|long|char|byte\s*\[\s*\])\s+([A-Z][A-Z0-9_]*)\s*=\s*"
    r"((?:\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'|[^;\"'])*);")
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
_GET_BYTES = re.compile(
    r'^("(?:\\.|[^"\\\n])*")\.getBytes\(\s*StandardCharsets\.(US_ASCII|UTF_8)\s*\)$')
_NUMBER = re.compile(r"^[0-9_xXa-fA-FL\s()<>*-]+$")


def _without_comments(text: str) -> str:
    """``text`` with comments blanked (newlines kept) and string and char literals untouched."""
    return _TOKENS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'"
                       else re.sub(r"[^\n]", " ", m.group(0)), text)


def java_file(cls: str) -> Path:
    """``<cls>.java`` in whichever package of the shim holds it; ``cls`` is a simple name, or a
    path from the shim's root package (``shim/streams/StreamCheckpointFiles``) for a name two
    packages share."""
    if "/" in cls:
        return JAVA.parent / f"{cls}.java"
    found = sorted(JAVA.rglob(f"{cls}.java")) + sorted(CONNECT_JAVA.rglob(f"{cls}.java"))
    assert len(found) == 1, f"{len(found)} files named {cls}.java under {JAVA}: {found}"
    return found[0]


def java_code(cls: str) -> str:
    """The code of ``<cls>.java``, comments blanked."""
    return _without_comments(java_file(cls).read_text(encoding="utf-8"))


def java_sources() -> dict[str, str]:
    """Every Java class of the shim, every package: name -> code, comments blanked. A name two
    packages share (a deprecated alias's) is given as its path, as :func:`java_file` takes it."""
    paths = sorted(JAVA.rglob("*.java")) + sorted(CONNECT_JAVA.rglob("*.java"))
    shared = {stem for stem, n in Counter(p.stem for p in paths).items() if n > 1}
    names = [p.relative_to(JAVA.parent).with_suffix("").as_posix() if p.stem in shared else p.stem
             for p in paths]
    return {name: java_code(name) for name in names}


def _java_literal(token: str) -> Any:
    """A Java string or char literal's value (their escapes are Python's for what the shim uses)."""
    return ast.literal_eval(token)


def _split_plus(expr: str) -> list[str]:
    """``expr`` split at its top-level ``+`` (none inside literals or parentheses)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'":
            end = i + 1
            while expr[end] != c:
                end += 2 if expr[end] == "\\" else 1
            i = end
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "+" and depth == 0:
            parts.append(expr[start:i])
            start = i + 1
        i += 1
    parts.append(expr[start:])
    return [p.strip() for p in parts]


def java_value(cls: str, name: str) -> Any:
    """The value of ``cls.name`` as javac folds it: literals, ``"..".getBytes(..)``, numbers
    with ``<<``, and ``+`` over those and other constants (``Other.NAME`` or a name of ``cls``)."""
    for found, expr in _DECLARATION.findall(java_code(cls)):
        if found == name:
            return _evaluate(cls, " ".join(expr.split()))
    raise AssertionError(f"{java_file(cls)} declares no constant {name}")


def _evaluate(cls: str, expr: str) -> Any:
    parts = _split_plus(expr)
    if len(parts) > 1:
        values = [_evaluate(cls, p) for p in parts]
        if any(isinstance(v, str) for v in values):
            return "".join(v if isinstance(v, str) else str(v) for v in values)
        return sum(values)
    if expr.startswith("(") and expr.endswith(")"):
        return _evaluate(cls, expr[1:-1].strip())
    got = _GET_BYTES.match(expr)
    if got:
        charset = "ascii" if got.group(2) == "US_ASCII" else "utf-8"
        return _java_literal(got.group(1)).encode(charset)
    if expr[0] in "\"'":
        return _java_literal(expr)
    if expr == "Integer.MAX_VALUE":
        return 2**31 - 1
    if re.fullmatch(r"(?:[A-Z][A-Za-z0-9]*\.)?[A-Z][A-Z0-9_]*", expr):
        owner, _, name = expr.rpartition(".")
        return java_value(owner or cls, name)
    if expr.startswith("Integer.MAX_VALUE"):
        return 2**31 - 1 - int(expr.split("-", 1)[1])
    if _NUMBER.match(expr):
        return eval(expr.replace("_", "").replace("L", ""), {"__builtins__": {}})  # digits only
    raise AssertionError(f"cannot read the value of {expr!r} in {cls}.java")


# -- the shared facts -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Shared:
    """One fact both runtimes hold: ``Class.NAME`` in the shim equals ``module:attr`` (after
    ``python_as``, which maps the Python owner's form to the Java one). ``unique``: the value is
    spelled out nowhere else in the Java code (off for words that also name other things)."""

    java: str
    python: str
    python_as: Callable[[Any], Any] = lambda v: v
    unique: bool = True

    @property
    def java_file(self) -> Path:
        return java_file(self.java.split(".")[0])

    def python_value(self) -> Any:
        module, attrs = self.python.split(":")
        value: Any = importlib.import_module(module)
        for attr in attrs.split("."):
            value = getattr(value, attr)
        return self.python_as(value)

    def python_file(self) -> Path:
        module = self.python.split(":")[0]
        path = PYTHON / module.replace(".", "/")
        return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _name(key: config.ConfigKey[Any]) -> str:
    return key.name


def _default(key: config.ConfigKey[Any]) -> str:
    """The default as config.py documents it: what the JVM uses when the key is unset."""
    return key.default_text


def _last_segment(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _have_header(temp_name: re.Pattern[str]) -> int:
    """The length of a download's temp-file name, the have-file's first line."""
    example = "." + "a" * 64 + ".tmp-" + "b" * 12
    assert temp_name.fullmatch(example), f"pieces._TEMP_NAME is {temp_name.pattern!r} now"
    return len(example)


SHARED = [
    # The prefix Python finds the shim's messages by (its own test below allows no other use).
    Shared("Errors.PREFIX", "spark_steward.kernel.jvm:JAVA_ERROR_PREFIX", unique=False),
    # The record of resolved values Python hands the shim (kernel/handover.py), the session
    # switches the shim reads, and config keys it names in messages. No Java default: the shim
    # has none to drift.
    Shared("Handover.KEY", "spark_steward.config:RESOLVED_KEY"),
    # The Connect command extension and its wire (kernel/remote_wire.py is Payload.java's twin).
    Shared("StewardCommands.COMMAND_TYPE", "spark_steward.kernel.remote_wire:COMMAND_TYPE"),
    Shared("StewardCommands.REPLY_TYPE", "spark_steward.kernel.remote_wire:REPLY_TYPE"),
    Shared("Payload.MAX_TEXT", "spark_steward.kernel.remote_wire:MAX_TEXT", unique=False),
    Shared("StewardPlugin.CONNECT_COMMANDS", "spark_steward.kernel.jvm:CONNECT_COMMAND_CLASS"),
    Shared("StewardPlugin.CONNECT_COMMANDS_KEY",
           "spark_steward.kernel.remote_server:COMMAND_CLASSES_KEY"),
    Shared("TaskContextRelay.FILE", "spark_steward.kernel.executor:RELAY_FILE"),
    # The Connect interceptor and extension conf --server names, and the key they read.
    Shared("StewardPlugin.CONNECT_INTERCEPTOR",
           "spark_steward.blob.connect_artifacts:INTERCEPTOR_CLASS"),
    Shared("StewardPlugin.CONNECT_INTERCEPTORS_KEY",
           "spark_steward.blob.connect_artifacts:INTERCEPTOR_KEY"),
    Shared("TransparentCaches.KEY", "spark_steward.tables.config_keys:CACHE_TRANSPARENT", _name),
    Shared("ConnectArtifacts.ENDED_FILE", "spark_steward.local.executor:ENDED_SESSIONS_FILE"),
    Shared("Handover.VERSION", "spark_steward.kernel.handover:VERSION", unique=False),
    Shared("Handover.EXIT_CONFIG_ERROR", "spark_steward.kernel.handover:EXIT_CONFIG_ERROR",
           unique=False),
    Shared("Handover.PREFIX", "spark_steward.config:PREFIX"),
    Shared("Handover.ENABLED_KEY", "spark_steward.config:ENABLED", _name),
    Shared("LocalDirs.LOCAL_DIR_KEY", "spark_steward.config:LOCAL_DIR", _name),
    Shared("ReplicaFileSystem.LOCAL_MAX_BYTES_KEY", "spark_steward.config:LOCAL_MAX_BYTES", _name),
    Shared("StreamFiles.STREAMS_ENABLED_KEY", "spark_steward.config:STREAMS_ENABLED", _name),
    Shared("StreamFiles.DELEGATE_KEY", "spark_steward.config:STREAMS_DELEGATE_CLASS", _name),
    Shared("StreamFiles.CLASS_KEY", "spark_steward.streams.service:CLASS_KEY"),
    Shared("ReplicaFileSystem.CONF_PREFIX", "spark_steward.tables.replicas:CONF_PREFIX"),
    Shared("CachedTables.EXPLAIN_PROPERTY", "spark_steward.tables.hooks:EXPLAIN_PROPERTY"),
    # The peer protocol of the blob capability (Python client, Java server). Words that also
    # name a reply field or a throttled warning's kind ("have", "auth", "busy",
    # "bad_request") are not unique.
    Shared("PeerProtocol.PROTOCOL_VERSION", "spark_steward.blob.protocol:PROTOCOL_VERSION",
           unique=False),
    Shared("PeerProtocol.HEADER_SIZE", "spark_steward.blob.protocol:HEADER_SIZE", unique=False),
    Shared("PeerHandshake.AUTH_DOMAIN", "spark_steward.blob.protocol:_AUTH_DOMAIN"),
    Shared("PeerProtocol.AUTH_FRAME", "spark_steward.blob.server:_AUTH_FRAME", unique=False),
    Shared("PeerRequest.MIN_PIECE", "spark_steward.blob.pieces:MIN_PIECE", unique=False),
    Shared("PeerRequest.MAX_PIECE", "spark_steward.blob.pieces:MAX_PIECE", unique=False),
    Shared("PeerRequest.MAX_PIECES", "spark_steward.blob.pieces:MAX_PIECES", unique=False),
    Shared("PeerRequest.MAX_SIZE", "spark_steward.blob.pieces:MAX_BLOB", unique=False),
    Shared("PieceFiles.HAVE_SUFFIX", "spark_steward.blob.pieces:HAVE_SUFFIX"),
    Shared("PieceFiles.HAVE_HEADER", "spark_steward.blob.pieces:_TEMP_NAME", _have_header,
           unique=False),
    Shared("PieceFiles.BLOB_CACHE", "spark_steward.blob.cache:BlobCache.FOLDER"),
    Shared("PeerProtocol.OP_HAVE", "spark_steward.blob.protocol:OP_HAVE", unique=False),
    Shared("PeerProtocol.OP_PIECE", "spark_steward.blob.protocol:OP_PIECE", unique=False),
    Shared("PeerProtocol.ERROR_AUTH", "spark_steward.blob.protocol:ERROR_AUTH", unique=False),
    Shared("PeerProtocol.ERROR_BUSY", "spark_steward.blob.protocol:ERROR_BUSY", unique=False),
    Shared("PeerProtocol.ERROR_BAD_REQUEST", "spark_steward.blob.protocol:ERROR_BAD_REQUEST",
           unique=False),
    Shared("PeerProtocol.ERROR_NOT_FOUND", "spark_steward.blob.protocol:ERROR_NOT_FOUND"),
    Shared("PeerProtocol.ERROR_INTERNAL", "spark_steward.blob.protocol:ERROR_INTERNAL"),
    # The host-local working dir's manifest (Python writes it, the JVM's replicas too).
    Shared("LocalManifest.FOLDER", "spark_steward.local.working_dir:MANIFEST", unique=False),
    Shared("LocalManifest.COMPLETE", "spark_steward.local.working_dir:COMPLETE"),
    Shared("LocalManifest.WRITING", "spark_steward.local.working_dir:WRITING", unique=False),
    Shared("LocalManifest.FORMAT", "spark_steward.records:FORMAT", unique=False),
    Shared("ReplicaFileSystem.FOLDER", "spark_steward.local.working_dir:JVM_WRITTEN",
           lambda names: names[0]),
    Shared("ReplicaFileSystem.SCHEME", "spark_steward.tables.replicas:SCHEME"),
    # A streaming checkpoint location's own folder and its packs (Python packs, Java reads).
    Shared("StreamFiles.INTENTS", "spark_steward.streams.lifecycle.locations:INTENTS_FOLDER"),
    Shared("StreamPacks.FOLDER", "spark_steward.streams.lifecycle.packs:PACKS_FOLDER"),
    Shared("StreamPacks.TOMBSTONES", "spark_steward.streams.lifecycle.packs:TOMBSTONES_FOLDER",
           _last_segment, unique=False),
    Shared("StreamPacks.CATALOG", "spark_steward.streams.lifecycle.packs:CATALOG", _last_segment),
    Shared("StreamPacks.MAGIC", "spark_steward.streams.packs:MAGIC"),
    Shared("StreamPacks.TRAILER", "spark_steward.streams.packs:TRAILER", lambda s: s.size,
           unique=False),
    Shared("StreamPacks.MAX_INDEX", "spark_steward.streams.packs:MAX_INDEX_BYTES", unique=False),
    Shared("StreamPacks.MAX_TOMBSTONES", "spark_steward.streams.packs:MAX_TOMBSTONE_BYTES",
           unique=False),
    Shared("StreamPacks.MAX_CATALOG", "spark_steward.streams.packs:MAX_CATALOG_BYTES",
           unique=False),
    Shared("StreamPacks.MAX_MEMBER", "spark_steward.streams.packer:MAX_PACK_BYTES", unique=False),
    # The driver runtime the plugin hosts (RuntimeHost starts it, kernel/host.py runs it).
    Shared("RuntimeHost.MODULE", "spark_steward.kernel.host:MODULE"),
    Shared("RuntimeHost.STOP_LINE", "spark_steward.kernel.host:STOP_LINE", unique=False),
    Shared("RuntimeHost.DRIVER_PID_ENV", "spark_steward.kernel.host:DRIVER_PID_ENV"),
    # The stream of a merged checkpoint's segments (Java encodes, Python stores).
    Shared("SegmentCodec.DATA", "spark_steward.checkpoint.merging.segment_files:DATA", chr,
           unique=False),
    Shared("SegmentCodec.END", "spark_steward.checkpoint.merging.segment_files:END", chr,
           unique=False),
]


@pytest.mark.parametrize("fact", SHARED, ids=lambda f: f.java)
def test_java_constant_equals_its_python_owner(fact: Shared) -> None:
    cls, name = fact.java.split(".")
    java, python = java_value(cls, name), fact.python_value()
    assert java == python, (
        f"{fact.java} = {java!r} ({fact.java_file.relative_to(ROOT)}) but {fact.python} = "
        f"{python!r} ({fact.python_file().relative_to(ROOT)}): the two runtimes drifted; change "
        f"both together")


def _literals(code: str) -> list[str]:
    return [_java_literal(t) for t in _STRING.findall(code)]


def _declared_literals(code: str) -> list[str]:
    """The string literals of ``code`` that are a constant's whole declared value."""
    return [_java_literal(expr.strip()) for _, expr in _DECLARATION.findall(code)
            if _STRING.fullmatch(expr.strip())]


@pytest.mark.parametrize("fact", [f for f in SHARED if f.unique], ids=lambda f: f.java)
def test_no_java_file_spells_out_a_shared_value(fact: Shared) -> None:
    """Only the owner declares the value; everyone else names the constant."""
    cls, name = fact.java.split(".")
    value = java_value(cls, name)
    text = value.decode("ascii") if isinstance(value, bytes) else value
    places = [f"{other}.java" for other, code in java_sources().items()
              for literal in _literals(code) if text and literal == text]
    assert places == [f"{cls}.java"], (
        f"the value {text!r} of {fact.java} is spelled out in {places}: write {fact.java} "
        f"outside its declaration")




def test_only_errors_spells_out_the_error_prefix() -> None:
    prefix = java_value("Errors", "PREFIX")
    offenders = []
    for cls, code in java_sources().items():
        starting = [lit for lit in _literals(code) if lit.startswith(prefix.rstrip())]
        allowed = 1 if cls == "Errors" else 0
        if len(starting) > allowed:
            offenders.append(f"{cls}.java: {starting[allowed:][:3]}")
    assert not offenders, (
        f"Java messages must start with Errors.PREFIX ({java_file('Errors').relative_to(ROOT)}), "
        f"not the spelled-out {prefix!r}: " + "; ".join(offenders))


# -- config keys ----------------------------------------------------------------------------------

_KEY = re.compile(r"spark\.steward\.[a-z0-9.-]*")


def _python_owned_names() -> dict[str, str]:
    """Names under ``spark.steward.`` that are not keys of config.KEYS, by their Python owner."""
    from spark_steward.tables import hooks, replicas
    return {config.PREFIX: "spark_steward.config:PREFIX",
            config.STORAGE_OPTION_PREFIX: "spark_steward.config:STORAGE_OPTION_PREFIX",
            config.RESOLVED_KEY: "spark_steward.config:RESOLVED_KEY",
            replicas.CONF_PREFIX: "spark_steward.tables.replicas:CONF_PREFIX",
            hooks.EXPLAIN_PROPERTY: "spark_steward.tables.hooks:EXPLAIN_PROPERTY"}


def test_every_java_config_key_is_defined_in_python() -> None:
    """A key renamed or removed in config.py cannot live on in the shim."""
    owned = _python_owned_names()
    unknown = []
    for cls, code in java_sources().items():
        for literal in _literals(code):
            if not literal.startswith("spark.steward."):
                continue
            key = _KEY.match(literal).group(0)  # type: ignore[union-attr]
            if key not in config.KEYS and key not in owned:
                unknown.append(f"{cls}.java: {key!r}")
    assert not unknown, (
        "the shim names spark.steward.* keys that python/spark_steward/config.py does not define "
        "(nor another Python owner): " + ", ".join(unknown))


def test_each_java_config_key_is_declared_once() -> None:
    """One constant per key: a key literal only as a constant's declared value, in one class."""
    seen: dict[str, list[str]] = {}
    inline = []
    for cls, code in java_sources().items():
        declared = Counter(_declared_literals(code))
        for literal, uses in Counter(_literals(code)).items():
            if literal.startswith("spark.steward."):
                seen.setdefault(literal, []).append(cls)
                if uses > declared[literal]:
                    inline.append(f"{cls}.java: {literal!r}")
    repeated = {k: v for k, v in seen.items() if len(v) > 1}
    assert not inline and not repeated, (
        f"spark.steward.* literals outside a constant's declaration: {inline}; declared in more "
        f"than one place: {repeated}")


# -- events ---------------------------------------------------------------------------------------

_EVENT_CALL = re.compile(
    r"(?:EventEncoder\.event|\btask|\boffer)\(\s*"
    r"(\"\w+\"|(?:[A-Z][A-Za-z0-9]*\.)?[A-Z][A-Z0-9_]*\b)")


def test_java_event_types_are_the_ones_python_decodes() -> None:
    from spark_steward.kernel import events
    java: dict[str, str] = {}
    for cls, code in java_sources().items():
        for arg in _EVENT_CALL.findall(code):
            owner, _, name = arg.rpartition(".")
            value = _java_literal(arg) if arg[0] == '"' else java_value(owner or cls, name)
            java[value] = cls
    python = set(events._DECODERS)
    assert set(java) == python, (
        f"event types the shim sends but {events.__name__} does not decode: "
        f"{sorted(set(java) - python)} (from {[java[t] for t in sorted(set(java) - python)]}); "
        f"decoded but never sent: {sorted(python - set(java))}")


def test_java_batch_fields_are_the_ones_python_reads() -> None:
    code = java_code("EventEncoder")
    batch = code[code.index(" batch("):]
    batch = batch[:batch.index("toString()")]
    java = set(re.findall(r'\\"(\w+)\\":', batch))
    source = (PYTHON / "spark_steward" / "kernel" / "events.py").read_text(encoding="utf-8")
    python = set(re.findall(r'raw\["(\w+)"\]', source))
    where = java_file("EventEncoder").relative_to(ROOT)
    assert java == python, (
        f"EventEncoder.batch writes {sorted(java)} ({where}) but "
        f"decode_batch reads {sorted(python)} (python/spark_steward/kernel/events.py)")


# -- the reader itself ----------------------------------------------------------------------------

def test_reader_folds_what_javac_folds() -> None:
    prefix = java_value("Errors", "PREFIX")
    assert _evaluate("Errors", 'PREFIX + "checkpoint data "') == prefix + "checkpoint data "
    assert _evaluate("Errors", '"a" + 1 + "b"') == "a1b"
    assert _evaluate("Errors", "256 << 20") == 256 << 20
    assert _evaluate("Errors", "1L << 50") == 1 << 50
    assert _evaluate("Errors", '"STWPACK1".getBytes(StandardCharsets.US_ASCII)') == b"STWPACK1"
    assert _evaluate("Errors", "Integer.MAX_VALUE - 64") == 2**31 - 65
    assert _without_comments('a /* "x" */ "/* y */" // z\nb') == 'a           "/* y */"     \nb'


_FIELD = re.compile(r'static\s+final\s+String\s+\w+_FIELD\s*=\s*"([a-z0-9_]+)"')


def test_the_handover_fields_each_side_names_are_the_same() -> None:
    """Each JVM handover field Python declares (the kernel's in kernel/handover.py, a
    capability's as ``JVM_VALUES`` of its config module) is a ``*_FIELD`` constant of that
    capability's package in the shim, and the shim reads no field Python does not write."""
    from spark_steward import capabilities
    from spark_steward.kernel.handover import KERNEL_VALUES

    python = {"kernel": {v.field for v in KERNEL_VALUES}}
    for capability, module in capabilities.loaded("config"):
        package = module.__name__.split(".")[1]
        python.setdefault(package, set()).update(v.field for v in getattr(module, "JVM_VALUES", ()))
    java: dict[str, set[str]] = {}
    for path in JAVA.rglob("*.java"):
        package = path.parent.name
        java.setdefault(package, set()).update(_FIELD.findall(path.read_text()))
    assert {k: v for k, v in java.items() if v} == {k: v for k, v in python.items() if v}
