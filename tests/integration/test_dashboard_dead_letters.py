"""The dead-letters and subscriptions pages, their JSON twins and the Replay / Discard
actions, over the seeded app after a few orders were published (SQLite file, and
both storage drivers for the API round trip)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.support.dashboard_app import (
    NEGATIVE_AMOUNT,
    XSS_PAYLOAD,
    PublishedOrders,
    greet,
    main,
    publish_orders,
)
from tests.support.dashboard_client import TOKEN, DashboardUnderTest, dashboard_under_test

from runlane import ErrorCode, Lane, Runlane, RunStatus, sqlite_lane
from runlane.dashboard import create_app
from runlane.operator import dead_letter_view
from runlane.testing import drain

BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path, token=TOKEN) as under_test:
        yield under_test


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def _published(dash: DashboardUnderTest) -> PublishedOrders:
    return dash.read(publish_orders)


def _events(dash: DashboardUnderTest, run_id: str) -> list[tuple[str, dict[str, object]]]:
    async def read(rl: Runlane) -> list[tuple[str, dict[str, object]]]:
        return [(event.type.value, event.data) for event in await rl.runs.events(run_id)]

    return dash.read(read)


def _dead_letter_links(html: str) -> list[str]:
    return re.findall(r'href="/dead-letters/([^"/?]+)"', html)


def test_the_list_shows_each_dead_letter_with_reason_attempts_and_an_escaped_preview(
    read_only: DashboardUnderTest,
) -> None:
    orders = _published(read_only)
    page = read_only.client.get("/dead-letters")
    data = read_only.client.get("/api/dead-letters").json()

    assert page.status_code == 200
    assert data["enabled"] is True and data["next_cursor"] is None
    letters = data["dead_letters"]
    assert [d["id"] for d in letters] == [orders.dead_letter, orders.xss_dead_letter]
    first = letters[0]
    assert first["reason"] == f"{NEGATIVE_AMOUNT} on order 1"
    assert (first["subscription"], first["topic"], first["key"]) == (
        "orders.ledger",
        "orders",
        "ada",
    )
    assert (first["attempt"], first["replays"], first["blocks_key"]) == (1, 0, True)
    assert first["dead_lettered_at"] and first["message"]["payload"] == {
        "order_id": 1,
        "cents": -500,
    }
    assert _dead_letter_links(page.text) == [orders.dead_letter, orders.xss_dead_letter]
    assert f'href="/runs/{orders.dead_letter}"' in page.text  # each row links to its run
    assert "negative amount on order 1" in page.text and "key halted" in page.text
    assert "<img" not in page.text and "&lt;img src=x onerror=" in page.text
    # The shared view, so the CLI and the dashboard agree field for field.
    letter = read_only.read(lambda rl: rl.dead_letters.get(orders.dead_letter))
    assert first == dead_letter_view(letter)


def test_the_filters_narrow_by_topic_subscription_and_key(read_only: DashboardUnderTest) -> None:
    orders = _published(read_only)

    def ids(**query: str) -> list[str]:
        return [
            d["id"]
            for d in read_only.client.get("/api/dead-letters", params=query).json()["dead_letters"]
        ]

    assert ids(key="bo") == [orders.xss_dead_letter]
    assert ids(subscription="orders.audit") == []
    assert ids(topic="orders", subscription="orders.ledger", key="ada") == [orders.dead_letter]
    page = read_only.client.get("/dead-letters", params={"key": "bo"})
    assert _dead_letter_links(page.text) == [orders.xss_dead_letter]
    assert 'name="key" value="bo"' in page.text


def test_the_list_pages_with_a_cursor_that_keeps_the_filters(read_only: DashboardUnderTest) -> None:
    orders = _published(read_only)
    first = read_only.client.get(
        "/dead-letters", params={"subscription": "orders.ledger", "limit": "1"}
    )
    next_link = re.search(r'href="([^"]+)" rel="next"', first.text)
    assert next_link is not None
    second = read_only.client.get(next_link.group(1).replace("&amp;", "&"))
    api = read_only.client.get("/api/dead-letters", params={"limit": 1}).json()
    api_next = read_only.client.get(
        "/api/dead-letters", params={"limit": 1, "cursor": api["next_cursor"]}
    ).json()

    assert "subscription=orders.ledger" in next_link.group(1)
    assert _dead_letter_links(first.text) == [orders.dead_letter]
    assert _dead_letter_links(second.text) == [orders.xss_dead_letter]
    assert [d["id"] for d in api["dead_letters"] + api_next["dead_letters"]] == [
        orders.dead_letter,
        orders.xss_dead_letter,
    ]
    assert api_next["next_cursor"] is None


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"subscription": "orders.nope"}, ErrorCode.SUBSCRIPTION_NOT_FOUND),
        ({"topic": "nope"}, ErrorCode.TOPIC_NOT_FOUND),
        ({"limit": "0"}, ErrorCode.CONFIGURATION_INVALID),
        ({"cursor": "abc"}, ErrorCode.CONFIGURATION_INVALID),
    ],
)
def test_a_bad_filter_is_a_400_with_the_operator_message(
    read_only: DashboardUnderTest, query: dict[str, str], code: ErrorCode
) -> None:
    api = read_only.client.get("/api/dead-letters", params=query)
    page = read_only.client.get("/dead-letters", params=query)

    assert api.status_code == 400
    assert api.json()["error"]["code"] == code.value and api.json()["error"]["message"]
    assert page.status_code == 400 and 'role="alert"' in page.text


def test_the_detail_shows_the_message_and_the_delivery_history(
    read_only: DashboardUnderTest,
) -> None:
    orders = _published(read_only)
    page = read_only.client.get(f"/dead-letters/{orders.xss_dead_letter}")
    data = read_only.client.get(f"/api/dead-letters/{orders.xss_dead_letter}").json()

    assert page.status_code == 200
    assert data["dead_letter"]["id"] == orders.xss_dead_letter
    assert data["dead_letter"]["message"]["payload"]["note"] == XSS_PAYLOAD
    assert [e["type"] for e in data["events"]] == [
        "run.created",
        "run.started",
        "run.dead_lettered",
    ]
    assert re.findall(r'<span class="event">([^<]+)</span>', page.text) == [
        "run.created",
        "run.started",
        "run.dead_lettered",
    ]
    assert "<img" not in page.text and "&lt;img src=x" in page.text
    assert "negative amount on order 3" in page.text
    assert "Replay" not in page.text  # read-only: no forms at all


def test_an_unknown_or_resolved_dead_letter_is_404(read_only: DashboardUnderTest) -> None:
    greeting = read_only.seeded.greetings[0]
    for dead_letter_id in ("no-such-id", greeting):
        api = read_only.client.get(f"/api/dead-letters/{dead_letter_id}")
        page = read_only.client.get(f"/dead-letters/{dead_letter_id}")
        assert api.status_code == 404 and page.status_code == 404
        assert api.json()["error"]["code"] == ErrorCode.DEAD_LETTER_NOT_FOUND.value


def test_without_the_token_no_action_is_possible_and_nothing_changes(
    read_only: DashboardUnderTest, tmp_path: Path
) -> None:
    orders = _published(read_only)
    before = read_only.state()
    form = read_only.client.post(f"/dead-letters/{orders.dead_letter}/replay", data={"reason": "x"})
    api = read_only.client.post(
        f"/api/dead-letters/{orders.dead_letter}/discard", json={"reason": "x"}, headers=BEARER
    )

    assert form.status_code == api.status_code == 403
    assert api.json()["error"]["code"] == "forbidden"
    assert read_only.state() == before


def test_signed_out_visitors_get_a_sign_in_link_and_401s(dash: DashboardUnderTest) -> None:
    orders = _published(dash)
    before = dash.state()
    page = dash.client.get(f"/dead-letters/{orders.dead_letter}")
    form = dash.client.post(f"/dead-letters/{orders.dead_letter}/replay", data={"reason": "x"})
    api = dash.client.post(f"/api/dead-letters/{orders.dead_letter}/replay", json={"reason": "x"})

    assert "Sign in to act" in page.text and "Replay" not in page.text
    assert form.status_code == api.status_code == 401
    assert dash.state() == before


def test_a_signed_in_operator_replays_with_a_reason_recorded_as_the_dashboard(
    dash: DashboardUnderTest,
) -> None:
    orders = _published(dash)
    dash.sign_in()
    page = dash.client.get(f"/dead-letters/{orders.dead_letter}")
    csrf = dash.csrf_token(f"/dead-letters/{orders.dead_letter}")
    assert "Replay" in page.text and "Discard" in page.text and "required" in page.text

    replayed = dash.client.post(
        f"/dead-letters/{orders.dead_letter}/replay",
        data={"csrf_token": csrf, "reason": "amount checked by hand"},
        follow_redirects=False,
    )

    assert replayed.status_code == 303
    assert replayed.headers["location"] == f"/runs/{orders.dead_letter}"
    type_, data = _events(dash, orders.dead_letter)[-1]
    assert type_ == "run.replayed"
    assert data["reason"] == "amount checked by hand" and data["actor"] == "dashboard"
    run_page = dash.client.get(f"/runs/{orders.dead_letter}").text
    assert "s-queued" in run_page and "run.replayed" in run_page
    # The replayed delivery goes through, and the order waiting behind it on the key follows.
    dash.read(lambda rl: drain(rl, queues=[main]))
    statuses = {run.id: run.status for run in dash.runs()}
    assert statuses[orders.dead_letter] is RunStatus.SUCCEEDED
    assert statuses[orders.waiting] is RunStatus.SUCCEEDED
    assert [d["id"] for d in dash.client.get("/api/dead-letters").json()["dead_letters"]] == [
        orders.xss_dead_letter
    ]


def test_a_replay_from_the_form_needs_no_reason(dash: DashboardUnderTest) -> None:
    orders = _published(dash)
    dash.sign_in()
    page = dash.client.get(f"/dead-letters/{orders.dead_letter}").text
    replay_input, discard_input = re.findall(r'<input type="text" name="reason"[^>]*>', page)
    assert 'aria-label="Replay reason"' in replay_input and "reason (optional)" in replay_input
    assert " required " not in replay_input
    assert 'aria-label="Discard reason"' in discard_input and " required " in discard_input
    csrf = dash.csrf_token(f"/dead-letters/{orders.dead_letter}")

    replayed = dash.client.post(
        f"/dead-letters/{orders.dead_letter}/replay",
        data={"csrf_token": csrf, "reason": "  "},
        follow_redirects=False,
    )

    assert replayed.status_code == 303
    assert _events(dash, orders.dead_letter)[-1] == (
        "run.replayed",
        {"reason": None, "actor": "dashboard", "replays": 1},
    )


def test_discard_needs_a_reason_and_ends_the_delivery(dash: DashboardUnderTest) -> None:
    orders = _published(dash)
    dash.sign_in()
    csrf = dash.csrf_token(f"/dead-letters/{orders.xss_dead_letter}")
    before = dash.state()

    blank = dash.client.post(
        f"/dead-letters/{orders.xss_dead_letter}/discard", data={"csrf_token": csrf, "reason": " "}
    )
    assert blank.status_code == 400 and 'role="alert"' in blank.text and "say why" in blank.text
    assert dash.state() == before

    discarded = dash.client.post(
        f"/dead-letters/{orders.xss_dead_letter}/discard",
        data={"csrf_token": csrf, "reason": "test order"},
        follow_redirects=False,
    )
    assert discarded.status_code == 303
    type_, data = _events(dash, orders.xss_dead_letter)[-1]
    assert (type_, data["reason"], data["actor"]) == ("run.discarded", "test order", "dashboard")
    run_page = dash.client.get(f"/runs/{orders.xss_dead_letter}").text
    assert 'class="status s-discarded"' in run_page


def test_acting_second_shows_the_conflict_as_a_message_not_an_error_page(
    dash: DashboardUnderTest,
) -> None:
    orders = _published(dash)
    dash.sign_in()
    csrf = dash.csrf_token(f"/dead-letters/{orders.dead_letter}")
    # Another operator replays it between our page load and our click.
    dash.read(lambda rl: rl.dead_letters.replay(orders.dead_letter, reason="first", actor="ops"))
    before = dash.state()

    late = dash.client.post(
        f"/dead-letters/{orders.dead_letter}/discard",
        data={"csrf_token": csrf, "reason": "too late"},
    )
    api = dash.client.post(
        f"/api/dead-letters/{orders.dead_letter}/replay", json={"reason": "again"}, headers=BEARER
    )

    assert late.status_code == 409
    assert 'role="alert"' in late.text and "Not done:" in late.text
    assert f"<code>{orders.dead_letter}</code>" in late.text  # the run as it is now
    assert api.status_code == 409 and api.json()["error"]["code"] == "invalid_state"
    assert dash.state() == before


def test_a_form_without_the_csrf_token_is_refused(dash: DashboardUnderTest) -> None:
    orders = _published(dash)
    dash.sign_in()
    before = dash.state()

    answer = dash.client.post(f"/dead-letters/{orders.dead_letter}/replay", data={"reason": "x"})

    assert answer.status_code == 403 and dash.state() == before


def test_the_bearer_api_replays_and_discards_for_scripts(dash: DashboardUnderTest) -> None:
    orders = _published(dash)
    before = dash.state()
    no_reason = dash.client.post(f"/api/dead-letters/{orders.dead_letter}/discard", headers=BEARER)
    not_text = dash.client.post(
        f"/api/dead-letters/{orders.dead_letter}/replay", json={"reason": 5}, headers=BEARER
    )
    bad_action = dash.client.post(
        f"/api/dead-letters/{orders.dead_letter}/explode", json={"reason": "x"}, headers=BEARER
    )
    bad_body = dash.client.post(
        f"/api/dead-letters/{orders.dead_letter}/replay", content=b"[1]", headers=BEARER
    )
    unknown = dash.client.post(
        "/api/dead-letters/no-such-id/replay", json={"reason": "x"}, headers=BEARER
    )
    answers = [no_reason, not_text, bad_action, bad_body]
    assert [answer.status_code for answer in answers] == [400] * 4
    assert no_reason.json()["error"]["code"] == "configuration_invalid"
    assert "say why you discard" in no_reason.json()["error"]["message"]
    assert not_text.json()["error"]["code"] == "configuration_invalid"
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == ErrorCode.DEAD_LETTER_NOT_FOUND.value
    assert dash.state() == before

    # Replay's reason is optional (an empty body is fine), discard's is required.
    replayed = dash.client.post(f"/api/dead-letters/{orders.dead_letter}/replay", headers=BEARER)
    discarded = dash.client.post(
        f"/api/dead-letters/{orders.xss_dead_letter}/discard",
        json={"reason": "script discard"},
        headers=BEARER,
    )

    assert replayed.status_code == discarded.status_code == 200
    assert replayed.json()["run"]["status"] == "queued" and replayed.json()["run"]["replays"] == 1
    assert discarded.json()["run"]["status"] == "discarded"
    assert _events(dash, orders.dead_letter)[-1] == (
        "run.replayed",
        {"reason": None, "actor": "dashboard", "replays": 1},
    )


def test_the_subscriptions_page_counts_deliveries_and_lists_halted_keys(
    read_only: DashboardUnderTest,
) -> None:
    orders = _published(read_only)
    page = read_only.client.get("/subscriptions")
    data = read_only.client.get("/api/subscriptions").json()
    halted = read_only.client.get(
        "/api/subscriptions/orders.ledger/halted-keys", params={"limit": 1}
    ).json()
    halted_next = read_only.client.get(
        "/api/subscriptions/orders.ledger/halted-keys",
        params={"limit": 1, "cursor": halted["next_cursor"]},
    ).json()

    assert data["enabled"] is True
    subs = {s["name"]: s for s in data["subscriptions"]}
    ledger, audit = subs["orders.ledger"], subs["orders.audit"]
    assert (ledger["mode"], ledger["queue"], ledger["topic"]) == ("ordered", "main", "orders")
    assert ledger["counts"] == {"dead_lettered": 2, "queued": 1}
    assert (ledger["waiting"], ledger["dead_lettered"], ledger["halted_keys"]) == (1, 2, 2)
    assert [(h["key"], h["dead_letter_id"], h["waiting"]) for h in ledger["halted"]] == [
        ("ada", orders.dead_letter, 1),
        ("bo", orders.xss_dead_letter, 0),
    ]
    assert (audit["mode"], audit["counts"], audit["halted"]) == ("none", {"succeeded": 3}, [])
    assert [h["key"] for h in halted["halted_keys"] + halted_next["halted_keys"]] == ["ada", "bo"]
    assert page.status_code == 200
    assert 'href="/dead-letters?subscription=orders.ledger">2</a>' in page.text
    assert f'href="/dead-letters/{orders.dead_letter}"' in page.text
    assert "2 halted keys" in page.text
    unknown = read_only.client.get("/api/subscriptions/orders.nope/halted-keys")
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == ErrorCode.SUBSCRIPTION_NOT_FOUND.value


def test_the_overview_counts_dead_letters_and_run_detail_shows_delivery_fields(
    dash: DashboardUnderTest,
) -> None:
    empty = dash.client.get("/api/overview").json()["dead_letters"]
    orders = _published(dash)
    overview = dash.client.get("/api/overview").json()
    page = dash.client.get("/").text
    dash.sign_in()
    delivery = dash.client.get(f"/runs/{orders.dead_letter}")
    api = dash.client.get(f"/api/runs/{orders.dead_letter}").json()["run"]

    assert empty == {"enabled": True, "count": 0}
    assert overview["dead_letters"] == {"enabled": True, "count": 2}
    assert overview["totals"]["dead_lettered"] == 2
    assert 'id="dead-letter-count" href="/dead-letters" class="bad">2</a>' in page
    assert (api["partition_key"], api["replays"], api["status"]) == ("ada", 0, "dead_lettered")
    text = delivery.text
    assert 'class="status s-dead_lettered"' in text and "<dt>partition key</dt><dd>ada</dd>" in text
    assert "<dt>replays</dt><dd>0</dd>" in text and "<dt>mode</dt><dd>ordered</dd>" in text
    assert f'href="/dead-letters/{orders.dead_letter}"' in text
    # Deliveries are replayed or discarded, never cancelled, retried or rerun from here.
    assert not re.search(r">(Cancel|Retry|Rerun)</button>", text)


def test_a_runtime_without_subscriptions_says_where_failed_runs_are(tmp_path: Path) -> None:
    rl = Runlane(lane=sqlite_lane(str(tmp_path / "plain.db")), queues=[main], tasks=[greet])
    with TestClient(create_app(rl)) as client:
        page = client.get("/dead-letters")
        api = client.get("/api/dead-letters").json()
        subs = client.get("/api/subscriptions").json()
        overview = client.get("/api/overview").json()
        client.portal.call(rl.close)

    assert page.status_code == 200 and 'href="/runs?status=failed"' in page.text
    assert api == {"enabled": False, "dead_letters": [], "next_cursor": None}
    assert subs == {"enabled": False, "subscriptions": []}
    assert overview["dead_letters"] == {"enabled": False, "count": 0}


def test_dead_letters_over_the_api_on_each_storage_driver(
    tmp_path: Path, lane_factory: Callable[[], Lane], environment: str
) -> None:
    with dashboard_under_test(
        tmp_path, lanes=lane_factory, environment=environment, token=TOKEN
    ) as dash:
        orders = _published(dash)
        listed = dash.client.get("/api/dead-letters", params={"key": "ada"}).json()
        subs = dash.client.get("/api/subscriptions").json()["subscriptions"]
        replayed = dash.client.post(
            f"/api/dead-letters/{orders.dead_letter}/replay",
            json={"reason": "fixed upstream"},
            headers=BEARER,
        )
        again = dash.client.post(
            f"/api/dead-letters/{orders.dead_letter}/discard",
            json={"reason": "late"},
            headers=BEARER,
        )
        events = _events(dash, orders.dead_letter)
        left = dash.client.get("/api/dead-letters").json()["dead_letters"]

    assert [d["id"] for d in listed["dead_letters"]] == [orders.dead_letter]
    assert {s["name"]: s["halted_keys"] for s in subs} == {"orders.audit": 0, "orders.ledger": 2}
    assert replayed.status_code == 200 and replayed.json()["run"]["replays"] == 1
    assert again.status_code == 409
    assert events[-1] == (
        "run.replayed",
        {"reason": "fixed upstream", "actor": "dashboard", "replays": 1},
    )
    assert [d["id"] for d in left] == [orders.xss_dead_letter]


def test_hide_payloads_hides_dead_letter_payloads_in_html_and_json(tmp_path: Path) -> None:
    with dashboard_under_test(tmp_path, hide_payloads=True) as dash:
        orders = _published(dash)
        listed = dash.client.get("/api/dead-letters").json()["dead_letters"]
        detail = dash.client.get(f"/api/dead-letters/{orders.dead_letter}").json()
        pages = [dash.client.get("/dead-letters").text]
        pages.append(dash.client.get(f"/dead-letters/{orders.dead_letter}").text)

    assert [d["message"]["payload"] for d in listed] == ["(hidden)", "(hidden)"]
    assert detail["dead_letter"]["message"]["payload"] == "(hidden)"
    assert all("-500" not in page and "(hidden)" in page for page in pages)


def test_the_runs_filter_offers_subscriptions_beside_tasks(read_only: DashboardUnderTest) -> None:
    _published(read_only)
    page = read_only.client.get(
        "/runs", params={"task": "orders.ledger", "status": "dead_lettered"}
    )

    assert '<option value="orders.ledger" selected>' in page.text
    assert '<option value="orders.audit">' in page.text
    assert len(re.findall(r'href="/runs/[^"/?]+"', page.text)) == 2
