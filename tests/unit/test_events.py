"""spark/events.py decode_batch() on payloads built exactly as the JVM shim's EventEncoder does.

The twin below follows EventEncoder.java / StewardListener.java: a batch is
``{"dropped":N,"accepted":N,"stopped":B,"events":[...]}`` and each event a positional array
``[seq,"type",time,fields...]`` with the field order per type fixed in StewardListener.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_steward.kernel.dispatch import EventDispatcher
from spark_steward.kernel.events import (
    ApplicationEnd,
    CheckpointCleaned,
    EventBatch,
    EventDecodeError,
    ExecutorAdded,
    ExecutorRemoved,
    RddCleaned,
    JobEnd,
    JobStart,
    TaskEnd,
    TaskStart,
    decode_batch,
)

# -- a Python twin of EventEncoder.java ------------------------------------------------------------


def _quote(s: str) -> str:
    """EventEncoder.quote: escapes per UTF-16 code unit, surrogates and controls as \\uXXXX."""
    out = ['"']
    raw = s.encode("utf-16-le", "surrogatepass")
    for i in range(0, len(raw), 2):
        c = raw[i] | raw[i + 1] << 8
        ch = chr(c)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif c < 0x20 or 0xD800 <= c <= 0xDFFF:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _value(v: Any) -> str:
    """Builder.str / num / nums / map."""
    if v is None:
        return "null"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, list):
        return "[" + ",".join(str(int(x)) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{_quote(k)}:{_quote(x)}" for k, x in v.items()) + "}"
    raise TypeError(v)


def java_event(seq: int, type_: str, time: int, *fields: Any) -> str:
    """EventEncoder.event(type, time).<fields>...; build() puts the buffer's seq first."""
    body = ",".join([_quote(type_), str(time), *(_value(v) for v in fields)])
    return "[" + str(seq) + "," + body + "]"


def java_batch(events: list[str], dropped: int = 0, accepted: int | None = None,
               stopped: bool = False) -> str:
    """EventEncoder.batch."""
    accepted = len(events) if accepted is None else accepted
    return (f'{{"dropped":{dropped},"accepted":{accepted},"stopped":{str(stopped).lower()},'
            f'"events":[{",".join(events)}]}}')


def _task() -> list[Any]:
    """StewardListener.task(): task_id, stage_id, stage_attempt, partition, index, attempt,
    executor_id, host."""
    return [91, 3, 0, 7, 7, 1, "2", "worker-1"]


def job_start(seq: int = 1) -> str:
    # job_id, stage_ids, job_group, job_tags, properties
    return java_event(seq, "job_start", 1700000000000, 5, [3, 4], "nightly", "a,b",
                      {"spark.steward.owner": "team-x",
                       "spark.steward.note": 'quote " and \\ and \n'})


def task_end(seq: int, reason: str, message: str | None) -> str:
    # the task fields, then reason, message, task_type
    return java_event(seq, "task_end", 1700000000456, *_task(), reason, message, "ResultTask")


# -- every event type --------------------------------------------------------------------------------


def test_the_twin_matches_the_documented_layout() -> None:
    raw = json.loads(java_batch([job_start(1)], dropped=2, accepted=9))
    assert raw["dropped"] == 2 and raw["accepted"] == 9 and raw["stopped"] is False
    assert raw["events"][0][:4] == [1, "job_start", 1700000000000, 5]


def test_job_start() -> None:
    batch = decode_batch(java_batch([job_start(1)]))
    assert batch.events == (JobStart(1, 1700000000000, 5, (3, 4), "nightly", "a,b",
                                     {"spark.steward.owner": "team-x",
                                      "spark.steward.note": 'quote " and \\ and \n'}),)


def test_job_start_without_group_tags_or_properties() -> None:
    payload = java_batch([java_event(1, "job_start", 10, 0, [], None, None, {})])
    (event,) = decode_batch(payload).events
    assert event == JobStart(1, 10, 0, (), None, None, {})


@pytest.mark.parametrize("result, message, succeeded", [
    ("succeeded", None, True),
    ("failed", "Job aborted due to stage failure: boom", False),
])
def test_job_end(result: str, message: str | None, succeeded: bool) -> None:
    # job_id, result, message
    payload = java_batch([java_event(2, "job_end", 20, 5, result, message)])
    assert decode_batch(payload).events == (JobEnd(2, 20, 5, succeeded, message),)


def test_task_start() -> None:
    payload = java_batch([java_event(3, "task_start", 30, *_task())])
    assert decode_batch(payload).events == (
        TaskStart(3, 30, 91, 3, 0, 7, 7, 1, "2", "worker-1"),)


@pytest.mark.parametrize("reason, message, succeeded", [
    ("success", None, True),
    ("failed", "ExceptionFailure(java.lang.RuntimeException: x\n\tat Foo.bar)", False),
    ("killed", "another attempt succeeded", False),
])
def test_task_end(reason: str, message: str | None, succeeded: bool) -> None:
    (event,) = decode_batch(java_batch([task_end(4, reason, message)])).events
    assert event == TaskEnd(4, 1700000000456, 91, 3, 0, 7, 7, 1, "2", "worker-1", reason,
                            message, "ResultTask")
    assert event.succeeded is succeeded


def test_executor_added() -> None:
    # executor_id, host, cores
    payload = java_batch([java_event(5, "executor_added", 50, "1", "10.0.0.7", 4)])
    assert decode_batch(payload).events == (ExecutorAdded(5, 50, "1", "10.0.0.7", 4),)


@pytest.mark.parametrize("message", ["Worker shut down", None])
def test_executor_removed(message: str | None) -> None:
    # executor_id, message
    payload = java_batch([java_event(6, "executor_removed", 60, "1", message)])
    assert decode_batch(payload).events == (ExecutorRemoved(6, 60, "1", message),)


def test_application_end() -> None:
    payload = java_batch([java_event(7, "application_end", 70)])
    assert payload == '{"dropped":0,"accepted":1,"stopped":false,"events":[[7,"application_end",70]]}'
    assert decode_batch(payload).events == (ApplicationEnd(7, 70),)


@pytest.mark.parametrize("rdd_id", [0, 42, 2**31 - 1])
def test_checkpoint_cleaned(rdd_id: int) -> None:
    # CheckpointCleanWatch: EventEncoder.event("checkpoint_cleaned", now).num(rddId), sent from
    # Spark's ContextCleaner thread; checkpointCleaned(long) carries the RDD id.
    payload = java_batch([java_event(8, "checkpoint_cleaned", 80, rdd_id)])
    assert payload.endswith(f'"events":[[8,"checkpoint_cleaned",80,{rdd_id}]]}}')
    assert decode_batch(payload).events == (CheckpointCleaned(8, 80, rdd_id),)


@pytest.mark.parametrize("rdd_id", [0, 2**31 - 1])
def test_rdd_cleaned(rdd_id: int) -> None:
    # CheckpointCleanWatch.rddCleaned(int): EventEncoder.event("rdd_cleaned", now).num(rddId)
    payload = java_batch([java_event(9, "rdd_cleaned", 90, rdd_id)])
    assert decode_batch(payload).events == (RddCleaned(9, 90, rdd_id),)


def test_checkpoint_cleaned_reaches_subscribers_in_sequence() -> None:
    dispatcher = EventDispatcher()
    seen: list[object] = []
    dispatcher.subscribe(seen.append, "test")
    # Numbered by the same buffer as listener-bus events, so it interleaves by seq.
    dispatcher.dispatch(decode_batch(java_batch([
        java_event(1, "job_end", 10, 3, "succeeded", None),
        java_event(2, "checkpoint_cleaned", 11, 7),
        java_event(3, "application_end", 12)])))
    assert seen == [JobEnd(1, 10, 3, True, None), CheckpointCleaned(2, 11, 7),
                    ApplicationEnd(3, 12)]
    assert dispatcher.counts["CheckpointCleaned"] == 1 and dispatcher.gaps == 0


def test_mixed_batch_keeps_order_and_counters() -> None:
    events = [job_start(10), java_event(11, "task_start", 1, *_task()),
              task_end(12, "success", None), java_event(13, "application_end", 2),
              java_event(14, "executor_removed", 3, "9", None)]
    batch = decode_batch(java_batch(events, dropped=3, accepted=14, stopped=True))
    assert [e.seq for e in batch.events] == [10, 11, 12, 13, 14]
    assert [type(e) for e in batch.events] == [JobStart, TaskStart, TaskEnd, ApplicationEnd,
                                               ExecutorRemoved]
    assert (batch.dropped, batch.accepted, batch.stopped) == (3, 14, True)


def test_empty_batch() -> None:
    assert decode_batch(java_batch([], dropped=0, accepted=42)) == EventBatch((), 0, 42, False)


def test_strings_survive_java_escaping() -> None:
    text = 'tab\there "q" back\\slash \u0001 caf\u00e9 \u2603 emoji \U0001F600 cr\r'
    payload = java_batch([java_event(1, "executor_removed", 1, "e", text)])
    assert "\\ud83d\\ude00" in payload  # what Java sends for a character beyond the BMP
    (event,) = decode_batch(payload).events
    assert isinstance(event, ExecutorRemoved) and event.message == text


def test_task_end_without_task_type() -> None:
    payload = java_batch([java_event(1, "task_end", 1, *_task(), "success", None, None)])
    (event,) = decode_batch(payload).events
    assert isinstance(event, TaskEnd) and event.task_type == "" and event.succeeded


def test_events_are_immutable() -> None:
    (event,) = decode_batch(java_batch([java_event(7, "application_end", 70)])).events
    with pytest.raises(AttributeError):
        event.seq = 8  # type: ignore[misc]


# -- what this version cannot read ---------------------------------------------------------------------


def test_unknown_type_is_a_decode_error_naming_it() -> None:
    payload = java_batch([job_start(1), java_event(2, "stage_completed", 5, 1)])
    with pytest.raises(EventDecodeError) as info:
        decode_batch(payload)
    assert "'stage_completed'" in str(info.value)


def test_event_with_null_type_is_a_decode_error() -> None:
    with pytest.raises(EventDecodeError, match="None"):
        decode_batch('{"dropped":0,"accepted":1,"stopped":false,"events":[[1,null,1]]}')


_OK = '{"dropped":0,"accepted":1,"stopped":false,"events":%s}'


@pytest.mark.parametrize("payload", [
    "",
    "garbage",
    "{",
    "null",
    "[]",
    '"events"',
    "42",
    '{"dropped":0,"accepted":0,"stopped":false}',
    '{"accepted":0,"stopped":false,"events":[]}',
    '{"dropped":"many","accepted":0,"stopped":false,"events":[]}',
    _OK % "5",
    _OK % "[1]",
    _OK % "[null]",
    _OK % "[[]]",
    _OK % "[[1]]",
    _OK % '["job_start"]',
    _OK % '[{"seq":1,"type":"job_end","time":1}]',
    _OK % '[[1,["job_end"],1]]',
    _OK % '[[1,"job_end",1]]',
    _OK % '[[1,"task_start",1,91,3]]',
    _OK % '[[1,"task_end",1,91,3,0,7,7,1,"2","h","success",null]]',
    _OK % '[[1,"executor_added",1,"1"]]',
    _OK % '[[1,"checkpoint_cleaned",1]]',
    _OK % '[[1,"checkpoint_cleaned",1,null]]',
    _OK % '[[1,"checkpoint_cleaned",1,"x"]]',
    _OK % '[[1,"job_start",1,5,null,null,null,{}]]',
])
def test_garbage_is_a_decode_error(payload: str) -> None:
    with pytest.raises(EventDecodeError):
        decode_batch(payload)


def test_decode_error_is_a_value_error() -> None:
    assert issubclass(EventDecodeError, ValueError)
