"""``runlane publish``, ``runlane dead-letters ...`` and ``runlane subscriptions ...``:
stored topics from the command line (contract 5.10)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from runlane.cli.app import AppCommand, app_argument, with_runtime
from runlane.cli.output import (
    console,
    events_table,
    print_json,
    print_notice,
    run_detail,
    runs_table,
    short_time,
)
from runlane.cli.params import json_document, json_option
from runlane.operator import (
    View,
    dead_letter_view,
    event_view,
    halted_key_view,
    publish_receipt_view,
    run_view,
    subscription_stats_view,
)
from runlane.types.errors import RunlaneError
from runlane.types.ids import validate_identifier


def _attribute(value: str) -> tuple[str, str]:
    name, sep, text = value.partition("=")
    if not sep:
        raise click.BadParameter(f"{value!r} is not NAME=VALUE.", param_hint="--attribute")
    return name, text


def _default_actor() -> str | None:
    """``$USER`` when it is a valid identifier (no actor otherwise)."""
    user = os.environ.get("USER") or ""
    if not user:
        return None
    try:
        return validate_identifier(user, name="actor")
    except RunlaneError:
        return None


# -- publish -------------------------------------------------------------------------------


@click.command(cls=AppCommand)
@app_argument
@click.argument("topic")
@click.option(
    "--payload", type=json_document, metavar="JSON", help="The payload as JSON (default: null)."
)
@click.option(
    "--attribute",
    "attributes",
    multiple=True,
    metavar="NAME=VALUE",
    help="A message attribute (repeat for more); subscriptions filter on them.",
)
@click.option("--message-id", help="The message id (default: a new one); reuse it to retry.")
@click.option("--deduplication-key", help="Within the topic's window, a repeat is a duplicate.")
@json_option
def publish(
    app: str,
    topic: str,
    payload: Any,
    attributes: tuple[str, ...],
    message_id: str | None,
    deduplication_key: str | None,
    as_json: bool,
) -> None:
    """Publish a message to TOPIC: one delivery per matching subscription."""
    pairs = [_attribute(value) for value in attributes]
    names = [name for name, _ in pairs]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise click.BadParameter(
            f"attribute {repeated[0]!r} is given twice.", param_hint="--attribute"
        )
    receipt = with_runtime(
        app,
        lambda rl: rl.publish(
            topic,
            payload,
            attributes=dict(pairs),
            message_id=message_id,
            deduplication_key=deduplication_key,
        ),
    )
    view = publish_receipt_view(receipt)
    if as_json:
        print_json(view)
        return
    if receipt.duplicate:
        print_notice(f"duplicate of message {escape(receipt.message_id)}: nothing published.")
    elif receipt.provider_message_id is not None:
        print_notice(
            f"published message {escape(receipt.message_id)} to SNS topic "
            f"{escape(receipt.topic)} (SNS message {escape(receipt.provider_message_id)}); "
            "SNS delivers it."
        )
    else:
        count = len(receipt.runs)
        print_notice(
            f"published message {escape(receipt.message_id)} to {escape(receipt.topic)}: "
            f"{count} deliver{'y' if count == 1 else 'ies'}."
        )
    if view["runs"]:
        console().print(runs_table(view["runs"]))


# -- dead letters --------------------------------------------------------------------------


@click.group("dead-letters")
def dead_letters() -> None:
    """List, show, replay and discard dead letters (an SNS subscription's: --subscription)."""


def dead_letters_table(views: Sequence[View]) -> Table:
    """A listing of dead letters (views from :func:`runlane.operator.dead_letter_view`)."""
    table = Table(title="dead letters", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("subscription")
    table.add_column("key")
    table.add_column("reason", overflow="fold")
    table.add_column("attempt", justify="right")
    table.add_column("dead-lettered (UTC)", no_wrap=True)
    table.add_column("halts key")
    for view in views:
        table.add_row(
            view["id"],
            Text(view["subscription"]),  # Text, not markup: stored values may hold brackets
            Text(view["key"] if view["key"] is not None else "-"),
            Text(view["reason"]),
            str(view["attempt"]),
            short_time(view["dead_lettered_at"]),
            "yes" if view["blocks_key"] else "-",
        )
    return table


@dead_letters.command("list", cls=AppCommand)
@app_argument
@click.option("--topic", help="Only dead letters of this topic.")
@click.option("--subscription", help="Only dead letters of this subscription.")
@click.option("--key", help="Only dead letters with this key.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue a listing from the cursor the last page printed.")
@json_option
def list_dead_letters(
    app: str,
    topic: str | None,
    subscription: str | None,
    key: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Dead letters, oldest first, one page at a time."""
    page = with_runtime(
        app,
        lambda rl: rl.dead_letters.list(
            topic=topic, subscription=subscription, key=key, limit=limit, cursor=cursor
        ),
    )
    views = [dead_letter_view(letter) for letter in page.data]
    if as_json:
        print_json({"dead_letters": views, "next_cursor": page.next_cursor})
        return
    out = console()
    if not views:
        out.print("no dead letters match.")
        return
    out.print(dead_letters_table(views))
    if page.next_cursor:
        out.print(f"more dead letters: add --cursor {page.next_cursor}")


@dead_letters.command("show", cls=AppCommand)
@app_argument
@click.argument("dead_letter_id")
@click.option("--subscription", help="The subscription the dead letter belongs to.")
@json_option
def show_dead_letter(
    app: str, dead_letter_id: str, subscription: str | None, as_json: bool
) -> None:
    """One dead letter field by field, then its delivery's history."""

    async def action(rl: Any) -> tuple[View, list[View] | None]:
        letter = await rl.dead_letters.get(dead_letter_id, subscription=subscription)
        brokered = rl.brokered_topics
        if brokered is not None and brokered.carries_subscription(letter.subscription):
            return dead_letter_view(letter), None  # an SQS message: no stored run, no events
        events = await rl.runs.events(letter.id)
        return dead_letter_view(letter), [event_view(event) for event in events]

    view, events = with_runtime(app, action)
    if as_json:
        print_json(view)
        return
    out = console()
    out.print(run_detail(_flat(view)))
    if events is not None:
        out.print(events_table(events, title=f"events of delivery {dead_letter_id}"))


def _flat(view: View) -> View:
    """The message's fields beside the dead letter's, for a two-column listing."""
    message = view["message"]
    flat = {name: value for name, value in view.items() if name != "message"}
    flat.update({f"message {name}": value for name, value in message.items()})
    return flat


_ACTOR_HELP = "Who does it, for the audit trail (default: $USER)."


@dead_letters.command("replay", cls=AppCommand)
@app_argument
@click.argument("dead_letter_id")
@click.option("--reason", help="Why; stored in the run.replayed event.")
@click.option("--actor", help=_ACTOR_HELP)
@click.option("--subscription", help="The subscription the dead letter belongs to.")
@json_option
def replay_dead_letter(
    app: str,
    dead_letter_id: str,
    reason: str | None,
    actor: str | None,
    subscription: str | None,
    as_json: bool,
) -> None:
    """Queue a dead letter again, with a fresh retry budget and its place in its key's order."""
    run = with_runtime(
        app,
        lambda rl: rl.dead_letters.replay(
            dead_letter_id,
            reason=reason,
            actor=actor if actor is not None else _default_actor(),
            subscription=subscription,
        ),
    )
    if run is None:  # an SNS subscription's: back on its SQS queue, no run to show
        if as_json:
            print_json(None)
            return
        print_notice(f"replayed dead letter {dead_letter_id}; it is back on its SQS queue.")
        return
    view = run_view(run)
    if as_json:
        print_json(view)
        return
    print_notice(f"replayed dead letter {dead_letter_id}; it is queued again.")
    console().print(run_detail(view))


@dead_letters.command("discard", cls=AppCommand)
@app_argument
@click.argument("dead_letter_id")
@click.option("--reason", required=True, help="Why; stored in the run.discarded event.")
@click.option("--actor", help=_ACTOR_HELP)
@click.option("--subscription", help="The subscription the dead letter belongs to.")
@json_option
def discard_dead_letter(
    app: str,
    dead_letter_id: str,
    reason: str,
    actor: str | None,
    subscription: str | None,
    as_json: bool,
) -> None:
    """Give up on a dead letter (discarded, final); an ORDERED key moves on."""
    run = with_runtime(
        app,
        lambda rl: rl.dead_letters.discard(
            dead_letter_id,
            reason=reason,
            actor=actor if actor is not None else _default_actor(),
            subscription=subscription,
        ),
    )
    if run is None:  # an SNS subscription's: deleted from its dead-letter queue
        if as_json:
            print_json(None)
            return
        print_notice(f"discarded dead letter {dead_letter_id}.")
        return
    view = run_view(run)
    if as_json:
        print_json(view)
        return
    print_notice(f"discarded dead letter {dead_letter_id}.")
    console().print(run_detail(view))


# -- subscriptions -------------------------------------------------------------------------


@click.group("subscriptions")
def subscriptions() -> None:
    """Deliveries per subscription, and ORDERED keys halted by a dead letter."""


def subscriptions_table(views: Iterable[View]) -> Table:
    """Counts per subscription (views from :func:`runlane.operator.subscription_stats_view`)."""
    table = Table(title="subscriptions", title_justify="left")
    table.add_column("subscription", no_wrap=True)
    table.add_column("topic")
    table.add_column("mode")
    table.add_column("queue")
    table.add_column("waiting", justify="right")
    table.add_column("running", justify="right")
    table.add_column("dead-lettered", justify="right", style="bold red")
    table.add_column("halted keys", justify="right")
    for view in views:
        # SNS subscriptions' numbers are the queues' approximate attributes.
        about = "~" if view["approximate"] else ""
        table.add_row(
            Text(view["name"]),  # Text, not markup: names may hold brackets
            Text(view["topic"]),
            view["mode"],
            Text(view["queue"] or "-"),
            f"{about}{view['waiting']}",
            f"{about}{view['running']}",
            f"{about}{view['dead_lettered']}",
            str(view["halted_keys"]),
        )
    return table


@subscriptions.command("list", cls=AppCommand)
@app_argument
@json_option
def list_subscriptions(app: str, as_json: bool) -> None:
    """Every registered subscription with its deliveries by status."""
    stats = with_runtime(app, lambda rl: rl.subscriptions.list())
    views = [subscription_stats_view(item) for item in stats]
    if as_json:
        print_json(views)
    elif not views:
        console().print("no subscriptions are registered.")
    else:
        console().print(subscriptions_table(views))


@subscriptions.command("halted-keys", cls=AppCommand)
@app_argument
@click.argument("subscription")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1000))
@click.option("--cursor", help="Continue a listing from the cursor the last page printed.")
@json_option
def halted_keys(app: str, subscription: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """ORDERED keys of SUBSCRIPTION whose head is dead-lettered: replay or discard it."""
    page = with_runtime(
        app, lambda rl: rl.subscriptions.halted_keys(subscription, limit=limit, cursor=cursor)
    )
    views = [halted_key_view(key) for key in page.data]
    if as_json:
        print_json({"halted_keys": views, "next_cursor": page.next_cursor})
        return
    out = console()
    if not views:
        out.print(Text(f"no halted keys in {subscription}."))
        return
    table = Table(title=Text(f"halted keys of {subscription}"), title_justify="left")
    table.add_column("key", no_wrap=True)
    table.add_column("dead letter id", no_wrap=True)
    table.add_column("dead-lettered (UTC)", no_wrap=True)
    table.add_column("waiting", justify="right")
    for view in views:
        table.add_row(
            Text(view["key"]),  # Text, not markup: keys come from messages
            view["dead_letter_id"],
            short_time(view["dead_lettered_at"]),
            str(view["waiting"]),
        )
    out.print(table)
    if page.next_cursor:
        out.print(f"more halted keys: add --cursor {page.next_cursor}")
