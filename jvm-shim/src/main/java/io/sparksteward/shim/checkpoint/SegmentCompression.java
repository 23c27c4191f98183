package io.sparksteward.shim.checkpoint;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.Locale;

import com.github.luben.zstd.Zstd;
import io.sparksteward.shim.kernel.Errors;
import net.jpountz.lz4.LZ4FrameInputStream;
import net.jpountz.lz4.LZ4FrameOutputStream;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.compression.AbstractCompressionCodec;
import org.apache.arrow.vector.compression.CompressionCodec;
import org.apache.arrow.vector.compression.CompressionUtil;
import org.apache.arrow.vector.compression.NoCompressionCodec;

/**
 * Arrow IPC buffer compression for checkpoint segments and block compression for checkpoint data
 * files, on the codecs every Spark line ships (zstd-jni, lz4-java): Arrow's own codec module is
 * only in Spark 4.1+.
 *
 * <p>Arrow buffers follow the IPC format: an int64 little-endian uncompressed length (-1: stored
 * raw), then a zstd frame or an LZ4 frame. So {@code pyarrow.ipc.open_stream} reads a segment
 * with nothing of ours. Decompression bounds what a hostile length claims before allocating.
 */
final class SegmentCompression {
  static final String ERROR = Errors.PREFIX + "compressed ";
  /** zstd level: 1 compresses checkpoint columns as small as 3 does, faster (bench/RESULTS.md). */
  static final int ZSTD_LEVEL = 1;
  /** A buffer or block never claims more than this many bytes uncompressed. */
  static final long MAX_UNCOMPRESSED = Integer.MAX_VALUE - 64;

  /** Reads and writes segments: none, zstd and LZ4 frame; the level argument is ignored. */
  static final CompressionCodec.Factory FACTORY = new Factory();

  private SegmentCompression() {}

  /** The Arrow codec named {@code name} ("none", "zstd", "lz4"); anything else is refused. */
  static CompressionUtil.CodecType codecType(String name) {
    switch (String.valueOf(name).toLowerCase(Locale.ROOT)) {
      case "none":
        return CompressionUtil.CodecType.NO_COMPRESSION;
      case "zstd":
        return CompressionUtil.CodecType.ZSTD;
      case "lz4":
        return CompressionUtil.CodecType.LZ4_FRAME;
      default:
        throw new IllegalArgumentException(ERROR + "codec " + name
            + " is not one of none, zstd, lz4");
    }
  }

  static final class Factory implements CompressionCodec.Factory {
    @Override
    public CompressionCodec createCodec(CompressionUtil.CodecType type) {
      switch (type) {
        case NO_COMPRESSION:
          return NoCompressionCodec.INSTANCE;
        case ZSTD:
          return new ZstdCodec();
        case LZ4_FRAME:
          return new Lz4FrameCodec();
        default:
          throw new IllegalArgumentException(ERROR + "buffer codec " + type + " is not supported");
      }
    }

    // Arrow 18+ declares this too; older lines do not know it (hence no @Override).
    public CompressionCodec createCodec(CompressionUtil.CodecType type, int level) {
      return createCodec(type);
    }
  }

  /** The uncompressed length a buffer claims, refused when it cannot be true. */
  static long claimed(long length, long compressed) {
    if (length < 0 || length > MAX_UNCOMPRESSED) {
      throw new IllegalStateException(ERROR + "buffer claims " + length
          + " uncompressed bytes for " + compressed + " compressed");
    }
    return length;
  }

  static final class ZstdCodec extends AbstractCompressionCodec {
    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf raw) {
      long size = raw.writerIndex();
      long bound = Zstd.compressBound(size);
      long prefix = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      ArrowBuf out = allocator.buffer(prefix + bound);
      long n = Zstd.compressUnsafe(out.memoryAddress() + prefix, bound, raw.memoryAddress(), size,
          ZSTD_LEVEL);
      if (Zstd.isError(n)) {
        out.close();
        throw new IllegalStateException(ERROR + "zstd failed: " + Zstd.getErrorName(n));
      }
      out.writerIndex(prefix + n);
      return out;
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf stored) {
      long prefix = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      long compressed = stored.writerIndex() - prefix;
      long size = claimed(readUncompressedLength(stored), compressed);
      ArrowBuf out = allocator.buffer(size);
      long n;
      try {
        n = Zstd.decompressUnsafe(out.memoryAddress(), size, stored.memoryAddress() + prefix,
            compressed);
      } catch (RuntimeException e) { // newer zstd-jni throws where older ones return the error
        out.close();
        throw new IllegalStateException(ERROR + "zstd buffer is corrupt: " + e.getMessage(), e);
      }
      if (Zstd.isError(n) || n != size) {
        out.close();
        throw new IllegalStateException(ERROR + "zstd buffer is corrupt: "
            + (Zstd.isError(n) ? Zstd.getErrorName(n) : n + " bytes, claimed " + size));
      }
      out.writerIndex(size);
      return out;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.ZSTD;
    }
  }

  static final class Lz4FrameCodec extends AbstractCompressionCodec {
    @Override
    protected ArrowBuf doCompress(BufferAllocator allocator, ArrowBuf raw) {
      byte[] in = new byte[(int) raw.writerIndex()];
      raw.getBytes(0, in);
      byte[] packed = lz4Frame(in, 0, in.length);
      long prefix = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      ArrowBuf out = allocator.buffer(prefix + packed.length);
      out.setBytes(prefix, packed);
      out.writerIndex(prefix + packed.length);
      return out;
    }

    @Override
    protected ArrowBuf doDecompress(BufferAllocator allocator, ArrowBuf stored) {
      long prefix = CompressionUtil.SIZE_OF_UNCOMPRESSED_LENGTH;
      int compressed = (int) (stored.writerIndex() - prefix);
      int size = (int) claimed(readUncompressedLength(stored), compressed);
      byte[] in = new byte[compressed];
      stored.getBytes(prefix, in);
      byte[] raw = unLz4Frame(in, 0, compressed, size);
      ArrowBuf out = allocator.buffer(size);
      out.setBytes(0, raw);
      out.writerIndex(size);
      return out;
    }

    @Override
    public CompressionUtil.CodecType getCodecType() {
      return CompressionUtil.CodecType.LZ4_FRAME;
    }
  }

  static byte[] lz4Frame(byte[] in, int off, int len) {
    ByteArrayOutputStream buf = new ByteArrayOutputStream(len / 2 + 64);
    // 64 KiB blocks: the default 4 MiB makes every reader allocate 4 MiB per buffer
    try (OutputStream out = new LZ4FrameOutputStream(buf,
        LZ4FrameOutputStream.BLOCKSIZE.SIZE_64KB)) {
      out.write(in, off, len);
    } catch (IOException e) {
      throw new IllegalStateException(ERROR + "lz4 failed: " + e, e);
    }
    return buf.toByteArray();
  }

  static byte[] unLz4Frame(byte[] in, int off, int len, int size) {
    byte[] out = new byte[size];
    try (InputStream frame = new LZ4FrameInputStream(new ByteArrayInputStream(in, off, len))) {
      int got = 0;
      while (got < size) {
        int n = frame.read(out, got, size - got);
        if (n < 0) {
          break;
        }
        got += n;
      }
      if (got != size || frame.read() != -1) {
        throw new IllegalStateException(ERROR + "lz4 frame holds other than the claimed " + size
            + " bytes");
      }
    } catch (IOException e) {
      throw new IllegalStateException(ERROR + "lz4 frame is corrupt: " + e, e);
    }
    return out;
  }

  // -- blocks of checkpoint data files ---------------------------------------------------------

  /** Codec ids of checkpoint data file blocks (file format 2). */
  static final int BLOCK_NONE = 0;
  static final int BLOCK_ZSTD = 1;
  static final int BLOCK_LZ4 = 2;

  static int blockCodec(String name) {
    switch (codecType(name)) {
      case ZSTD:
        return BLOCK_ZSTD;
      case LZ4_FRAME:
        return BLOCK_LZ4;
      default:
        return BLOCK_NONE;
    }
  }

  /** {@code len} bytes of {@code in} packed with {@code codec} (a BLOCK_ id). */
  static byte[] packBlock(int codec, byte[] in, int off, int len) {
    if (codec == BLOCK_ZSTD) {
      byte[] out = new byte[(int) Math.min(Integer.MAX_VALUE - 64, Zstd.compressBound(len))];
      long n = Zstd.compressByteArray(out, 0, out.length, in, off, len, ZSTD_LEVEL);
      if (Zstd.isError(n)) {
        throw new IllegalStateException(ERROR + "zstd failed: " + Zstd.getErrorName(n));
      }
      return java.util.Arrays.copyOf(out, (int) n);
    }
    if (codec == BLOCK_LZ4) {
      return lz4Frame(in, off, len);
    }
    return java.util.Arrays.copyOfRange(in, off, off + len);
  }

  /** The {@code size} raw bytes of a block packed with {@code codec}; throws when corrupt. */
  static byte[] unpackBlock(int codec, byte[] in, int size) {
    claimed(size, in.length);
    if (codec == BLOCK_ZSTD) {
      byte[] out = new byte[size];
      long n;
      try {
        n = Zstd.decompressByteArray(out, 0, size, in, 0, in.length);
      } catch (RuntimeException e) { // newer zstd-jni throws where older ones return the error
        throw new IllegalStateException(ERROR + "zstd block is corrupt: " + e.getMessage(), e);
      }
      if (Zstd.isError(n) || n != size) {
        throw new IllegalStateException(ERROR + "zstd block is corrupt: "
            + (Zstd.isError(n) ? Zstd.getErrorName(n) : n + " bytes, claimed " + size));
      }
      return out;
    }
    if (codec == BLOCK_LZ4) {
      return unLz4Frame(in, 0, in.length, size);
    }
    if (in.length != size) {
      throw new IllegalStateException(ERROR + "raw block of " + in.length + " bytes claims "
          + size);
    }
    return in;
  }
}
