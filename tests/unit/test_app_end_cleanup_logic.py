"""The JVM shim's pure pieces of the application-end cleanup of host-local folders: which
working dirs it refuses (those Python refuses; where the dir is, Python resolves and hands over:
tests/unit/test_handover.py), what a removal may touch, what an executor does with the driver's answer, and
whom the driver's stop waits for.

The shim's sources are compiled here with a small driver class in the local capability's package;
each case is one line to its stdin and one line back.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from spark_steward.kernel import shim_build

SOURCES = Path(__file__).resolve().parents[2] / "jvm-shim" / "src" / "main" / "java"

DRIVER = r'''
package io.sparksteward.shim.local;

import io.sparksteward.shim.kernel.LocalDirs;
import io.sparksteward.shim.kernel.PrivateFiles;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

public final class AppEndCases {
  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] a = line.split("\t", -1);
      String out;
      switch (a[0]) {
        case "safe": out = String.valueOf(LocalDirs.isSafeAppId(a[1])); break;
        case "private": out = String.valueOf(PrivateFiles.notPrivate(java.nio.file.Paths.get(a[1])));
          break;
        case "remove": out = AppFolders.remove(a[1], a[2]); break;
        case "remove-concurrently": {
          List<Thread> threads = new ArrayList<>();
          List<String> results = java.util.Collections.synchronizedList(new ArrayList<>());
          for (int i = 0; i < 4; i++) {
            Thread t = new Thread(() -> results.add(AppFolders.remove(a[1], a[2])));
            threads.add(t);
            t.start();
          }
          for (Thread t : threads) t.join();
          java.util.Collections.sort(results);
          out = String.join(",", results);
          break;
        }
        case "answer":
          out = AppEndProtocol.answer(Boolean.parseBoolean(a[1]), a[2],
              a[3].equals("<null>") ? null : a[3]).replace("\t", "|");
          break;
        case "decide": {
          Object reply = a[1].equals("<null>") ? null
              : a[1].equals("<int>") ? (Object) Integer.valueOf(7) : a[1].replace("|", "\t");
          AppEndProtocol.Decision d =
              AppEndProtocol.decide(reply, a[2].equals("<null>") ? null : a[2]);
          out = d.remove() ? "remove " + d.appId + " " + d.localDir : "keep " + d.keepReason;
          break;
        }
        case "parse": {
          String[] p = AppEndProtocol.parse(a[1].replace("|", "\t"));
          out = p == null ? "<null>" : String.join("|", p);
          break;
        }
        case "tracker": {
          // ops separated by ';': hello:id:host left:id told:id done:id:outcome
          AppEndTracker t = new AppEndTracker();
          for (String op : a[1].split(";")) {
            String[] o = op.split(":", 3);
            switch (o[0]) {
              case "hello": t.hello(o[1], o[2]); break;
              case "left": t.left(o[1]); break;
              case "told": t.told(o[1]); break;
              case "done": t.done(o[1], o[2]); break;
              default: throw new IllegalArgumentException(op);
            }
          }
          out = String.join(",", t.awaited()) + "#" + String.join("|", t.summary(10));
          break;
        }
        case "tracker-wait": {
          AppEndTracker t = new AppEndTracker();
          t.hello("1", "h1");
          t.hello("2", "h2");
          t.told("1");
          new Thread(() -> {
            try { Thread.sleep(200); } catch (InterruptedException e) { return; }
            t.done("1", "removed");
            t.left("2");
          }).start();
          long start = System.nanoTime();
          boolean all = t.awaitReports(Long.parseLong(a[1]));
          long ms = (System.nanoTime() - start) / 1_000_000;
          out = all + " " + (ms < 5000);
          break;
        }
        case "tracker-timeout": {
          AppEndTracker t = new AppEndTracker();
          t.hello("1", "h1");
          long start = System.nanoTime();
          boolean all = t.awaitReports(300);
          long ms = (System.nanoTime() - start) / 1_000_000;
          out = all + " " + (ms >= 290);
          break;
        }
        default: throw new IllegalArgumentException(a[0]);
      }
      System.out.println(out);
    }
  }
}
'''


@pytest.fixture(scope="module")
def classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no JDK: the shim cannot be compiled here")
    root = tmp_path_factory.mktemp("app-end")
    driver = root / "src" / "io" / "sparksteward" / "shim" / "local" / "AppEndCases.java"
    driver.parent.mkdir(parents=True)
    driver.write_text(DRIVER)
    out = root / "classes"
    classpath = os.pathsep.join(sorted(glob.glob(str(shim_build.find_spark_jars() / "*.jar"))))
    stubs = shim_build.stubs_dir(SOURCES)
    sources = [str(p) for p in [*SOURCES.rglob("*.java"), *stubs.rglob("*.java")]] + [str(driver)]
    subprocess.run([javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(out),
                    *sources], check=True, capture_output=True, text=True)
    return out


def run_java(classes: Path, lines: list[str], *, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> list[str]:
    result = subprocess.run(["java", "-cp", str(classes), "io.sparksteward.shim.local.AppEndCases"],
                            input="".join(line + "\n" for line in lines), capture_output=True,
                            text=True, env=env, cwd=cwd, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


# -- the local dir: which ones the JVM refuses -------------------------------------------------

@pytest.mark.skipif(os.geteuid() != 0, reason="a dir of another user's needs chown (root)")
def test_the_jvm_refuses_the_local_dirs_python_refuses(classes: Path, tmp_path: Path) -> None:
    """Table replicas are written by executor JVMs, maybe before any Python task ran there:
    they must not go into a local dir ``private.ensure_private_root`` would refuse."""
    from spark_steward.errors import ConfigError
    from spark_steward.private import ensure_private_root

    (tmp_path / "ours").mkdir(mode=0o700)
    (tmp_path / "readable").mkdir(mode=0o755)
    (tmp_path / "writable").mkdir()
    (tmp_path / "writable").chmod(0o777)
    (tmp_path / "link").symlink_to(tmp_path / "ours")
    (tmp_path / "file").write_text("x")
    (tmp_path / "theirs").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs", 65534, 65534)
    names = ["ours", "readable", "missing", "writable", "link", "file", "theirs"]
    java = run_java(classes, [f"private\t{tmp_path / n}" for n in names])
    assert java == ["null", "null", "null", f"{tmp_path / 'writable'} is writable by other users",
                    f"{tmp_path / 'link'} is a symbolic link",
                    f"{tmp_path / 'file'} exists and is not a directory",
                    f"{tmp_path / 'theirs'} is owned by uid 65534, not this user (uid 0)"]
    for name, answer in zip(names, java):
        try:
            ensure_private_root(tmp_path / name, key="k")
            refused = False
        except ConfigError:
            refused = True
        assert refused == (answer != "null"), name


# -- what a removal may touch ----------------------------------------------------------------

def test_app_ids_are_safe_path_segments_exactly_as_in_python(classes: Path) -> None:
    from spark_steward.applications import looks_like_app_id

    ids = ["app-20240101-0001", "local-1700000000000", "a", "A.b_c-d", "", ".", "..", "../x",
           "a/b", "a\\b", "-x", ".hidden", "x" * 201, "x" * 202, "app id", "app:id", "é"]
    java = run_java(classes, [f"safe\t{i}" for i in ids])
    assert java == [str(looks_like_app_id(i)).lower() for i in ids]


def test_removal_takes_the_folder_and_nothing_through_links(classes: Path, tmp_path: Path
                                                            ) -> None:
    local = tmp_path / "local"
    app = local / "app-1"
    (app / "blobs" / "deep").mkdir(parents=True)
    (app / "blobs" / "deep" / "f").write_text("x")
    (app / "manifest.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (app / "link-to-dir").symlink_to(outside, target_is_directory=True)
    (app / "blobs" / "link-to-file").symlink_to(outside / "keep.txt")
    other = local / "app-2"
    other.mkdir()
    (other / "v").write_text("other app")
    assert run_java(classes, [f"remove\t{local}\tapp-1"]) == ["removed"]
    assert not app.exists()
    assert (outside / "keep.txt").read_text() == "keep"
    assert (other / "v").read_text() == "other app"
    assert local.is_dir()
    assert run_java(classes, [f"remove\t{local}\tapp-1"]) == ["absent"]


def test_removal_refuses_what_is_not_one_apps_own_folder(classes: Path, tmp_path: Path) -> None:
    local = tmp_path / "local"
    local.mkdir()
    (local / "keep").write_text("k")
    target = tmp_path / "target"
    target.mkdir()
    (target / "precious").write_text("p")
    (local / "app-link").symlink_to(target, target_is_directory=True)
    (local / "app-file").write_text("not a dir")
    out = run_java(classes, [f"remove\t{local}\t..", f"remove\t{local}\t.", f"remove\t{local}\t",
                             f"remove\t{local}\t../target", f"remove\t{local}\tapp-link",
                             f"remove\t{local}\tapp-file", f"remove\t\tapp-1"])
    assert all(line.startswith("refused: ") for line in out), out
    assert (local / "keep").exists() and (target / "precious").exists()
    assert (local / "app-link").is_symlink() and (local / "app-file").is_file()


def test_executors_of_one_host_may_remove_the_same_folder_at_once(classes: Path, tmp_path: Path
                                                                  ) -> None:
    local = tmp_path / "local"
    for d in range(30):
        sub = local / "app-1" / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(30):
            (sub / f"f{f}").write_text("x")
    out = run_java(classes, [f"remove-concurrently\t{local}\tapp-1"])
    results = out[0].split(",")
    assert set(results) <= {"removed", "absent"} and "removed" in results, out
    assert not (local / "app-1").exists()


# -- the decision on the executor and the answer on the driver -------------------------------

def test_the_driver_answers_ending_only_while_its_context_stops(classes: Path) -> None:
    out = run_java(classes, ["answer\tfalse\tapp-1\t/l", "answer\ttrue\tapp-1\t/l",
                             "answer\ttrue\t../x\t/l", "answer\ttrue\tapp-1\t<null>"])
    assert out == ["running", "ending|app-1|/l", "running", "running"]


@pytest.mark.parametrize(("reply", "own", "expected"), [
    ("ending|app-1|/x/local", "app-1", "remove app-1 /x/local"),
    ("ending|app-1|/dir with|tab", "app-1", "remove app-1 /dir with\ttab"),
    ("ending|app-1|/x/local", "<null>", "remove app-1 /x/local"),
    ("running", "app-1", "keep the application is still running"),
    ("<null>", "app-1", "keep the driver gave no answer"),
    ("<int>", "app-1", "keep the driver's answer is not understood"),
    ("ending|app-1|/x", "app-2", "keep the driver answered for application app-1"),
    ("ending|..|/x", "<null>", "keep application id '..' is not a safe"),
    ("ending|app-1|", "app-1", "keep the driver named no local dir"),
    ("ending|app-1", "app-1", "keep the driver's answer is not understood"),
    ("ENDING|app-1|/x", "app-1", "keep the driver's answer is not understood"),
])
def test_an_executor_removes_only_on_an_explicit_ending_for_its_own_app(
        classes: Path, reply: str, own: str, expected: str) -> None:
    [out] = run_java(classes, [f"decide\t{reply}\t{own}"])
    assert out.startswith(expected), out


def test_messages_parse_only_when_well_formed(classes: Path) -> None:
    out = run_java(classes, ["parse\thello|3|host-a", "parse\tending?|3", "parse\tdone|3|removed",
                             "parse\thello|3", "parse\tending?|3|x", "parse\tsomething|1|2"])
    assert out == ["hello|3|host-a", "ending?|3", "done|3|removed", "<null>", "<null>", "<null>"]


# -- whom the driver's stop waits for --------------------------------------------------------

def test_the_stop_waits_for_executors_alive_at_the_end_only(classes: Path) -> None:
    out = run_java(classes, [
        "tracker\thello:1:h1;hello:2:h2",
        "tracker\thello:1:h1;hello:2:h2;left:1",
        "tracker\thello:1:h1;hello:2:h2;told:1;done:1:removed;told:2;done:2:absent",
        "tracker\tleft:3;hello:3:h3",
        "tracker\thello:1:h1;told:1;left:1",
    ])
    assert out[0].startswith("1,2#")
    assert out[1].startswith("2#") and "executor 1" not in out[1]
    assert out[2] == "#executor 1 on h1: removed|executor 2 on h2: absent"
    assert out[3] == "#"
    assert out[4] == "#executor 1 on h1: went before reporting its removal"
    assert "did not ask within 10 ms" in out[0] and "spark-steward gc --local-dir" in out[0]


def test_the_wait_ends_with_the_last_report_or_at_its_bound(classes: Path) -> None:
    assert run_java(classes, ["tracker-wait\t10000"]) == ["true true"]
    assert run_java(classes, ["tracker-timeout"]) == ["false true"]
