"""Differential test of the identity of shared cached tables (issue 33).

Two applications cache the base of every kind in ``scripts/identity_kinds.py`` as
``shared=True`` at the same time; then files and modules change, and a third application caches
every variant, each differing from its base in one thing. In every application, each kind's
cached result must equal the plan computed directly there: a variant that got its base's key
would read the base's rows. Controls, which differ in nothing (or only in performance knobs),
must share; a plan whose rows spark-steward cannot pin down (a Python data source) must not.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from tests.spark.conftest import ONE_EXECUTOR, SCRIPTS, run_spark_submit, steward_conf

sys.path.insert(0, str(SCRIPTS))
import identity_kinds  # noqa: E402

JOB = SCRIPTS / "shared_identity_job.py"


def _submit(role: str, workdir: Path, storage: Path, out: Path) -> dict[str, Any]:
    pythonpath = os.pathsep.join([str(workdir / "mods"), str(SCRIPTS),
                                  os.environ.get("PYTHONPATH", "")])
    flags = steward_conf(storage, "spark.sql.shuffle.partitions=2", "spark.default.parallelism=2")
    # One executor: a key is computed on the driver, and the rows a kind gets do not depend
    # on how many executors computed them (three applications of ~60 kinds each).
    result = run_spark_submit(JOB, flags, role, str(workdir), str(out), timeout=900,
                              env={"PYTHONPATH": pythonpath}, master=ONE_EXECUTOR)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return json.loads(out.read_text())


def _wrong(report: dict[str, Any]) -> dict[str, Any]:
    """Kinds whose cached result differs from the plan computed directly."""
    return {name: kind for name, kind in report["kinds"].items()
            if (kind["cached"], kind["cached_error"]) != (kind["direct"], kind["direct_error"])}


def test_a_shared_table_is_never_another_applications_rows(tmp_path: Path) -> None:
    workdir, storage = tmp_path / "work", tmp_path / "storage"
    identity_kinds.prepare(workdir)
    kinds = {k.name: k for k in identity_kinds.KINDS}
    controls = {n for n, k in kinds.items() if k.role == identity_kinds.CONTROL}
    assert len(kinds) - len(controls) >= 40

    # Two applications cache the same shared tables at the same time: one every base, the other
    # a few of them (raced materializations of the same keys).
    reports: dict[str, dict[str, Any]] = {}

    def run(role: str) -> None:
        reports[role] = _submit(role, workdir, storage, tmp_path / f"{role}.json")

    threads = [threading.Thread(target=run, args=(role,)) for role in ("base", "raced")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(reports) == {"base", "raced"}, "a first application failed (see above)"
    base, raced = reports["base"], reports["raced"]
    assert set(raced["kinds"]) == set(identity_kinds.RACED)
    for report in (base, raced):
        assert _wrong(report) == {}, f"{report['app_id']}: {json.dumps(_wrong(report))[:4000]}"
        for name in set(identity_kinds.REFUSED) & set(report["kinds"]):
            assert report["kinds"][name]["key"].startswith("p-"), name

    identity_kinds.vary(workdir)
    variant = _submit("variant", workdir, storage, tmp_path / "variant.json")
    assert _wrong(variant) == {}, json.dumps(_wrong(variant))[:4000]

    shared, refused, separate = [], [], []
    for name, kind in variant["kinds"].items():
        key = kind["key"]
        first_keys = {r["kinds"][name]["key"] for r in (base, raced) if name in r["kinds"]}
        if key is None or key.startswith("p-"):
            refused.append(name)
        elif key in first_keys:
            shared.append(name)
        else:
            separate.append(name)
    assert controls <= set(shared), f"controls not shared: {sorted(controls - set(shared))}"
    assert set(identity_kinds.REFUSED) <= set(refused)
    assert set(refused) <= set(identity_kinds.REFUSED), f"refused: {refused}"
    # Each variant shared with its base must compute the base's rows.
    for name in shared:
        assert variant["kinds"][name]["direct"] == base["kinds"][name]["direct"], name
    print(f"\nshared-table identity: {len(kinds)} kinds ({len(controls)} controls); in the "
          f"second application {len(shared)} shared, {len(refused)} refused {sorted(refused)}, "
          f"{len(separate)} with keys of their own; wrong rows: 0")
