"""An SQS queue as a ``pull.Reader`` (boto3). No Dagster.

Receive up to 10 messages per call (SQS's maximum) with a short long-poll,
until the chunk is full or a receive comes back empty (the queue is drained
for now). ``pull.drain`` stores the chunk, then ``ack`` deletes its messages
(``delete_message_batch``). SQS delivers at least once: a message whose
delete was lost (a crash after the store, a failed call) comes back after its
visibility timeout, and the store ignores it by its ``MessageId``. The
visibility timeout is well above a tick's budget, so a message received in
this tick is not handed out again before its delete.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lineage_defs.events.store import NewEvent
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.pull import Chunk, SourceUnavailable

log = logging.getLogger("lineage_defs")

RECEIVE_MAX = 10  # SQS's limit per receive_message and per delete_message_batch


@dataclass(frozen=True)
class SqsSource:
    """One queue as a step's sensor reads it."""

    queue: str  # a name, or the queue's URL
    endpoint_url: str | None  # None: boto3's own (AWS)
    partition_of: PartitionOf | None = None
    budget_seconds: float = 10.0
    chunk: int = 500  # messages per store transaction (and per round of deletes)
    wait_seconds: int = 1  # long poll of each receive: an empty one ends the tick
    visibility_seconds: int | None = None  # None: 3 × the budget + 30 s (a received message is not handed out again this tick)


def _describe(source: SqsSource) -> str:
    return f"SQS queue {source.queue!r}" + (f" at {source.endpoint_url}" if source.endpoint_url else "")


def _unavailable(source: SqsSource, e: Exception) -> SourceUnavailable:
    """A boto3 failure as the reason a tick skips, with the fix where there is an obvious one."""
    from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

    where = _describe(source)
    if isinstance(e, NoRegionError):
        return SourceUnavailable(f"{where}: no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION)")
    if isinstance(e, NoCredentialsError):
        return SourceUnavailable(f"{where}: no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or an AWS profile)")
    if isinstance(e, ClientError):
        code = str(e.response.get("Error", {}).get("Code", ""))
        if "NonExistentQueue" in code or "QueueDoesNotExist" in code:
            return SourceUnavailable(f"{where} does not exist: create it, or fix queue= in the step")
        return SourceUnavailable(f"{where}: {code or 'error'}: {str(e)[:300]}")
    return SourceUnavailable(f"cannot reach {where}: {type(e).__name__}: {str(e)[:300]}")


class SqsReader:
    """``pull.Reader`` over one queue: receive, (store), delete."""

    def __init__(self, source: SqsSource) -> None:
        self.source = source
        self.chunk = source.chunk
        self.client: Any = None
        self.url = ""
        self.name = source.queue.rstrip("/").rsplit("/", 1)[-1]

    def connect(self, positions: Mapping[int, int]) -> None:  # noqa: ARG002 - SQS has no offsets: the queue is the position
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError

        s = self.source
        config = Config(connect_timeout=5, read_timeout=s.wait_seconds + 20, retries={"max_attempts": 3, "mode": "standard"})
        try:
            self.client = boto3.client("sqs", endpoint_url=s.endpoint_url, config=config)
            self.url = s.queue if "://" in s.queue else str(self.client.get_queue_url(QueueName=s.queue)["QueueUrl"])
        except (BotoCoreError, ClientError) as e:
            raise _unavailable(s, e) from e

    def read(self, limit: int) -> Chunk:
        from botocore.exceptions import BotoCoreError, ClientError

        s = self.source
        events: list[NewEvent] = []
        receipts: list[str] = []
        caught_up = False
        # a message received now must not be handed out again before this tick deleted it
        visibility = s.visibility_seconds if s.visibility_seconds is not None else int(s.budget_seconds * 3) + 30
        while len(events) < limit:
            try:
                got = self.client.receive_message(
                    QueueUrl=self.url,
                    MaxNumberOfMessages=min(RECEIVE_MAX, limit - len(events)),
                    WaitTimeSeconds=s.wait_seconds,
                    VisibilityTimeout=visibility,
                    AttributeNames=["SentTimestamp"],
                    MessageAttributeNames=["All"],
                )
            except (BotoCoreError, ClientError) as e:
                if events:  # keep what was received: store and delete it, then the next tick says why
                    break
                raise _unavailable(s, e) from e
            msgs = got.get("Messages", [])
            if not msgs:
                caught_up = True
                break
            for m in msgs:
                events.append(self._event(m))
                receipts.append(str(m["ReceiptHandle"]))
        return Chunk(events, receipts, caught_up)

    def _event(self, m: Mapping[str, Any]) -> NewEvent:
        """One message as an event: the body is the value, message attributes are headers, MessageId dedupes."""
        s = self.source
        value = str(m.get("Body", "")).encode("utf-8")
        headers: list[tuple[str, str | None]] = []
        for k, a in (m.get("MessageAttributes") or {}).items():
            if "StringValue" in a:
                headers.append((str(k), str(a["StringValue"])))
            elif "BinaryValue" in a:
                headers.append((str(k), base64.b64encode(a["BinaryValue"]).decode("ascii")))
        sent = (m.get("Attributes") or {}).get("SentTimestamp")
        ts = int(sent) if sent and str(sent).isdigit() else None
        pkey, error = s.partition_of(None, value, headers, ts) if s.partition_of else (None, None)
        return NewEvent(str(m["MessageId"]), value, None, headers, ts, self.name, None, None, pkey, error)

    def ack(self, chunk: Chunk) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        receipts: list[str] = chunk.receipt
        failed = 0
        for i in range(0, len(receipts), RECEIVE_MAX):
            entries = [{"Id": str(j), "ReceiptHandle": r} for j, r in enumerate(receipts[i : i + RECEIVE_MAX])]
            try:
                failed += len(self.client.delete_message_batch(QueueUrl=self.url, Entries=entries).get("Failed", []))
            except (BotoCoreError, ClientError) as e:
                failed += len(entries)
                log.warning(f"deleting messages from {_describe(self.source)} failed ({e})")
        if failed:
            # stored already: SQS hands them out again after the visibility timeout and the store ignores them
            log.warning(f"{failed} stored messages of {_describe(self.source)} were not deleted; they come back once and are ignored")

    def lag(self) -> int | None:
        """``ApproximateNumberOfMessages``: what the queue still holds (approximate, as SQS says)."""
        try:
            attrs = self.client.get_queue_attributes(QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"])
            return int(attrs["Attributes"]["ApproximateNumberOfMessages"])
        except Exception:  # noqa: BLE001 - the lag is a hint for the skip reason, never a reason to fail the tick
            return None

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
