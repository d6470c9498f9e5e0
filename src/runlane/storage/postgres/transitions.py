"""Applying state transitions: each round of distinct runs as one compare-and-set statement."""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal
from functools import lru_cache
from typing import Any

from runlane.ports.storage import Transition
from runlane.storage.postgres.sessions import AsyncSession, DriverConnection, Queries
from runlane.storage.postgres.waiting import finished_channel
from runlane.storage.sql.encoding import dumps, micros_or_none
from runlane.storage.sql.implied import implied_success_attempt
from runlane.types.runs import TERMINAL_STATUSES


def transition_rounds(transitions: Sequence[Transition]) -> list[list[int]]:
    """Split ``transitions`` into rounds in which no run appears twice, keeping their order.

    A batch statement updates each run at most once, so the second transition of
    one run goes into the next round and sees the first one's result.
    """
    rounds: list[list[int]] = []
    seen: dict[str, int] = {}
    for index, transition in enumerate(transitions):
        depth = seen.get(transition.run_id, -1) + 1
        seen[transition.run_id] = depth
        if depth == len(rounds):
            rounds.append([])
        rounds[depth].append(index)
    return rounds


#: An environment's finished-run channel (an md5 digest), computed once.
_channel = lru_cache(maxsize=64)(finished_channel)

#: The progress fields of a transition that carries none.
_NO_PROGRESS = (None, None, None, None)


def transition_params(
    environment: str, transitions: Sequence[Transition], now_us: int
) -> dict[str, Any]:
    """Parameters of ``apply_transitions`` for one round: the transitions (with the
    progress they carry) and their events as JSON arrays of positional fields
    (:data:`~.shapes.TRANSITION` and :data:`~.shapes.TRANSITION_EVENT`), and
    ``channel``: the environment's finished-run channel when one of them finishes its
    run (:func:`settle_statement` then announces it to the waiters of
    :mod:`~runlane.storage.postgres.waiting`), else None."""
    ids: list[str] = []
    rows: list[list[Any]] = []
    events: list[list[Any]] = []
    finishing = False
    for transition in transitions:
        changes = transition.changes
        if changes.status in TERMINAL_STATUSES:
            finishing = True
        run_id = transition.run_id
        sequence = transition.expected_sequence
        failure = changes.failure
        # Left out of the events: the row implies it (or the statement appends it).
        succeeded_attempt = implied_success_attempt(transition)
        reported = transition.progress
        ids.append(run_id)
        rows.append(
            [
                run_id,
                changes.status.value,
                micros_or_none(changes.run_at),
                changes.result,
                failure.to_json() if failure is not None else None,
                changes.cancel_reason,
                int(changes.add_failure),
                len(transition.events),
                changes.keep_lease,
                sequence,
                transition.lease_token,
                micros_or_none(transition.lease_expired_by),
                changes.reset_failures,
                changes.replays,
                changes.dead_letter_reason,
                micros_or_none(changes.dead_lettered_at),
                succeeded_attempt,
                *(
                    _NO_PROGRESS
                    if reported is None
                    else (
                        reported.attempt,
                        reported.fraction,
                        reported.message,
                        reported.data_json,
                    )
                ),
            ]
        )
        if succeeded_attempt is None:
            for offset, event in enumerate(transition.events, start=1):
                events.append([run_id, sequence + offset, event.type.value, event.data])
    return {
        "environment": environment,
        "now": now_us,
        "ids": ids,
        "transitions": floats_kept(dumps(rows)),
        "events": dumps(events),
        # Read by apply_finishing_transitions only (settle_statement picks it).
        "channel": _channel(environment) if finishing else None,
    }


def settle_statement(q: Queries, params: dict[str, Any]) -> str:
    """The statement of one round of :func:`transition_params`: the one that announces
    the environment when a transition of the round finishes its run."""
    if params["channel"] is None:
        return q["apply_transitions"]
    return q["apply_finishing_transitions"]


#: A JSON string (left as it is) or a number in exponent form with a positive exponent.
_STRING_OR_BIG_FLOAT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?\d+(?:\.\d+)?[eE]\+\d+)')


def floats_kept(text: str) -> str:
    """JSON ``text`` with each float that Python writes in exponent form (``1e+16``)
    written out in full with a fraction (``10000000000000000.0``), so that ``jsonb``,
    which keeps a number's written scale, reads it back as a float and not an integer.

    Only whole floats of at least 1e16 are written so; ``"e+"`` appears in few texts, so
    the rest pass through after one substring check.
    """
    if "e+" not in text and "E+" not in text:
        return text
    return _STRING_OR_BIG_FLOAT.sub(_in_full, text)


def _in_full(match: re.Match[str]) -> str:
    number = match.group(1)
    if number is None:
        return match.group(0)
    return format(Decimal(number), "f") + ".0"


async def apply_transitions(
    q: Queries,
    environment: str,
    transitions: Sequence[Transition],
    now_us: int,
    conn: DriverConnection,
) -> list[bool]:
    """Compare-and-set each transition on the driver's autocommit ``conn``: one statement
    per round of distinct runs (:func:`transition_rounds`), a transaction when several."""
    rounds = transition_rounds(transitions)
    applied = [False] * len(transitions)

    async def apply_round(indexes: list[int]) -> None:
        params = transition_params(environment, [transitions[i] for i in indexes], now_us)
        done = {row["id"] for row in await AsyncSession(conn).fetch(
            settle_statement(q, params), params
        )}  # fmt: skip
        for i in indexes:
            applied[i] = transitions[i].run_id in done

    if len(rounds) == 1:
        await apply_round(rounds[0])
    else:
        async with conn.transaction():
            for indexes in rounds:
                await apply_round(indexes)
    return applied
