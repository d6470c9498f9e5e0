"""Actions on the dashboard: only an operator with the token acts, and a refusal changes nothing."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.dashboard_client import TOKEN, DashboardUnderTest, dashboard_under_test

from runlane import Run, Runlane, RunSourceType, RunStatus
from runlane.dashboard.auth import SESSION_COOKIE, OperatorAuth

BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path, token=TOKEN) as under_test:
        yield under_test


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[DashboardUnderTest]:
    with dashboard_under_test(tmp_path) as under_test:
        yield under_test


def _form_posts(dash: DashboardUnderTest) -> list[str]:
    seeded = dash.seeded
    return [
        f"/runs/{seeded.failed_charge}/retry",
        f"/runs/{seeded.greetings[0]}/rerun",
        f"/runs/{seeded.reports[0]}/cancel",
        "/schedules/reports.nightly/pause",
        "/queues/reports/pause",
    ]


def _api_posts(dash: DashboardUnderTest) -> list[str]:
    return [f"/api{path}" for path in _form_posts(dash)]


def _paused(dash: DashboardUnderTest) -> bool:
    async def paused(rl: Runlane) -> bool:
        (schedule,) = await rl.schedules.list()
        return schedule.paused

    return dash.read(paused)


def test_a_read_only_dashboard_renders_no_buttons_and_refuses_every_action(
    read_only: DashboardUnderTest,
) -> None:
    before = read_only.state()
    failed_page = read_only.client.get(f"/runs/{read_only.seeded.failed_charge}").text

    form_answers = [
        read_only.client.post(p, data={"csrf_token": "x"}) for p in _form_posts(read_only)
    ]
    api_answers = [read_only.client.post(p, headers=BEARER) for p in _api_posts(read_only)]
    login = read_only.client.post("/login", data={"token": TOKEN})

    assert "Retry" not in failed_page and "Sign in to act" not in failed_page
    assert [a.status_code for a in form_answers + api_answers] == [403] * 10
    assert api_answers[0].json()["error"]["code"] == "forbidden"
    assert login.status_code == 403 and SESSION_COOKIE not in login.cookies
    assert read_only.state() == before and not _paused(read_only)
    assert _paused_queues(read_only) == []


def test_signed_out_visitors_see_a_sign_in_link_and_their_posts_are_401(
    dash: DashboardUnderTest,
) -> None:
    before = dash.state()
    page = dash.client.get(f"/runs/{dash.seeded.failed_charge}").text

    answers = [dash.client.post(p, data={"csrf_token": "x"}) for p in _form_posts(dash)]

    assert "Sign in to act" in page and ">Retry<" not in page
    assert [a.status_code for a in answers] == [401] * 5
    assert dash.state() == before and not _paused(dash) and _paused_queues(dash) == []


def test_the_api_needs_the_bearer_token_and_ignores_cookies(dash: DashboardUnderTest) -> None:
    dash.sign_in()  # a browser session must not authorise /api
    before = dash.state()

    missing = [dash.client.post(p) for p in _api_posts(dash)]
    wrong = [
        dash.client.post(p, headers={"Authorization": "Bearer not-the-token"})
        for p in _api_posts(dash)
    ]
    basic = dash.client.post(_api_posts(dash)[0], headers={"Authorization": f"Basic {TOKEN}"})

    for answer in [*missing, *wrong, basic]:
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == "unauthorized"
    assert dash.state() == before and not _paused(dash)


def test_signing_in_sets_a_signed_httponly_strict_cookie_that_is_not_the_token(
    dash: DashboardUnderTest,
) -> None:
    wrong = dash.client.post("/login", data={"token": "guess"}, follow_redirects=False)
    right = dash.client.post("/login", data={"token": TOKEN}, follow_redirects=False)

    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert right.status_code == 303 and right.headers["location"] == "/"
    cookie = right.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    assert ">Sign out<" in dash.client.get("/").text


def test_a_form_with_a_wrong_or_missing_csrf_token_is_refused(dash: DashboardUnderTest) -> None:
    dash.sign_in()
    before = dash.state()
    other_session = OperatorAuth(TOKEN).new_session()
    from runlane.dashboard.csrf import csrf_token

    for data in (
        {},
        {"csrf_token": "forged"},
        {"csrf_token": csrf_token(OperatorAuth(TOKEN), other_session)},
    ):
        answers = [dash.client.post(p, data=data) for p in _form_posts(dash)]
        assert [a.status_code for a in answers] == [403] * 5
    assert dash.state() == before and not _paused(dash)


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_a_cross_origin_form_is_refused_even_with_a_valid_csrf_token(
    dash: DashboardUnderTest, headers: dict[str, str]
) -> None:
    dash.sign_in()
    csrf = dash.csrf_token()
    before = dash.state()

    answer = dash.client.post(_form_posts(dash)[0], data={"csrf_token": csrf}, headers=headers)
    login = dash.client.post("/login", data={"token": TOKEN}, headers=headers)

    assert answer.status_code == 403 and login.status_code == 403
    assert dash.state() == before


def test_a_tampered_or_expired_session_cookie_is_not_a_session() -> None:
    auth = OperatorAuth(TOKEN)
    session = auth.new_session(now=1_000_000)
    issued, nonce, signature = session.split(".")

    class FakeRequest:
        def __init__(self, value: str) -> None:
            self.cookies = {SESSION_COOKIE: value}

    def valid(value: str, now: float) -> bool:
        return auth.session_of(FakeRequest(value), now=now) is not None  # type: ignore[arg-type]

    assert valid(session, now=1_000_060)
    assert not valid(session, now=1_000_000 + 12 * 3600)
    assert not valid(f"{int(issued) + 1}.{nonce}.{signature}", now=1_000_060)
    assert not valid(f"{issued}.{nonce}.{'0' * len(signature)}", now=1_000_060)
    assert not OperatorAuth("another-token").session_of(FakeRequest(session), now=1_000_060)  # type: ignore[arg-type]


def test_a_signed_in_operator_retries_a_failed_run_as_a_linked_run(
    dash: DashboardUnderTest,
) -> None:
    dash.sign_in()
    failed = dash.seeded.failed_charge
    csrf = dash.csrf_token(f"/runs/{failed}")

    answer = dash.client.post(
        f"/runs/{failed}/retry", data={"csrf_token": csrf}, follow_redirects=False
    )

    assert answer.status_code == 303
    new_id = answer.headers["location"].removeprefix("/runs/")
    child = next(run for run in dash.runs() if run.id == new_id)
    assert child.source.type is RunSourceType.MANUAL_RETRY and child.source.run_id == failed
    assert child.status is RunStatus.QUEUED
    page = dash.client.get(answer.headers["location"]).text
    assert f'href="/runs/{failed}"' in page


def test_cancel_rerun_pause_and_resume_from_the_browser(dash: DashboardUnderTest) -> None:
    dash.sign_in()
    csrf = dash.csrf_token()
    seeded = dash.seeded

    cancel = dash.client.post(
        f"/runs/{seeded.reports[0]}/cancel",
        data={"csrf_token": csrf, "reason": "not this month"},
        follow_redirects=False,
    )
    rerun = dash.client.post(
        f"/runs/{seeded.greetings[0]}/rerun", data={"csrf_token": csrf}, follow_redirects=False
    )
    pause = dash.client.post(
        "/schedules/reports.nightly/pause", data={"csrf_token": csrf}, follow_redirects=False
    )
    paused_page = dash.client.get("/schedules").text
    paused_now = _paused(dash)
    resume = dash.client.post(
        "/schedules/reports.nightly/resume", data={"csrf_token": csrf}, follow_redirects=False
    )

    runs = {run.id: run for run in dash.runs()}
    assert cancel.status_code == 303 and cancel.headers["location"] == f"/runs/{seeded.reports[0]}"
    assert runs[seeded.reports[0]].status is RunStatus.CANCELLED
    assert runs[seeded.reports[0]].cancel_reason == "not this month"
    rerun_id = rerun.headers["location"].removeprefix("/runs/")
    assert runs[rerun_id].source.type is RunSourceType.RERUN
    assert pause.status_code == resume.status_code == 303
    assert pause.headers["location"] == "/schedules"
    assert paused_now and ">Resume<" in paused_page and not _paused(dash)


def _paused_queues(dash: DashboardUnderTest) -> list[str]:
    async def paused(rl: Runlane) -> list[str]:
        return [q.name for q in await rl.queues.list() if q.paused]

    return dash.read(paused)


def test_a_queue_is_paused_and_resumed_from_the_overview_and_the_api(
    dash: DashboardUnderTest,
) -> None:
    dash.sign_in()
    csrf = dash.csrf_token()
    overview = dash.client.get("/").text

    pause = dash.client.post(
        "/queues/reports/pause",
        data={"csrf_token": csrf, "reason": "partner down"},
        follow_redirects=False,
    )
    paused_page = dash.client.get("/").text
    queue_page = dash.client.get("/queues/reports").text
    paused_json = dash.client.get("/api/overview").json()
    paused_now = _paused_queues(dash)
    resume = dash.client.post(
        "/queues/reports/resume", data={"csrf_token": csrf}, follow_redirects=False
    )
    resumed_now = _paused_queues(dash)
    api_pause = dash.client.post(
        "/api/queues/main/pause", headers=BEARER, json={"reason": "scripted"}
    )
    unknown = dash.client.post("/api/queues/nope/pause", headers=BEARER)
    bad_action = dash.client.post("/api/queues/main/explode", headers=BEARER)

    assert ">Pause<" in overview and "paused" not in overview
    assert pause.status_code == resume.status_code == 303
    assert pause.headers["location"] == "/queues/reports"
    assert paused_now == ["reports"] and resumed_now == []
    assert ">Resume<" in paused_page and 'title="partner down">paused<' in paused_page
    assert ">Resume<" in queue_page and "partner down" in queue_page
    reports = next(q for q in paused_json["queues"] if q["queue"] == "reports")
    assert (reports["paused"], reports["paused_reason"]) == (True, "partner down")
    assert api_pause.status_code == 200
    assert api_pause.json()["queue"]["paused"] is True
    assert api_pause.json()["queue"]["paused_reason"] == "scripted"
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "queue_not_found"
    assert bad_action.status_code == 400
    assert _paused_queues(dash) == ["main"]


def test_an_action_the_run_state_forbids_shows_the_operator_message_with_409(
    dash: DashboardUnderTest,
) -> None:
    dash.sign_in()
    succeeded = dash.seeded.greetings[0]
    before = dash.state()

    page = dash.client.post(f"/runs/{succeeded}/retry", data={"csrf_token": dash.csrf_token()})
    api = dash.client.post(f"/api/runs/{succeeded}/retry", headers=BEARER)

    assert page.status_code == 409 and "only failed runs can be retried" in page.text
    assert api.status_code == 409 and api.json()["error"]["code"] == "invalid_state"
    assert dash.state() == before


def test_the_bearer_api_acts_and_answers_with_the_view(dash: DashboardUnderTest) -> None:
    seeded = dash.seeded

    retried = dash.client.post(f"/api/runs/{seeded.failed_import}/retry", headers=BEARER)
    cancelled = dash.client.post(
        f"/api/runs/{seeded.reports[1]}/cancel", headers=BEARER, json={"reason": "scripted"}
    )
    paused = dash.client.post("/api/schedules/reports.nightly/pause", headers=BEARER)
    missing = dash.client.post("/api/runs/nope/rerun", headers=BEARER)
    bad_body = dash.client.post(
        f"/api/runs/{seeded.reports[0]}/cancel", headers=BEARER, json=["no"]
    )
    unknown = dash.client.post(f"/api/runs/{seeded.reports[0]}/explode", headers=BEARER)

    assert retried.status_code == 200
    assert retried.json()["run"]["source"] == {
        "type": "manual_retry",
        "run_id": seeded.failed_import,
    }
    assert cancelled.json()["run"]["status"] == "cancelled"
    assert cancelled.json()["run"]["cancel_reason"] == "scripted"
    assert paused.json()["schedule"]["paused"] is True
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "run_not_found"
    assert bad_body.status_code == 400 and unknown.status_code == 400
    assert {r.id: r for r in dash.runs()}[seeded.reports[0]].status is RunStatus.QUEUED


def test_the_token_never_appears_in_a_response_or_a_log_line(
    dash: DashboardUnderTest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    seeded = dash.seeded
    responses = [
        dash.client.post("/login", data={"token": "wrong"}),
        dash.client.post("/login", data={"token": TOKEN}, follow_redirects=False),
    ]
    csrf = dash.csrf_token()
    for path in ("/", "/runs", f"/runs/{seeded.failed_charge}", "/schedules", "/login"):
        responses.append(dash.client.get(path))
    responses += [
        dash.client.post(f"/runs/{seeded.failed_charge}/retry", data={"csrf_token": csrf}),
        dash.client.post(f"/api/runs/{seeded.failed_import}/retry", headers=BEARER),
        dash.client.post("/api/runs/nope/retry", headers=BEARER),
        dash.client.get("/api/overview", headers=BEARER),
        dash.client.get("/metrics"),
    ]

    for response in responses:
        assert TOKEN not in response.text
        assert all(TOKEN not in value for value in response.headers.values())
        assert TOKEN not in str(response.url)
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(OperatorAuth(TOKEN))


def _linked_children(runs: list[Run], parent: str) -> list[Run]:
    return [run for run in runs if run.source.run_id == parent]


def test_retrying_twice_makes_two_linked_runs_and_leaves_the_parent_failed(
    dash: DashboardUnderTest,
) -> None:
    failed = dash.seeded.failed_charge
    for _ in range(2):
        assert dash.client.post(f"/api/runs/{failed}/retry", headers=BEARER).status_code == 200

    runs = dash.runs()
    assert len(_linked_children(runs, failed)) == 2
    assert next(r for r in runs if r.id == failed).status is RunStatus.FAILED


def test_under_a_root_path_the_session_cookie_is_scoped_to_the_prefix(tmp_path: Path) -> None:
    with dashboard_under_test(tmp_path, token=TOKEN, root_path="/ops") as dash:
        signed_in = dash.client.post("/ops/login", data={"token": TOKEN}, follow_redirects=False)
        csrf = dash.csrf_token("/ops/")
        failed = dash.seeded.failed_charge
        retried = dash.client.post(
            f"/ops/runs/{failed}/retry", data={"csrf_token": csrf}, follow_redirects=False
        )

    assert signed_in.headers["location"] == "/ops/"
    assert "Path=/ops/" in signed_in.headers["set-cookie"]
    assert retried.status_code == 303 and retried.headers["location"].startswith("/ops/runs/")
