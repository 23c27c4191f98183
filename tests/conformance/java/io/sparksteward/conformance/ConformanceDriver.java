package io.sparksteward.conformance;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.Base64;
import java.util.Iterator;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;

/**
 * The JVM side of tests/conformance: one standalone JVM (no Spark application) that answers
 * one JSON request per line on stdin with one JSON line on stdout. It calls the shim's classes
 * by the names each request carries (tests/conformance/java_names.py owns them), through
 * reflection, so it compiles against Spark's jars alone and survives the shim's package moves.
 *
 * <p>A call that throws answers {@code {"error": <class>, "message": <message>}} with the
 * exception the shim's code threw (reflection's wrappers removed).
 */
public final class ConformanceDriver {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Configuration HADOOP = new Configuration();

  private ConformanceDriver() {}

  public static void main(String[] args) throws Exception {
    PrintStream out = new PrintStream(System.out, true, "UTF-8");
    System.setOut(System.err); // nothing the shim prints may break the protocol
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    out.println("{\"ready\":true}");
    String line;
    while ((line = in.readLine()) != null) {
      ObjectNode reply;
      try {
        reply = answer((ObjectNode) JSON.readTree(line));
      } catch (Throwable t) {
        Throwable cause = unwrap(t);
        reply = JSON.createObjectNode();
        reply.put("error", cause.getClass().getName());
        reply.put("message", String.valueOf(cause.getMessage()));
      }
      out.println(JSON.writeValueAsString(reply));
    }
  }

  private static Throwable unwrap(Throwable t) {
    while ((t instanceof InvocationTargetException || t instanceof ExceptionInInitializerError)
        && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  private static ObjectNode answer(ObjectNode request) throws Exception {
    String op = request.get("op").asText();
    ObjectNode reply = JSON.createObjectNode();
    switch (op) {
      case "files.list":
        return list(request, reply);
      case "files.exists":
        reply.put("exists", (Boolean) call(manager(request), "exists", path(request)));
        return reply;
      case "files.read":
        reply.put("data", base64(readAll((InputStream) call(manager(request), "open",
            path(request)))));
        return reply;
      case "manifest.write":
        return manifestWrite(request, reply);
      case "manifest.read":
        return manifestRead(request, reply);
      case "manifest.usage":
        reply.put("bytes", (Long) invoke(manifest(request), "usage", new Class<?>[0]));
        return reply;
      case "manifest.name":
        reply.put("name", ((java.nio.file.Path) invoke(manifest(request), "path",
            new Class<?>[] {String.class, String.class}, request.get("entry").asText(),
            request.get("suffix").asText())).getFileName().toString());
        return reply;
      case "segment.read":
        return segmentRead(request, reply);
      default:
        throw new IllegalArgumentException("unknown op " + op);
    }
  }

  // -- a streaming checkpoint folder through the shim's checkpoint file manager ----------------

  /** The manager of {@code folder} (a Hadoop URL), as Spark constructs it: (Path, Configuration). */
  private static Object manager(ObjectNode request) throws Exception {
    Class<?> cls = Class.forName(request.get("class").asText());
    Constructor<?> make = cls.getConstructor(Path.class, Configuration.class);
    return make.newInstance(new Path(request.get("folder").asText()), HADOOP);
  }

  private static Path path(ObjectNode request) {
    return new Path(request.get("folder").asText() + "/" + request.get("name").asText());
  }

  private static Object call(Object target, String method, Path path) throws Exception {
    return target.getClass().getMethod(method, Path.class).invoke(target, path);
  }

  private static ObjectNode list(ObjectNode request, ObjectNode reply) throws Exception {
    Object manager = manager(request);
    FileStatus[] found = (FileStatus[]) call(manager, "list",
        new Path(request.get("folder").asText()));
    ObjectNode files = reply.putObject("files");
    for (FileStatus s : found) {
      String name = s.getPath().getName();
      if (files.has(name)) {
        throw new IllegalStateException("listed twice: " + name);
      }
      ObjectNode file = files.putObject(name);
      file.put("length", s.getLen());
      file.put("mtime", s.getModificationTime());
      file.put("directory", s.isDirectory());
    }
    return reply;
  }

  // -- the working dir's manifest ---------------------------------------------------------------

  private static Object manifest(ObjectNode request) throws Exception {
    Class<?> cls = Class.forName(request.get("class").asText());
    Constructor<?> make = cls.getDeclaredConstructor(java.nio.file.Path.class, String.class,
        String.class, String.class);
    make.setAccessible(true);
    return make.newInstance(Paths.get(request.get("workdir").asText()),
        request.get("app_id").asText(), request.get("capability").asText(),
        request.get("scope").asText());
  }

  private static Object invoke(Object target, String name, Class<?>[] types, Object... args)
      throws Exception {
    Method method = target.getClass().getDeclaredMethod(name, types);
    method.setAccessible(true);
    return method.invoke(target, args);
  }

  private static ObjectNode manifestWrite(ObjectNode request, ObjectNode reply) throws Exception {
    Object manifest = manifest(request);
    String entry = request.get("entry").asText();
    Object body = invoke(manifest, "body",
        new Class<?>[] {String.class, long.class, long.class, String.class}, entry,
        request.get("size").asLong(), request.get("crc32c").asLong(),
        request.get("state").asText());
    invoke(manifest, "write", new Class<?>[] {String.class, String.class, Map.class}, entry,
        request.get("suffix").asText(), body);
    return reply;
  }

  private static ObjectNode manifestRead(ObjectNode request, ObjectNode reply) throws Exception {
    Object body = invoke(manifest(request), "read", new Class<?>[] {String.class, String.class},
        request.get("entry").asText(), request.get("suffix").asText());
    reply.set("body", body == null ? null : (JsonNode) body);
    return reply;
  }

  // -- a merged checkpoint's segment, read by byte range -------------------------------------------

  /**
   * Reads the segment of one listing line as a restore's task does (a local file: no Hadoop
   * configuration), in pieces. The pieces delivered before a failure are part of the answer.
   */
  private static ObjectNode segmentRead(ObjectNode request, ObjectNode reply) throws Exception {
    Class<?> spec = Class.forName(request.get("spec_class").asText());
    Method parse = spec.getDeclaredMethod("parse", String.class);
    parse.setAccessible(true);
    Object parsed = parse.invoke(null, request.get("line").asText());
    Class<?> pieces = Class.forName(request.get("pieces_class").asText());
    Constructor<?> make = pieces.getDeclaredConstructor(Configuration.class, spec, String.class);
    make.setAccessible(true);
    @SuppressWarnings("unchecked")
    Iterator<byte[]> it = (Iterator<byte[]>) make.newInstance(null, parsed,
        request.get("label").asText());
    ByteArrayOutputStream got = new ByteArrayOutputStream();
    try {
      while (it.hasNext()) {
        got.write(it.next());
      }
    } catch (Throwable t) {
      Throwable cause = unwrap(t);
      reply.put("error", cause.getClass().getName());
      reply.put("message", String.valueOf(cause.getMessage()));
    }
    reply.put("data", base64(got.toByteArray()));
    return reply;
  }

  // -- bytes --------------------------------------------------------------------------------------

  private static byte[] readAll(InputStream in) throws Exception {
    try (InputStream stream = in) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      byte[] buffer = new byte[65536];
      int n;
      while ((n = stream.read(buffer)) > 0) {
        out.write(buffer, 0, n);
      }
      return out.toByteArray();
    }
  }

  private static String base64(byte[] data) {
    return Base64.getEncoder().encodeToString(data);
  }
}
