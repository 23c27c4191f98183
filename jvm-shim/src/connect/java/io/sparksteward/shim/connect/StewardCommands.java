package io.sparksteward.shim.connect;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;

import io.sparksteward.shim.kernel.ConnectCommands;
import io.sparksteward.shim.kernel.Errors;
import org.apache.spark.connect.proto.ExecutePlanResponse;
import org.apache.spark.connect.proto.Relation;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.connect.planner.SparkConnectPlanner;
import org.apache.spark.sql.connect.plugin.CommandPlugin;
import org.apache.spark.sql.connect.service.ExecuteHolder;
import org.apache.spark.sql.connect.service.SessionHolder;
import org.sparkproject.connect.protobuf.Any;
import org.sparkproject.connect.protobuf.ByteString;
import org.sparkproject.connect.protobuf.InvalidProtocolBufferException;

/**
 * spark-steward's Spark Connect command extension ({@code
 * spark.connect.extensions.command.classes}, which {@code spark-steward conf --server} sets):
 * the server half of the thin client ({@code spark_steward.kernel.remote_client}).
 *
 * <p>A command is a {@code protobuf.Any} of type {@link #COMMAND_TYPE} holding a {@link
 * Payload}: the request JSON and, for calls that take a DataFrame, its Relation, planned here
 * in the caller's session. The driver runtime answers it ({@link ConnectCommands}); the reply
 * goes back as a {@code SqlCommandResult} whose relation is an extension of type {@link
 * #REPLY_TYPE} (the client reads it, never runs it), and a DataFrame the runtime returns is
 * cached in the caller's session under a new id, as {@code df.checkpoint()} does, so the client
 * refers to it as a {@code CachedRemoteRelation}.
 *
 * <p>The session and user ids come from the server's own session holder, never from the
 * request: a client cannot act in another session.
 */
public final class StewardCommands implements CommandPlugin {
  static final String COMMAND_TYPE = "type.googleapis.com/spark_steward.Command";
  static final String REPLY_TYPE = "type.googleapis.com/spark_steward.Reply";

  @Override
  public boolean process(byte[] command, SparkConnectPlanner planner) {
    Any any;
    try {
      any = Any.parseFrom(command);
    } catch (InvalidProtocolBufferException e) {
      return false; // not ours to judge: another plugin or Spark reports it
    }
    if (!COMMAND_TYPE.equals(any.getTypeUrl())) {
      return false;
    }
    Payload request = Payload.decode(any.getValue().toByteArray());
    SessionHolder holder = planner.sessionHolder();
    SparkSession session = planner.session();
    Dataset<Row> input = null;
    if (request.extra != null) {
      Relation relation;
      try {
        relation = Relation.parseFrom(request.extra);
      } catch (InvalidProtocolBufferException e) {
        throw new IllegalArgumentException(
            Errors.PREFIX + "the command's DataFrame is not a valid relation: " + e.getMessage());
      }
      input = org.apache.spark.sql.classic.Dataset.ofRows(session,
          planner.transformRelation(relation));
    }
    ConnectCommands handler = ConnectCommands.Registry.current();
    if (handler == null) {
      throw new IllegalStateException(Errors.PREFIX + "the driver runtime of this Connect server "
          + "is not running (it is starting, or being restarted after it stopped: the "
          + "server's log says why); try again in a few seconds");
    }
    Map<String, Object> out = new HashMap<>();
    String reply;
    try {
      reply = handler.handle(holder.sessionId(), holder.userId(), request.text, session, input,
          request.data, out);
    } catch (RuntimeException e) {
      // py4j's error when the runtime went away mid-call: say what happened, not py4j's trace.
      throw new IllegalStateException(Errors.PREFIX + "the driver runtime of this Connect server "
          + "did not answer (" + e.getClass().getSimpleName() + "); if it is being restarted, "
          + "try again in a few seconds", e);
    }
    byte[] relationId = null;
    Object result = out.get("dataframe");
    if (result instanceof Dataset) {
      String id = UUID.randomUUID().toString();
      @SuppressWarnings("unchecked")
      Dataset<Row> df = (Dataset<Row>) result;
      holder.cacheDataFrameById(id, df);
      relationId = id.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    }
    send(planner, holder, new Payload(reply, relationId, null));
    return true;
  }

  private static void send(SparkConnectPlanner planner, SessionHolder holder, Payload reply) {
    ExecuteHolder execute = planner.executeHolderOpt().get();
    Any body = Any.newBuilder().setTypeUrl(REPLY_TYPE)
        .setValue(ByteString.copyFrom(reply.encode())).build();
    ExecutePlanResponse response = ExecutePlanResponse.newBuilder()
        .setSessionId(holder.sessionId())
        .setServerSideSessionId(holder.serverSessionId())
        .setOperationId(execute.operationId())
        .setSqlCommandResult(ExecutePlanResponse.SqlCommandResult.newBuilder()
            .setRelation(Relation.newBuilder().setExtension(body)))
        .build();
    execute.responseObserver().onNext(response);
  }
}
