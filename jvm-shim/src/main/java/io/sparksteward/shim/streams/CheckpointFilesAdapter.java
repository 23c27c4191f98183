package io.sparksteward.shim.streams;

import java.util.function.BiConsumer;
import java.util.function.BiFunction;
import java.util.function.BiPredicate;
import java.util.function.Function;
import java.util.function.Predicate;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;

/**
 * The body of both streaming checkpoint file managers, written once. Spark's {@code
 * CheckpointFileManager} trait is in {@code ...execution.streaming} on 3.5 and 4.0 and in {@code
 * ...execution.streaming.checkpointing} from 4.1 on; its methods have the same names and
 * descriptors in both, but there is no common type to call them through. So each line's adapter
 * ({@link StreamCheckpointFiles}, {@link StreamCheckpointFilesV40}) only names its trait: it hands
 * this class the manager Spark would have used and its trait's methods as {@link Calls} (method
 * references, checked by javac and, per line, by jvm-shim/check_lines.py), and implements what
 * names the trait's own types ({@code createAtomic}, and 4.1's {@code close}). Every other method
 * of the trait is implemented here: a public method of a superclass implements the interface
 * method of the same signature in its subclass. {@link StreamFiles} holds what the managers add.
 *
 * @param <M> the line's {@code CheckpointFileManager} trait
 */
abstract class CheckpointFilesAdapter<M> {
  /** The manager Spark would have made: the user's class, or Spark's default. */
  final M delegate;
  final StreamFiles files;
  private final Calls<M> calls;

  CheckpointFilesAdapter(M delegate, Calls<M> calls, Path path, Configuration conf) {
    this.delegate = delegate;
    this.calls = calls;
    this.files = new StreamFiles(path, conf);
  }

  /** A line's trait methods the managers forward, bound to no instance. */
  static final class Calls<M> {
    /** {@code list(path, filter)}: three arguments, which {@code java.util.function} lacks. */
    interface ListFiltered<M> {
      FileStatus[] list(M manager, Path path, PathFilter filter);
    }

    final BiFunction<M, Path, FSDataInputStream> open;
    final ListFiltered<M> listFiltered;
    final BiFunction<M, Path, FileStatus[]> list;
    final BiConsumer<M, Path> mkdirs;
    final BiPredicate<M, Path> exists;
    final BiConsumer<M, Path> delete;
    final Predicate<M> isLocal;
    final Function<M, Path> createCheckpointDirectory;

    Calls(BiFunction<M, Path, FSDataInputStream> open, ListFiltered<M> listFiltered,
        BiFunction<M, Path, FileStatus[]> list, BiConsumer<M, Path> mkdirs,
        BiPredicate<M, Path> exists, BiConsumer<M, Path> delete, Predicate<M> isLocal,
        Function<M, Path> createCheckpointDirectory) {
      this.open = open;
      this.listFiltered = listFiltered;
      this.list = list;
      this.mkdirs = mkdirs;
      this.exists = exists;
      this.delete = delete;
      this.isLocal = isLocal;
      this.createCheckpointDirectory = createCheckpointDirectory;
    }
  }

  public FSDataInputStream open(Path path) {
    return files.open(path, () -> calls.open.apply(delegate, path));
  }

  public FileStatus[] list(Path path, PathFilter filter) {
    return files.list(path, filter, () -> calls.listFiltered.list(delegate, path, filter));
  }

  public FileStatus[] list(Path path) {
    return files.list(path, null, () -> calls.list.apply(delegate, path));
  }

  public void mkdirs(Path path) {
    calls.mkdirs.accept(delegate, path);
  }

  public boolean exists(Path path) {
    return files.exists(path, () -> calls.exists.test(delegate, path));
  }

  public void delete(Path path) {
    files.delete(path, () -> calls.delete.accept(delegate, path));
  }

  public boolean isLocal() {
    return calls.isLocal.test(delegate);
  }

  public Path createCheckpointDirectory() {
    return calls.createCheckpointDirectory.apply(delegate);
  }
}
