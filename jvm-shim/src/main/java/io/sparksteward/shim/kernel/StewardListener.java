package io.sparksteward.shim.kernel;

import java.util.List;
import java.util.Properties;

import org.apache.spark.TaskEndReason;
import org.apache.spark.TaskFailedReason;
import org.apache.spark.TaskKilled;
import org.apache.spark.scheduler.JobResult;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.sql.streaming.StreamingQueryListener;

/**
 * Turns the listener events spark-steward needs into encoded records and hands them to the
 * buffer. Field order per type (after seq, type, time) must match Python's decoders:
 * job_start [job_id, stage_ids, job_group, job_tags, properties, rdd_ids]; job_end [job_id, result,
 * message]; task_start [task_id, stage_id, stage_attempt, partition, index, attempt, executor_id,
 * host]; task_end [the same, reason, message, task_type]; executor_added [executor_id, host,
 * cores]; executor_removed [executor_id, message]; application_end []; stream_started [query_id,
 * run_id, name]; stream_progress [query_id, run_id, batch_id]; stream_terminated [query_id,
 * run_id, exception]; session_started and session_closed [session_id, user_id] (Spark
 * Connect's sessions, {@link ConnectSessionEvents}). Runs on Spark's listener thread, so it only encodes and offers: no IO, no
 * locks held across calls, no calls into Python.
 */
final class StewardListener extends SparkListener {
  /** Local properties forwarded with job start: ours, plus what identifies the job to a user. */
  private static final String JOB_GROUP = "spark.jobGroup.id";
  private static final String JOB_TAGS = "spark.job.tags";
  /** RDD ids a job_start carries at most (a plan of thousands of RDDs is cut, not copied). */
  static final int MAX_RDD_IDS = 2048;

  private final EventBuffer buffer;

  StewardListener(EventBuffer buffer) {
    this.buffer = buffer;
  }

  @Override
  public void onJobStart(SparkListenerJobStart e) {
    Properties props = e.properties();
    List<String[]> steward = EventEncoder.pairs();
    String group = null;
    String tags = null;
    if (props != null) {
      for (String name : props.stringPropertyNames()) {
        if (name.startsWith(Handover.PREFIX)) {
          steward.add(new String[] {name, props.getProperty(name)});
        }
      }
      group = props.getProperty(JOB_GROUP);
      tags = props.getProperty(JOB_TAGS);
    }
    List<Integer> stages = SparkCompat.stageIds(e);
    buffer.offer(EventEncoder.event("job_start", e.time())
        .num(e.jobId())
        .nums(stages)
        .str(group)
        .str(tags)
        .map(steward)
        .nums(SparkCompat.rddIds(e, MAX_RDD_IDS)));
  }

  @Override
  public void onJobEnd(SparkListenerJobEnd e) {
    JobResult result = e.jobResult();
    boolean ok = result.getClass().getSimpleName().startsWith("JobSucceeded");
    buffer.offer(EventEncoder.event("job_end", e.time())
        .num(e.jobId())
        .str(ok ? "succeeded" : "failed")
        .str(ok ? null : failureMessage(result)));
  }

  @Override
  public void onTaskStart(SparkListenerTaskStart e) {
    buffer.offer(task("task_start", e.taskInfo().launchTime(), e.stageId(), e.stageAttemptId(),
        e.taskInfo()));
  }

  @Override
  public void onTaskEnd(SparkListenerTaskEnd e) {
    TaskInfo info = e.taskInfo();
    TaskEndReason reason = e.reason();
    String outcome;
    String message = null;
    if (reason instanceof TaskKilled) {
      outcome = "killed";
      message = ((TaskKilled) reason).reason();
    } else if (reason instanceof TaskFailedReason) {
      outcome = "failed";
      message = ((TaskFailedReason) reason).toErrorString();
    } else {
      outcome = "success";
    }
    long end = info.finishTime() > 0 ? info.finishTime() : System.currentTimeMillis();
    buffer.offer(task("task_end", end, e.stageId(), e.stageAttemptId(), info)
        .str(outcome)
        .str(message)
        .str(e.taskType()));
  }

  @Override
  public void onExecutorAdded(SparkListenerExecutorAdded e) {
    buffer.offer(EventEncoder.event("executor_added", e.time())
        .str(e.executorId())
        .str(e.executorInfo().executorHost())
        .num(e.executorInfo().totalCores()));
  }

  @Override
  public void onExecutorRemoved(SparkListenerExecutorRemoved e) {
    buffer.offer(EventEncoder.event("executor_removed", e.time())
        .str(e.executorId())
        .str(e.reason()));
  }

  /** Structured Streaming's query events reach every SparkListener here. */
  @Override
  public void onOtherEvent(SparkListenerEvent e) {
    long now = System.currentTimeMillis();
    if (e instanceof StreamingQueryListener.QueryStartedEvent) {
      StreamingQueryListener.QueryStartedEvent s = (StreamingQueryListener.QueryStartedEvent) e;
      buffer.offer(EventEncoder.event("stream_started", now)
          .str(s.id().toString()).str(s.runId().toString()).str(s.name()));
    } else if (e instanceof StreamingQueryListener.QueryProgressEvent) {
      StreamingQueryListener.QueryProgressEvent p = (StreamingQueryListener.QueryProgressEvent) e;
      buffer.offer(EventEncoder.event("stream_progress", now)
          .str(p.progress().id().toString()).str(p.progress().runId().toString())
          .num(p.progress().batchId()));
    } else if (e instanceof StreamingQueryListener.QueryTerminatedEvent) {
      StreamingQueryListener.QueryTerminatedEvent t =
          (StreamingQueryListener.QueryTerminatedEvent) e;
      buffer.offer(EventEncoder.event("stream_terminated", now)
          .str(t.id().toString()).str(t.runId().toString())
          .str(t.exception().isDefined() ? t.exception().get() : null));
    } else {
      EventEncoder.Builder session = ConnectSessionEvents.encode(e);
      if (session != null) {
        buffer.offer(session);
      }
    }
  }

  @Override
  public void onApplicationEnd(SparkListenerApplicationEnd e) {
    buffer.offer(EventEncoder.event("application_end", e.time()));
  }

  private static EventEncoder.Builder task(
      String type, long time, int stageId, int stageAttempt, TaskInfo info) {
    return EventEncoder.event(type, time)
        .num(info.taskId())
        .num(stageId)
        .num(stageAttempt)
        .num(info.partitionId())
        .num(info.index())
        .num(info.attemptNumber())
        .str(info.executorId())
        .str(info.host());
  }

  /** JobFailed is private to Spark; read its exception reflectively and fall back to toString. */
  private static String failureMessage(JobResult result) {
    try {
      Object ex = result.getClass().getMethod("exception").invoke(result);
      if (ex instanceof Throwable) {
        String msg = ((Throwable) ex).getMessage();
        return msg != null ? msg : ex.toString();
      }
    } catch (ReflectiveOperationException | RuntimeException ignored) {
      // Not the JobFailed shape we know: the string form still says what happened.
    }
    return result.toString();
  }
}
