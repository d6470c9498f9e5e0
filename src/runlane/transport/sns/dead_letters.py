"""Dead letters of SNS subscriptions: copies in each subscription's SQS dead-letter queue.

The thin consumer writes a dead letter as a copy of the original body with
``runlane_*`` attributes (:func:`dead_letter_attributes`). Operators read them with
a best-effort scan (contract 5.11.5): at most :data:`DLQ_SCAN_LIMIT` messages,
received with a 30 s peek visibility and made visible again afterwards, except
the one a replay or discard deletes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from runlane.ports.message_envelope import parse_sns_envelope
from runlane.topics.constants import DLQ_SCAN_LIMIT
from runlane.topics.definitions import SubscriptionMode
from runlane.topics.messages import Message
from runlane.topics.outcomes import DeadLetterReason, dead_letter_reason
from runlane.topics.states import check_operator_reason
from runlane.transport.sns.bindings import SnsSubscriptionBinding
from runlane.transport.sqs.provider import BlockingCalls, is_provider_error, provider_call_error
from runlane.transport.sqs.transport import provider_safe_id
from runlane.types.errors import ErrorCode, RunlaneError, configuration_error
from runlane.types.ids import validate_optional_identifier
from runlane.types.runs import RunFailure

#: Attribute names of a dead-letter copy (5.11.4 step 6) and of a replayed message (5.11.5).
REASON_ATTRIBUTE = "runlane_dead_letter_reason"
FAILURE_ATTRIBUTE = "runlane_failure"
ATTEMPT_ATTRIBUTE = "runlane_attempt"
DEAD_LETTERED_AT_ATTRIBUTE = "runlane_dead_lettered_at"
SUBSCRIPTION_ATTRIBUTE = "runlane_subscription"
REPLAY_ATTRIBUTE = "runlane_replay"
REPLAY_REASON_ATTRIBUTE = "runlane_replay_reason"
REPLAY_ACTOR_ATTRIBUTE = "runlane_replay_actor"
REPLAYS_ATTRIBUTE = "runlane_replays"
#: ``runlane_failure`` holds at most this many characters of JSON.
MAX_FAILURE_ATTRIBUTE = 2000
#: A peeked message stays hidden this long unless the scan makes it visible sooner.
PEEK_VISIBILITY_S = 30
PEEK_WAIT_S = 1
#: A scan stops after this many receives in a row that returned nothing.
EMPTY_RECEIVES_TO_STOP = 3
#: An unparseable dead letter's id starts with this, then the SQS message id.
UNPARSEABLE_ID_PREFIX = "sqs-"
#: How much of an unparseable body a listing shows as its payload.
UNPARSEABLE_BODY_SHOWN = 1000
MAX_LIST_LIMIT = 1000
_SQS_BATCH = 10


@dataclass(frozen=True, slots=True)
class SnsDeadLetter:
    """One dead letter in a subscription's SQS dead-letter queue.

    The fields are those of the runtime's ``DeadLetter`` (5.8), read from the copy:
    ``id`` is the message id (``sqs-<SQS message id>`` for a body that is not an
    envelope), ``attempt`` the receive count that dead-lettered it (0 when the
    queue's own redrive moved it, reason ``redrive_policy``), ``blocks_key`` is
    always false (SNS topics have no ORDERED subscriptions) and ``message.payload``
    is the JSON value as published.
    """

    id: str
    subscription: str
    topic: str
    key: str | None
    reason: str
    failure: RunFailure | None
    attempt: int
    replays: int
    dead_lettered_at: datetime
    blocks_key: bool
    message: Message[Any]
    #: The SQS message id of the copy in the dead-letter queue.
    provider_message_id: str
    #: Whether the body is an envelope, so the dead letter can be replayed.
    replayable: bool

    def fields(self) -> dict[str, Any]:
        """The runtime ``DeadLetter`` fields, for ``DeadLetter(**dead_letter.fields())``."""
        return {
            "id": self.id,
            "subscription": self.subscription,
            "topic": self.topic,
            "key": self.key,
            "reason": self.reason,
            "failure": self.failure,
            "attempt": self.attempt,
            "replays": self.replays,
            "dead_lettered_at": self.dead_lettered_at,
            "blocks_key": self.blocks_key,
            "message": self.message,
        }


def dead_letter_attributes(
    *,
    reason: str,
    failure: RunFailure | None,
    attempt: int,
    subscription: str,
    dead_lettered_at: datetime,
    replays: int = 0,
) -> dict[str, dict[str, str]]:
    """The SQS ``MessageAttributes`` of a dead-letter copy (5.11.4 step 6).

    ``runlane_replays`` is carried over from a replayed original, so that a
    dead letter replayed and dead-lettered again still counts its replays.
    """
    attributes = {
        REASON_ATTRIBUTE: dead_letter_reason(reason) or DeadLetterReason.FATAL_WORK_ERROR.value,
        ATTEMPT_ATTRIBUTE: str(attempt),
        DEAD_LETTERED_AT_ATTRIBUTE: dead_lettered_at.astimezone(UTC).isoformat(),
        SUBSCRIPTION_ATTRIBUTE: subscription,
    }
    if failure is not None:
        attributes[FAILURE_ATTRIBUTE] = failure_attribute(failure)
    if replays > 0:
        attributes[REPLAYS_ATTRIBUTE] = str(replays)
    return _string_attributes(attributes)


def failure_attribute(failure: RunFailure) -> str:
    """``failure.to_json()`` as JSON of at most 2000 characters: meta dropped, then the
    message cut (ending in ``…``) until it fits."""
    document = failure.to_json()
    text = _dumps(document)
    if len(text) <= MAX_FAILURE_ATTRIBUTE:
        return text
    document = {**document, "meta": {}}
    message = str(document["message"])
    text = _dumps(document)
    while len(text) > MAX_FAILURE_ATTRIBUTE and message:
        # Escapes make the JSON longer than the text: cut by the overflow, then check again.
        message = message[: max(0, len(message) - (len(text) - MAX_FAILURE_ATTRIBUTE) - 1)]
        document["message"] = message + "…"
        text = _dumps(document)
    return text


def read_attributes(raw: Mapping[str, Any] | None) -> dict[str, str]:
    """String attributes of an SQS message, from the API's or Lambda's spelling."""
    result: dict[str, str] = {}
    for name, value in (raw or {}).items():
        if isinstance(value, Mapping):
            text = value.get("StringValue", value.get("stringValue"))
            if isinstance(text, str):
                result[str(name)] = text
    return result


def dead_letter_of(
    binding: SnsSubscriptionBinding, sqs_message: Mapping[str, Any]
) -> SnsDeadLetter:
    """Read one message received from the dead-letter queue (never raises on bad content)."""
    sub = binding.subscription
    attributes = read_attributes(sqs_message.get("MessageAttributes"))
    provider_id = str(sqs_message.get("MessageId", ""))
    body = sqs_message.get("Body")
    sent_at = _sent_at(sqs_message)
    try:
        message = parse_sns_envelope(body if isinstance(body, str) else "").message
        replayable = True
    except RunlaneError:
        message = Message(
            id=UNPARSEABLE_ID_PREFIX + provider_id,
            topic=sub.topic.name,
            payload=(body if isinstance(body, str) else "")[:UNPARSEABLE_BODY_SHOWN],
            attributes={},
            published_at=sent_at,
            sequence=None,
        )
        replayable = False
    reason = attributes.get(REASON_ATTRIBUTE)
    key = None
    if sub.mode is SubscriptionMode.EXCLUSIVE and isinstance(sub.key, str):
        key = message.attributes.get(sub.key)
    return SnsDeadLetter(
        id=message.id,
        subscription=sub.name,
        topic=message.topic,
        key=key,
        reason=reason if reason else DeadLetterReason.REDRIVE_POLICY.value,
        failure=_failure(attributes.get(FAILURE_ATTRIBUTE)),
        attempt=_count(attributes.get(ATTEMPT_ATTRIBUTE)) if reason else 0,
        replays=_count(attributes.get(REPLAYS_ATTRIBUTE)),
        dead_lettered_at=_instant(attributes.get(DEAD_LETTERED_AT_ATTRIBUTE)) or sent_at,
        blocks_key=False,
        message=message,
        provider_message_id=provider_id,
        replayable=replayable,
    )


@dataclass(frozen=True, slots=True)
class _Peeked:
    receipt_handle: str
    body: str
    dead_letter: SnsDeadLetter


class DeadLetterQueue:
    """Operations on one subscription's dead-letter queue (all calls off the event loop)."""

    def __init__(self, binding: SnsSubscriptionBinding, client: Any, calls: BlockingCalls) -> None:
        self.binding = binding
        self._client = client
        self._calls = calls

    async def list_all(self, *, key: str | None = None, limit: int = 50) -> list[SnsDeadLetter]:
        """Dead letters found by one scan, oldest first (then by id), at most ``limit``."""
        if (
            isinstance(limit, bool)
            or not isinstance(limit, int)
            or not 1 <= limit <= MAX_LIST_LIMIT
        ):
            raise configuration_error(
                f"limit must be a whole number from 1 to {MAX_LIST_LIMIT}, got {limit!r}."
            )
        peeked = await self._scan(lambda _: False)
        await self._restore(peeked)
        found = [p.dead_letter for p in peeked if key is None or p.dead_letter.key == key]
        found.sort(key=lambda d: (d.dead_lettered_at, d.id))
        return found[:limit]

    async def get(self, dead_letter_id: str) -> SnsDeadLetter:
        """The dead letter with this id, if one scan finds it; else ``DEAD_LETTER_NOT_FOUND``."""
        peeked = await self._scan(_matching(dead_letter_id))
        await self._restore(peeked)
        return self._found(peeked, dead_letter_id).dead_letter

    async def replay(
        self, dead_letter_id: str, *, reason: str | None = None, actor: str | None = None
    ) -> None:
        """Send the original body back to the subscription queue, then delete the copy.

        The new message carries ``runlane_replay = "1"`` (the handler sees
        ``ctx.is_replay``), the replay count, and the reason and actor when given;
        its receive count starts at 1, so the retry budget restarts.
        """
        checked_reason = check_operator_reason(reason, required=False, action="replay")
        checked_actor = validate_optional_identifier(actor, name="actor")
        peeked = await self._scan(_matching(dead_letter_id))
        try:
            target = self._found(peeked, dead_letter_id)
            if not target.dead_letter.replayable:
                raise RunlaneError(
                    ErrorCode.INVALID_STATE,
                    f"dead letter {dead_letter_id!r} is not a runlane message envelope, so it "
                    "cannot be replayed; discard it.",
                    meta={"status": DeadLetterReason.INVALID_ENVELOPE.value},
                )
            await self._send_replay(target, checked_reason, checked_actor)
        except BaseException:
            await self._restore(peeked)
            raise
        await self._restore([p for p in peeked if p is not target])
        await self._delete(target, replayed=True)

    async def discard(self, dead_letter_id: str, *, reason: str, actor: str | None = None) -> None:
        """Delete the dead letter's copy from the dead-letter queue."""
        check_operator_reason(reason, required=True, action="discard")
        validate_optional_identifier(actor, name="actor")
        peeked = await self._scan(_matching(dead_letter_id))
        try:
            target = self._found(peeked, dead_letter_id)
        except BaseException:
            await self._restore(peeked)
            raise
        await self._restore([p for p in peeked if p is not target])
        await self._delete(target, replayed=False)

    async def _scan(self, stop: Callable[[SnsDeadLetter], bool]) -> list[_Peeked]:
        """Receive up to the scan limit (stopping after a batch with a match)."""
        url = self.binding.dead_letter_queue_url
        peeked: list[_Peeked] = []
        empty = 0
        try:
            while len(peeked) < DLQ_SCAN_LIMIT and empty < EMPTY_RECEIVES_TO_STOP:
                response = await self._call(
                    "ReceiveMessage",
                    QueueUrl=url,
                    MaxNumberOfMessages=min(_SQS_BATCH, DLQ_SCAN_LIMIT - len(peeked)),
                    WaitTimeSeconds=PEEK_WAIT_S,
                    VisibilityTimeout=PEEK_VISIBILITY_S,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                messages = response.get("Messages") or []
                if not messages:
                    empty += 1
                    continue
                empty = 0
                batch = [
                    _Peeked(
                        str(m.get("ReceiptHandle", "")),
                        m["Body"] if isinstance(m.get("Body"), str) else "",
                        dead_letter_of(self.binding, m),
                    )
                    for m in messages
                ]
                peeked.extend(batch)
                if any(stop(p.dead_letter) for p in batch):
                    break
        except BaseException:
            await self._restore(peeked)
            raise
        return peeked

    async def _restore(self, peeked: Sequence[_Peeked]) -> None:
        """Make peeked messages visible again (best effort: they reappear in 30 s anyway)."""
        url = self.binding.dead_letter_queue_url
        for start in range(0, len(peeked), _SQS_BATCH):
            entries = [
                {"Id": str(i), "ReceiptHandle": p.receipt_handle, "VisibilityTimeout": 0}
                for i, p in enumerate(peeked[start : start + _SQS_BATCH])
            ]
            try:
                await self._call("ChangeMessageVisibilityBatch", QueueUrl=url, Entries=entries)
            except RunlaneError:
                continue

    async def _send_replay(self, target: _Peeked, reason: str | None, actor: str | None) -> None:
        dead_letter = target.dead_letter
        attributes = {REPLAY_ATTRIBUTE: "1", REPLAYS_ATTRIBUTE: str(dead_letter.replays + 1)}
        if reason:
            attributes[REPLAY_REASON_ATTRIBUTE] = reason
        if actor:
            attributes[REPLAY_ACTOR_ATTRIBUTE] = actor
        params: dict[str, Any] = {
            "QueueUrl": self.binding.queue_url,
            "MessageBody": target.body,
            "MessageAttributes": _string_attributes(attributes),
        }
        if self.binding.fifo:
            millis = math.floor(datetime.now(UTC).timestamp() * 1000)
            params["MessageGroupId"] = provider_safe_id(dead_letter.key or dead_letter.id)
            params["MessageDeduplicationId"] = provider_safe_id(f"{dead_letter.id}:replay:{millis}")
        await self._call("SendMessage", permanent=ErrorCode.TRANSPORT_PUBLISH_FAILED, **params)

    async def _delete(self, target: _Peeked, *, replayed: bool) -> None:
        try:
            await self._call(
                "DeleteMessage",
                QueueUrl=self.binding.dead_letter_queue_url,
                ReceiptHandle=target.receipt_handle,
            )
        except RunlaneError as error:
            if replayed:
                error.message = (
                    f"dead letter {target.dead_letter.id!r} was replayed, but its copy could not "
                    "be deleted from the dead-letter queue; discard it once SQS answers again."
                )
                error.args = (error.message,)
            raise

    def _found(self, peeked: Sequence[_Peeked], dead_letter_id: str) -> _Peeked:
        for p in peeked:
            if p.dead_letter.id == dead_letter_id:
                return p
        raise RunlaneError(
            ErrorCode.DEAD_LETTER_NOT_FOUND,
            f"no dead letter {dead_letter_id!r} among the first {DLQ_SCAN_LIMIT} messages of the "
            f"dead-letter queue of subscription {self.binding.subscription.name!r} (SNS dead "
            "letters are found by a best-effort scan).",
            meta={"dead_letter_id": dead_letter_id, "subscription": self.binding.subscription.name},
        )

    async def _call(
        self,
        operation: str,
        *,
        permanent: ErrorCode = ErrorCode.CONFIGURATION_INVALID,
        **params: Any,
    ) -> dict[str, Any]:
        method = "".join("_" + c.lower() if c.isupper() else c for c in operation).lstrip("_")
        try:
            return await self._calls.call_sqs(self._client, method, **params)
        except Exception as error:
            if not is_provider_error(error):
                raise
            raise provider_call_error(
                error,
                operation=operation,
                permanent_code=permanent,
                what=(f"handling dead letters of subscription {self.binding.subscription.name!r}"),
                subscription=self.binding.subscription.name,
                queue_url=params.get("QueueUrl"),
            ) from None


def _matching(dead_letter_id: str) -> Callable[[SnsDeadLetter], bool]:
    return lambda dead_letter: dead_letter.id == dead_letter_id


def _string_attributes(values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    return {name: {"DataType": "String", "StringValue": value} for name, value in values.items()}


def _failure(text: str | None) -> RunFailure | None:
    if not text:
        return None
    try:
        document = json.loads(text)
        return RunFailure.from_json(document) if isinstance(document, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


def _count(text: str | None) -> int:
    try:
        return max(0, int(text)) if text is not None else 0
    except ValueError:
        return 0


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.utcoffset() is not None else None


def _sent_at(sqs_message: Mapping[str, Any]) -> datetime:
    attributes = sqs_message.get("Attributes") or {}
    try:
        return datetime.fromtimestamp(int(attributes["SentTimestamp"]) / 1000, UTC)
    except (KeyError, ValueError, TypeError, OverflowError):
        return datetime.now(UTC)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
