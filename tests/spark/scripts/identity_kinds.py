"""Pairs of plans that differ in one thing, for the differential test of shared cached tables.

Each kind builds a DataFrame in a session of its own: the *base* in the first applications, the
*variant* in the second. A variant differs from its base in exactly one input: a reader option,
a SQL setting, the code of a Python function (by value or imported by reference), a broadcast,
an input file rewritten with its size and mtime kept, the rows of local data, an output name.
A *control* differs in nothing and must be shared. The test compares, in the second application,
what ``spark_steward.cache(df, shared=True)`` returns with ``df`` computed directly: a kind whose
variant got the base's key and files would show as wrong rows.

Files and modules are laid out by :func:`prepare` (base) and changed by :func:`vary` between the
applications; modules live in ``<workdir>/mods``, on the PYTHONPATH of driver and executors.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

CONTROL = "control"
#: Kinds whose rows spark-steward cannot pin down: never shared, in any application.
REFUSED = ("python-data-source", "python-rows", "udtf-nondeterministic")
#: What the second of the two concurrent first applications caches: enough to race on the same
#: keys (file, SQL, local data and Python code), not every kind twice.
RACED = ("csv-control", "parquet-control", "sql-control", "local-control",
         "udf-module-control", "pandas-udf-control")


@dataclass(frozen=True)
class Kind:
    name: str
    source: str  # csv, json, parquet, orc, text, python-ds, sql, udf, local, range
    build: Callable[[Any, Path, bool], Any]
    base_conf: dict[str, str] = field(default_factory=dict)
    variant_conf: dict[str, str] = field(default_factory=dict)
    role: str = "variant"  # or CONTROL: nothing differs, must share


# -- files ---------------------------------------------------------------------------------------

def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _rewrite_keeping_size_and_mtime(path: Path, text: str) -> None:
    """What ``cp -p`` or ``rsync -t`` of a same-size file does: new bytes, old size and mtime."""
    st = path.stat()
    assert len(text.encode()) == st.st_size, (path, len(text.encode()), st.st_size)
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, path)


def _module(workdir: Path, name: str, body: str) -> None:
    _write(workdir / "mods" / f"{name}.py", textwrap.dedent(body))


CSV_ROWS = "1;x,1;2020-01-01 10:00:00\n2;y,2;2020-06-01 23:30:00\n3;z;2020-12-31 00:00:01\n"
JSON_ROWS = ('{"a": 1, "b": "x", "ts": "2020-01-01 10:00:00"}\n'
             '{"a": 2, "b": "y", "ts": "2020-06-01 23:30:00"} // two\n'
             '{"a": 3, "b": "z", "ts": "2020-12-31 00:00:01"}\n')


def prepare(workdir: Path) -> None:
    """The base inputs and modules, before the first applications."""
    _write(workdir / "csv" / "rows.csv", CSV_ROWS)
    _write(workdir / "csvh" / "rows.csv", "a,b\n1,2\n3,4\n")
    _write(workdir / "csvq" / "rows.csv", "'a,b',\"c,d\"\n'e',\"f\"\n")
    _write(workdir / "csvw" / "rows.csv", "  a,1\n  b,2\n")
    _write(workdir / "csvc" / "rows.csv", "#c,1\nd,2\n")
    _write(workdir / "csvbad" / "rows.csv", "1,2\nx,3\n4,5\n")
    _write(workdir / "csvrw" / "rows.csv", "1,aaaa\n2,bbbb\n")
    _write(workdir / "csvadd" / "part-0.csv", "1,a\n2,b\n")
    _write(workdir / "json" / "rows.json", JSON_ROWS.replace(" // two", ""))
    _write(workdir / "jsonc" / "rows.json", JSON_ROWS)
    _write(workdir / "jsonrw" / "rows.json", '{"a": 1}\n{"a": 2}\n')
    _write(workdir / "text" / "rows.txt", "one;two\nthree;four\n")
    _write(workdir / "textrw" / "rows.txt", "alpha\nbeta\n")
    _write(workdir / "ts" / "rows.csv", "2020-01-02 03:04:05\n2020-07-08 09:10:11\n")
    _parquet(workdir)
    _modules(workdir, version=1)
    (workdir / "broadcast.json").write_text(json.dumps({"factor": 3}))


def _parquet(workdir: Path) -> None:
    import pyarrow as pa
    import pyarrow.orc as orc
    import pyarrow.parquet as pq

    def table(values: list[int]) -> Any:
        return pa.table({"a": pa.array(values, pa.int64()),
                         "b": pa.array([f"v{v:04d}" for v in values]),
                         "raw": pa.array([f"r{v}".encode() for v in values], pa.binary())})

    for name in ("parquet", "parquetrw", "parquetglob"):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    pq.write_table(table([1, 2, 3]), workdir / "parquet" / "p0.parquet", compression="none",
                   write_statistics=False)
    pq.write_table(table([1, 2, 3]), workdir / "parquetrw" / "p0.parquet", compression="none",
                   write_statistics=False)
    pq.write_table(table([1, 2]), workdir / "parquetglob" / "one.parquet")
    pq.write_table(table([7, 8]), workdir / "parquetglob" / "two.parquet")
    merge = workdir / "parquetmerge"
    merge.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"a": [1, 2]}), merge / "m0.parquet")
    pq.write_table(pa.table({"a": [3], "c": ["extra"]}), merge / "m1.parquet")
    for name in ("orc", "orcmerge"):
        (workdir / name).mkdir(parents=True, exist_ok=True)
    orc.write_table(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"]}), workdir / "orc" / "o.orc")
    orc.write_table(pa.table({"a": [1, 2]}), workdir / "orcmerge" / "o0.orc")
    orc.write_table(pa.table({"a": [3], "c": ["extra"]}), workdir / "orcmerge" / "o1.orc")


def _modules(workdir: Path, version: int) -> None:
    step = version  # v1 adds 1, v2 adds 2: the code changes, the pickled reference does not
    _module(workdir, "dm_udf", f"""
        def bump(x):
            return x + {step}
        """)
    _module(workdir, "dm_const", f"""
        OFFSET = {10 * step}

        def shift(x):
            return x + OFFSET
        """)
    _module(workdir, "dm_helper", f"""
        def scale(x):
            return x * {step + 1}
        """)
    _module(workdir, "dm_outer", """
        import dm_inner

        def through(x):
            return dm_inner.inner(x)
        """)
    _module(workdir, "dm_inner", f"""
        def inner(x):
            return x - {step}
        """)
    _module(workdir, "dm_pandas", f"""
        def plus(s):
            return s + {step}
        """)
    _module(workdir, "dm_udtf", f"""
        class Repeat:
            def eval(self, n: int):
                for i in range(n + {step}):
                    yield (i,)
        """)
    _module(workdir, "dm_same", """
        def same(x):
            return x * 5
        """)


def vary(workdir: Path) -> None:
    """Every change of a file or module the variants need, between the applications."""
    _rewrite_keeping_size_and_mtime(workdir / "csvrw" / "rows.csv", "1,aaab\n2,bbbb\n")
    _rewrite_keeping_size_and_mtime(workdir / "jsonrw" / "rows.json", '{"a": 7}\n{"a": 2}\n')
    _rewrite_keeping_size_and_mtime(workdir / "textrw" / "rows.txt", "alpha\nbeto\n")
    _write(workdir / "csvadd" / "part-1.csv", "3,c\n")
    _vary_parquet(workdir)
    for name in ("dm_udf", "dm_const", "dm_helper", "dm_inner", "dm_pandas", "dm_udtf"):
        (workdir / "mods" / f"{name}.py").unlink()
    _modules(workdir, version=2)
    (workdir / "broadcast.json").write_text(json.dumps({"factor": 4}))


def _vary_parquet(workdir: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = workdir / "parquetrw" / "p0.parquet"
    st = target.stat()
    tmp = workdir / "p0.tmp"
    pq.write_table(pa.table({"a": pa.array([1, 2, 4], pa.int64()),
                             "b": pa.array(["v0001", "v0002", "v0004"]),
                             "raw": pa.array([b"r1", b"r2", b"r4"], pa.binary())}),
                   tmp, compression="none", write_statistics=False)
    assert tmp.stat().st_size == st.st_size, "the rewrite must keep the size"
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    shutil.move(str(tmp), str(target))


# -- the kinds -----------------------------------------------------------------------------------

def _csv(option: str, base: str, variant: str, folder: str = "csvh",
         schema: str | None = None) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        reader = spark.read.option(option, variant if is_variant else base)
        if schema:
            reader = reader.schema(schema)
        return reader.csv(str(workdir / folder))
    return build


def _reader(fmt: str, folder: str, options: tuple[dict[str, str], dict[str, str]] = ({}, {}),
            schema: tuple[str | None, str | None] = (None, None),
            select: str | None = None) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        reader = spark.read.format(fmt).options(**options[is_variant])
        chosen = schema[is_variant]
        if chosen:
            reader = reader.schema(chosen)
        df = reader.load(str(workdir / folder))
        return df.selectExpr(select) if select else df
    return build


def _sql(expression: str) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        return spark.range(3).selectExpr("id", f"{expression} AS v")
    return build


def _udf_by_reference(module: str, function: str) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        import importlib

        from pyspark.sql import functions as F

        func = getattr(importlib.import_module(module), function)
        return spark.range(4).select("id", F.udf(func, "long")("id").alias("v"))
    return build


def _udf_calling_module(spark: Any, workdir: Path, is_variant: bool) -> Any:
    import dm_helper  # imported by the function below: pickled as a module reference

    from pyspark.sql import functions as F

    def twice_scaled(x: int) -> int:  # by value; its module reference is not
        return 2 * dm_helper.scale(x)

    return spark.range(4).select("id", F.udf(twice_scaled, "long")("id").alias("v"))


def _udf_closure(spark: Any, workdir: Path, is_variant: bool) -> Any:
    from pyspark.sql import functions as F

    bonus = 5 if is_variant else 4

    def with_bonus(x: int) -> int:
        return x + bonus

    return spark.range(4).select("id", F.udf(with_bonus, "long")("id").alias("v"))


def _udf_same_closure(spark: Any, workdir: Path, is_variant: bool) -> Any:
    from pyspark.sql import functions as F

    def cube(x: int) -> int:
        return x * x * x

    return spark.range(4).select("id", F.udf(cube, "long")("id").alias("v"))


def _udf_broadcast(spark: Any, workdir: Path, is_variant: bool) -> Any:
    from pyspark.sql import functions as F

    factor = json.loads((workdir / "broadcast.json").read_text())["factor"]
    shared = spark.sparkContext.broadcast({"factor": factor})

    def times(x: int) -> int:
        return x * shared.value["factor"]

    return spark.range(4).select("id", F.udf(times, "long")("id").alias("v"))


def _pandas_udf(module: str) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        import importlib

        from pyspark.sql.functions import pandas_udf

        func = getattr(importlib.import_module(module), "plus" if module == "dm_pandas"
                       else "same")
        return spark.range(4).select("id", pandas_udf(func, "long")("id").alias("v"))
    return build


def _udtf(deterministic: bool) -> Callable[[Any, Path, bool], Any]:
    def build(spark: Any, workdir: Path, is_variant: bool) -> Any:
        import dm_udtf

        from pyspark.sql.functions import lit, udtf

        table_function = udtf(dm_udtf.Repeat, returnType="i: int")
        if deterministic:  # UDTFs are nondeterministic unless declared otherwise
            table_function = table_function.asDeterministic()
        return table_function(lit(2))
    return build


def _python_data_source(spark: Any, workdir: Path, is_variant: bool) -> Any:
    from pyspark.sql.datasource import DataSource, DataSourceReader

    count = 3 if is_variant else 2

    class Reader(DataSourceReader):
        def read(self, partition: Any) -> Any:
            for i in range(count):
                yield (i,)

    class Counting(DataSource):
        @classmethod
        def name(cls) -> str:
            return "identity_counting"

        def schema(self) -> str:
            return "i int"

        def reader(self, schema: Any) -> Any:
            return Reader()

    spark.dataSource.register(Counting)
    return spark.read.format("identity_counting").load()


def _local(spark: Any, workdir: Path, is_variant: bool) -> Any:
    # a local relation whose rows print alike but differ: ("a,b", "c") and ("a", "b,c")
    rows = "('a', 'b,c')" if is_variant else "('a,b', 'c')"
    return spark.sql(f"SELECT * FROM VALUES {rows} AS t(x, y)")


def _local_same(spark: Any, workdir: Path, is_variant: bool) -> Any:
    return spark.sql("SELECT * FROM VALUES (1, 'one'), (2, 'two') AS t(n, s)")


def _python_rows(spark: Any, workdir: Path, is_variant: bool) -> Any:
    # createDataFrame of a list is an RDD in classic pyspark: its content cannot be identified
    return spark.createDataFrame([(1, "one")] if is_variant else [(2, "two")], "n int, s string")


def _alias(spark: Any, workdir: Path, is_variant: bool) -> Any:
    return spark.range(3).selectExpr("id AS y" if is_variant else "id AS x")


def _wide(spark: Any, workdir: Path, is_variant: bool) -> Any:
    columns = [f"id + {i} AS c{i}" for i in range(30)]
    if is_variant:
        columns[28] = "id + 1000 AS c28"  # past the 25 fields a plan's text shows by default
    return spark.range(2).selectExpr(*columns)


def _range(spark: Any, workdir: Path, is_variant: bool) -> Any:
    return spark.range(11 if is_variant else 10).selectExpr("sum(id) AS s")


def _ts_csv(spark: Any, workdir: Path, is_variant: bool) -> Any:
    return (spark.read.schema("ts timestamp").csv(str(workdir / "ts"))
            .selectExpr("CAST(ts AS long) AS seconds"))


def _parquet_binary(spark: Any, workdir: Path, is_variant: bool) -> Any:
    return spark.read.parquet(str(workdir / "parquet")).selectExpr("CAST(raw AS string) AS s",
                                                                   "typeof(raw) AS t")


KINDS: list[Kind] = [
    # CSV
    Kind("csv-sep", "csv", _csv("sep", ";", ",", folder="csv")),
    Kind("csv-header", "csv", _csv("header", "false", "true")),
    Kind("csv-infer-schema", "csv", _csv("inferSchema", "false", "true")),
    Kind("csv-user-schema", "csv", _reader("csv", "csvh", schema=("a INT, b INT",
                                                                   "a STRING, b STRING"))),
    Kind("csv-null-value", "csv", _csv("nullValue", "", "1")),
    Kind("csv-quote", "csv", _csv("quote", '"', "'", folder="csvq")),
    Kind("csv-leading-space", "csv", _csv("ignoreLeadingWhiteSpace", "false", "true",
                                          folder="csvw")),
    Kind("csv-comment", "csv", _csv("comment", "\u0000", "#", folder="csvc")),
    Kind("csv-mode", "csv", _csv("mode", "PERMISSIVE", "DROPMALFORMED", folder="csvbad",
                                 schema="a INT, b INT")),
    Kind("csv-timestamp-format", "csv", _reader(
        "csv", "ts", ({"timestampFormat": "yyyy-MM-dd HH:mm:ss"},
                      {"timestampFormat": "yyyy-dd-MM HH:mm:ss"}),
        schema=("ts TIMESTAMP", "ts TIMESTAMP"), select="CAST(ts AS long) AS seconds"),
         {"spark.sql.legacy.timeParserPolicy": "CORRECTED", "spark.sql.ansi.enabled": "false"},
         {"spark.sql.legacy.timeParserPolicy": "CORRECTED", "spark.sql.ansi.enabled": "false"}),
    Kind("csv-timestamps-time-zone", "csv", _ts_csv, {"spark.sql.session.timeZone": "UTC"},
         {"spark.sql.session.timeZone": "Asia/Tokyo"}),
    Kind("csv-same-size-rewrite", "csv", _reader("csv", "csvrw")),
    Kind("csv-file-added", "csv", _reader("csv", "csvadd")),
    Kind("csv-control", "csv", _reader("csv", "csvh", ({"header": "true"}, {"header": "true"})),
         role=CONTROL),
    # JSON
    Kind("json-primitives-as-string", "json", _reader(
        "json", "json", ({"primitivesAsString": "false"}, {"primitivesAsString": "true"}))),
    Kind("json-user-schema", "json", _reader("json", "json",
                                             schema=("a LONG, b STRING", "a STRING, b STRING"))),
    Kind("json-allow-comments", "json", _reader(
        "json", "jsonc", ({"allowComments": "false", "mode": "PERMISSIVE"},
                          {"allowComments": "true", "mode": "PERMISSIVE"}),
        schema=("a LONG, b STRING", "a LONG, b STRING"))),
    Kind("json-mode", "json", _reader(
        "json", "jsonc", ({"mode": "PERMISSIVE"}, {"mode": "DROPMALFORMED"}),
        schema=("a LONG, b STRING", "a LONG, b STRING"))),
    Kind("json-timestamps-time-zone", "json", _reader(
        "json", "json", schema=("ts TIMESTAMP", "ts TIMESTAMP"),
        select="CAST(ts AS long) AS seconds"),
         {"spark.sql.session.timeZone": "UTC"}, {"spark.sql.session.timeZone": "Asia/Tokyo"}),
    Kind("json-same-size-rewrite", "json", _reader("json", "jsonrw")),
    Kind("json-control", "json", _reader("json", "json"), role=CONTROL),
    # Parquet
    Kind("parquet-same-size-rewrite", "parquet", _reader("parquet", "parquetrw")),
    Kind("parquet-user-schema", "parquet", _reader("parquet", "parquet",
                                                   schema=("a LONG, b STRING", "a LONG"))),
    Kind("parquet-binary-as-string", "parquet", _parquet_binary,
         {"spark.sql.parquet.binaryAsString": "false"},
         {"spark.sql.parquet.binaryAsString": "true"}),
    Kind("parquet-merge-schema", "parquet", _reader(
        "parquet", "parquetmerge", ({"mergeSchema": "false"}, {"mergeSchema": "true"}))),
    Kind("parquet-glob-filter", "parquet", _reader(
        "parquet", "parquetglob", ({"pathGlobFilter": "*.parquet"},
                                   {"pathGlobFilter": "t*.parquet"}))),
    Kind("parquet-control", "parquet", _reader("parquet", "parquet"), role=CONTROL),
    # ORC
    Kind("orc-user-schema", "orc", _reader("orc", "orc", schema=("a LONG, b STRING", "a LONG"))),
    Kind("orc-merge-schema", "orc", _reader(
        "orc", "orcmerge", ({"mergeSchema": "false"}, {"mergeSchema": "true"}))),
    Kind("orc-control", "orc", _reader("orc", "orc"), role=CONTROL),
    # text
    Kind("text-whole", "text", _reader("text", "text", ({"wholetext": "false"},
                                                        {"wholetext": "true"}))),
    Kind("text-line-separator", "text", _reader("text", "text", ({"lineSep": "\n"},
                                                                 {"lineSep": ";"}))),
    Kind("text-same-size-rewrite", "text", _reader("text", "textrw")),
    # a Python data source: its rows come from code that reads what it wants
    Kind("python-data-source", "python-ds", _python_data_source),
    # SQL settings and functions
    Kind("sql-time-zone", "sql", _sql("CAST(timestamp_seconds(id * 40000) AS string)"),
         {"spark.sql.session.timeZone": "UTC"}, {"spark.sql.session.timeZone": "Asia/Tokyo"}),
    Kind("sql-from-unixtime-zone", "sql", _sql("from_unixtime(id * 3600)"),
         {"spark.sql.session.timeZone": "UTC"},
         {"spark.sql.session.timeZone": "America/Los_Angeles"}),
    Kind("sql-ansi-coercion", "sql", _sql("CAST('1' + id AS string)"),
         {"spark.sql.ansi.enabled": "true"}, {"spark.sql.ansi.enabled": "false"}),
    Kind("sql-statistical-aggregate", "sql", lambda spark, w, v: spark.range(1).selectExpr(
        "CAST(stddev_samp(id) AS string) AS s"),
         {"spark.sql.legacy.statisticalAggregate": "false"},
         {"spark.sql.legacy.statisticalAggregate": "true"}),
    Kind("sql-size-of-null", "sql", _sql("size(CASE WHEN id > 0 THEN array(id) END)"),
         {"spark.sql.ansi.enabled": "false", "spark.sql.legacy.sizeOfNull": "true"},
         {"spark.sql.ansi.enabled": "false", "spark.sql.legacy.sizeOfNull": "false"}),
    Kind("sql-complex-to-string", "sql", _sql("CAST(array(id, NULL) AS string)"),
         {"spark.sql.legacy.castComplexTypesToString.enabled": "false"},
         {"spark.sql.legacy.castComplexTypesToString.enabled": "true"}),
    Kind("sql-decimal-precision-loss", "sql", _sql(
        "CAST(CAST(id + 1 AS decimal(38, 10)) / CAST(3 AS decimal(38, 10)) AS string)"),
         {"spark.sql.decimalOperations.allowPrecisionLoss": "true"},
         {"spark.sql.decimalOperations.allowPrecisionLoss": "false"}),
    Kind("sql-performance-knobs-differ", "sql", lambda spark, w, v: spark.range(20).selectExpr(
        "id % 3 AS k").groupBy("k").count(),
         {"spark.sql.shuffle.partitions": "3", "spark.sql.adaptive.enabled": "true"},
         {"spark.sql.shuffle.partitions": "5", "spark.sql.adaptive.enabled": "false"},
         role=CONTROL),
    Kind("sql-wide-projection", "sql", _wide),
    Kind("sql-output-name", "sql", _alias),
    Kind("sql-range", "range", _range),
    Kind("sql-control", "sql", _sql("id * 2"), role=CONTROL),
    # local data
    Kind("local-rows", "local", _local),
    Kind("local-control", "local", _local_same, role=CONTROL),
    Kind("python-rows", "local", _python_rows),
    # Python functions
    Kind("udf-module-code", "udf", _udf_by_reference("dm_udf", "bump")),
    Kind("udf-module-constant", "udf", _udf_by_reference("dm_const", "shift")),
    Kind("udf-module-imports-changed-module", "udf", _udf_by_reference("dm_outer", "through")),
    Kind("udf-by-value-calls-module", "udf", _udf_calling_module),
    Kind("udf-closure-value", "udf", _udf_closure),
    Kind("udf-broadcast-content", "udf", _udf_broadcast),
    Kind("udf-arrow-optimized", "udf", _udf_same_closure,
         {"spark.sql.execution.pythonUDF.arrow.enabled": "false"},
         {"spark.sql.execution.pythonUDF.arrow.enabled": "true"}),
    Kind("pandas-udf-module-code", "udf", _pandas_udf("dm_pandas")),
    Kind("udtf-module-code", "udf", _udtf(deterministic=True)),
    Kind("udtf-nondeterministic", "udf", _udtf(deterministic=False)),
    Kind("udf-module-control", "udf", _udf_by_reference("dm_same", "same"), role=CONTROL),
    Kind("udf-by-value-control", "udf", _udf_same_closure, role=CONTROL),
    Kind("pandas-udf-control", "udf", _pandas_udf("dm_same"), role=CONTROL),
]
