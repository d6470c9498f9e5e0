"""The ``runlane`` CLI on stored topics: publish, dead letters and subscriptions (5.10)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.e2e.runner import Cli

APP = "topics_app:rl"

TOPICS_APP = textwrap.dedent(
    """
    from runlane import Outcome, Runlane, queue, sqlite_lane, subscription, topic

    main = queue("main", default=True)
    orders = topic("orders")


    @subscription("orders.email", topic=orders, filter={"event": ["paid"]})
    async def email(message, ctx):
        return None


    @subscription("orders.ledger", topic=orders, mode="ordered", key="customer")
    def ledger(message, ctx):
        if message.payload.get("bad") and not ctx.is_replay:
            return Outcome.dead_letter(message.payload.get("why", "ledger refused the entry"))
        return None


    rl = Runlane(
        lane=sqlite_lane("topics.db"),
        queues=[main],
        tasks=[],
        topics=[orders],
        subscriptions=[email, ledger],
    )
    """
)


@pytest.fixture
def topics_cli(tmp_path: Path) -> Cli:
    """``runlane`` in a folder holding ``topics_app.py``."""
    (tmp_path / "topics_app.py").write_text(TOPICS_APP)
    return Cli(tmp_path)


def test_publish_fans_out_and_a_repeat_of_its_message_id_is_a_duplicate(topics_cli: Cli) -> None:
    cli = topics_cli
    receipt = cli.json(
        "publish", APP, "orders", "--payload", '{"id": 1}',
        "--attribute", "event=paid", "--attribute", "customer=c1", "--message-id", "m-1",
    )  # fmt: skip
    assert receipt["message_id"] == "m-1" and receipt["duplicate"] is False
    assert receipt["sequence"] >= 1 and receipt["published_at"]
    assert [run["task_id"] for run in receipt["runs"]] == ["orders.email", "orders.ledger"]
    assert set(receipt["runs"][0]) == {
        "id", "task_id", "queue", "status", "attempt", "priority", "run_at", "updated_at",
        "progress",
    }  # fmt: skip
    again = cli.run(
        "publish", APP, "orders", "--payload", '{"id": 1}',
        "--attribute", "customer=c1", "--attribute", "event=paid", "--message-id", "m-1",
    )  # fmt: skip
    assert "duplicate of message m-1: nothing published" in again.stderr
    fresh = cli.run("publish", APP, "orders", "--attribute", "customer=c2")
    assert "deliver" in fresh.stderr and "orders.ledger" in fresh.stdout


def test_bad_publishes_exit_1_with_their_error_code(topics_cli: Cli) -> None:
    cli = topics_cli
    unknown = cli.run("publish", APP, "nope", expect=1)
    assert "error[topic_not_found]" in unknown.stderr
    bad = cli.run("publish", APP, "orders", "--attribute", "runlane_x=1", expect=1)
    assert "error[payload_invalid]" in bad.stderr
    cli.run("publish", APP, "orders", "--message-id", "m-2")
    conflict = cli.run("publish", APP, "orders", "--message-id", "m-2", "--payload", "1", expect=1)
    assert "error[message_id_conflict]" in conflict.stderr
    usage = cli.run("publish", APP, "orders", "--attribute", "no-equals-sign", expect=2)
    assert "NAME=VALUE" in usage.stderr


def test_a_dead_letter_is_listed_shown_replayed_and_its_key_resumes(topics_cli: Cli) -> None:
    cli = topics_cli
    head = cli.json(
        "publish", APP, "orders", "--payload", '{"bad": true}', "--attribute", "customer=c1"
    )
    cli.json("publish", APP, "orders", "--payload", '{"n": 2}', "--attribute", "customer=c1")
    cli.run("worker", APP, "--drain")
    (ledger_run,) = head["runs"]

    listed = cli.json("dead-letters", "list", APP, "--subscription", "orders.ledger")
    (letter,) = listed["dead_letters"]
    assert listed["next_cursor"] is None
    assert set(letter) == {
        "id", "subscription", "topic", "key", "reason", "failure", "attempt", "replays",
        "dead_lettered_at", "blocks_key", "message",
    }  # fmt: skip
    assert letter["id"] == ledger_run["id"] and letter["reason"] == "ledger refused the entry"
    assert letter["key"] == "c1" and letter["blocks_key"] is True
    assert letter["message"]["payload"] == {"bad": True}
    table = cli.run("dead-letters", "list", APP).stdout
    assert letter["id"] in table and "yes" in table

    shown = cli.run("dead-letters", "show", APP, letter["id"]).stdout
    assert "ledger refused the entry" in shown and "run.dead_lettered" in shown
    assert cli.json("dead-letters", "show", APP, letter["id"]) == letter

    halted = cli.json("subscriptions", "halted-keys", APP, "orders.ledger")
    assert [(k["key"], k["dead_letter_id"], k["waiting"]) for k in halted["halted_keys"]] == [
        ("c1", letter["id"], 1)
    ]
    stats = {s["name"]: s for s in cli.json("subscriptions", "list", APP)}
    assert stats["orders.ledger"]["halted_keys"] == 1
    assert stats["orders.ledger"]["dead_lettered"] == 1
    assert stats["orders.ledger"]["mode"] == "ordered"

    replay = cli.run(
        "dead-letters", "replay", APP, letter["id"], "--reason", "fixed", env={"USER": "ada"}
    )
    assert f"replayed dead letter {letter['id']}; it is queued again." in replay.stderr
    events = cli.json("runs", "events", APP, letter["id"])
    assert events[-1]["type"] == "run.replayed"
    assert events[-1]["data"] == {"reason": "fixed", "actor": "ada", "replays": 1}
    cli.run("worker", APP, "--drain")
    assert cli.json("dead-letters", "list", APP)["dead_letters"] == []
    assert "no dead letters match." in cli.run("dead-letters", "list", APP).stdout
    run = cli.json("runs", "show", APP, letter["id"])
    assert run["status"] == "succeeded" and run["replays"] == 1 and run["partition_key"] == "c1"


def test_discard_needs_a_reason_and_ends_the_dead_letter(topics_cli: Cli) -> None:
    cli = topics_cli
    head = cli.json(
        "publish", APP, "orders", "--payload", '{"bad": true}', "--attribute", "customer=c9"
    )
    cli.run("worker", APP, "--drain")
    run_id = head["runs"][0]["id"]
    missing = cli.run("dead-letters", "discard", APP, run_id, expect=2)
    assert "--reason" in missing.stderr
    discarded = cli.json("dead-letters", "discard", APP, run_id, "--reason", "obsolete")
    assert discarded["status"] == "discarded"
    again = cli.run("dead-letters", "discard", APP, run_id, "--reason", "twice", expect=1)
    assert "error[invalid_state]" in again.stderr
    gone = cli.run("dead-letters", "show", APP, run_id, expect=1)
    assert "error[dead_letter_not_found]" in gone.stderr


def test_stored_text_is_printed_verbatim_never_as_markup(topics_cli: Cli) -> None:
    # Reasons, keys, payloads and message ids are data: brackets in them are shown as
    # they are (they used to be read as console markup: dropped, or a crash on "[/x]").
    cli = topics_cli
    why = "no [customer] field [/x]"
    wide = {"COLUMNS": "250"}
    published = cli.run(
        "publish", APP, "orders", "--payload", f'{{"bad": true, "why": "{why}"}}',
        "--attribute", "customer=[/c1]", "--message-id", "[/m1]", env=wide,
    )  # fmt: skip
    assert "published message [/m1] to orders: 1 delivery" in published.stderr
    cli.json("publish", APP, "orders", "--attribute", "customer=[/c1]")
    cli.run("worker", APP, "--drain")
    (letter,) = cli.json("dead-letters", "list", APP)["dead_letters"]
    assert letter["reason"] == why and letter["key"] == "[/c1]"

    listing = cli.run("dead-letters", "list", APP, env=wide).stdout
    assert why in listing and "[/c1]" in listing
    shown = cli.run("dead-letters", "show", APP, letter["id"], env=wide).stdout
    assert why in shown and "[/m1]" in shown and '"customer":"[/c1]"' in shown
    halted = cli.run("subscriptions", "halted-keys", APP, "orders.ledger", env=wide).stdout
    assert "[/c1]" in halted and letter["id"] in halted
    run = cli.run("runs", "show", APP, letter["id"], env=wide).stdout
    assert why in run


def test_dead_letter_commands_check_arguments_before_ids_and_name_each_error(
    topics_cli: Cli,
) -> None:
    cli = topics_cli
    cases: list[tuple[tuple[str, ...], str]] = [
        (("dead-letters", "discard", APP, "no-such-id", "--reason", " "), "configuration_invalid"),
        (("dead-letters", "replay", APP, "no-such-id", "--actor", "a:b"), "configuration_invalid"),
        (("dead-letters", "replay", APP, "nope", "--reason", "x" * 1001), "configuration_invalid"),
        (("dead-letters", "replay", APP, "no-such-id"), "dead_letter_not_found"),
        (("dead-letters", "show", APP, "no-such-id"), "dead_letter_not_found"),
        (("dead-letters", "list", APP, "--topic", "nope"), "topic_not_found"),
        (("dead-letters", "list", APP, "--subscription", "nope"), "subscription_not_found"),
        (("dead-letters", "list", APP, "--cursor", "bogus"), "configuration_invalid"),
        (("subscriptions", "halted-keys", APP, "nope"), "subscription_not_found"),
    ]  # fmt: skip
    for args, code in cases:
        refused = cli.run(*args, expect=1)
        assert refused.stderr.startswith(f"error[{code}]: "), (args, refused.stderr)
        assert refused.stdout == ""


def test_replay_without_a_usable_user_records_no_actor_and_pages_are_announced(
    topics_cli: Cli,
) -> None:
    cli = topics_cli
    bad = ("--payload", '{"bad": true}')
    ids = [
        cli.json("publish", APP, "orders", *bad, "--attribute", f"customer={c}")["runs"][0]["id"]
        for c in ("c1", "c2")
    ]
    cli.run("worker", APP, "--drain")
    first = cli.run("dead-letters", "list", APP, "--limit", "1")
    cursor = cli.json("dead-letters", "list", APP, "--limit", "1")["next_cursor"]
    assert f"more dead letters: add --cursor {cursor}" in first.stdout
    rest = cli.json("dead-letters", "list", APP, "--limit", "1", "--cursor", cursor)
    assert [d["id"] for d in rest["dead_letters"]] == ids[1:] and rest["next_cursor"] is None

    replayed = cli.json("dead-letters", "replay", APP, ids[0], env={"USER": "not:an:id"})
    assert replayed["status"] == "queued" and replayed["replays"] == 1
    assert replayed["partition_key"] == "c1"
    events = cli.json("runs", "events", APP, ids[0])
    assert events[-1]["data"] == {"reason": None, "actor": None, "replays": 1}
    discarded = cli.run("dead-letters", "discard", APP, ids[1], "--reason", "dup", env={"USER": ""})
    assert f"discarded dead letter {ids[1]}." in discarded.stderr
    assert cli.json("runs", "events", APP, ids[1])[-1]["data"] == {"reason": "dup", "actor": None}
