"""A learner is a token kept in the browser (a cookie, or a ?me= link), not a connection: a new session with the
same token (a reload, a second tab) finds the learner's runs and experiments, a run that was training goes on and
is drawn, and another learner sees none of it. The cookie itself is checked in a real browser (test_browser)."""

import secrets
import time

import pytest

from app_driver import app_test_on
from ui.session import KEY, TOKEN, _learners

TIMEOUT = 300


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))


def open_as(token: str | None, page: str = "grpo", **params):
    """The app in a new browser session of the learner `token` (None: a new learner), on `page`."""
    return app_test_on(page, learner=token, **params)


def test_a_me_link_is_adopted_only_when_the_server_issued_it():
    issued = open_as(None, "overview").session_state[KEY]
    assert TOKEN.fullmatch(issued) and open_as(None, "overview", me=issued).session_state[KEY] == issued
    invented = secrets.token_urlsafe(18)  # looks like a token, but no one was given it: no fresh share
    for bad in (invented, "short", "x" * 65, "<script>alert(1)</script>-padding-padding"):
        adopted = open_as(None, "overview", me=bad).session_state[KEY]
        assert adopted not in (bad, issued) and TOKEN.fullmatch(adopted), "ignored: a fresh token instead"
    assert open_as(None, "overview").session_state[KEY] != open_as(None, "overview").session_state[KEY]


def test_new_learners_from_one_address_past_the_hours_limit_may_read_but_not_train(monkeypatch):
    monkeypatch.setenv("RLHF_LAB_NEW_LEARNERS_PER_ADDRESS", "2")
    first, second = open_as(None), open_as(None)  # every session here comes from one address: this machine
    third = open_as(None)
    for at in (first, second):
        assert not at.button(key="grpo:train").disabled
    assert third.button(key="grpo:train").disabled
    assert any(
        "this address has started 2 new learners in the last hour; allowed: at most 2 an hour per address" in w.value
        for w in third.warning
    ), [w.value for w in third.warning]
    again = open_as(None, me=first.session_state[KEY])  # an issued identity is not a new learner
    assert not again.button(key="grpo:train").disabled


def test_thirty_learners_behind_one_address_each_get_an_identity_by_default(tmp_path):
    from rl_core.runs.limits import HOUR, ServerLimits
    from rl_core.runs.store import RunStore

    store, per_address = RunStore(tmp_path / "class.sqlite"), ServerLimits().new_learners_per_address
    since = time.time() - HOUR
    assert all(store.issue_identity(f"learner-{n:02d}-padding", "203.0.113.7", per_address, since) for n in range(30))
    assert store.issue_identity("someone-elsewhere-1", "198.51.100.1", per_address, since)
    for n in range(30, per_address):
        store.issue_identity(f"learner-{n:02d}-padding", "203.0.113.7", per_address, since)
    assert not store.issue_identity("one-too-many-padding", "203.0.113.7", per_address, since)
    assert store.issued("learner-00-padding") and not store.issued("one-too-many-padding")


def test_with_a_class_code_only_a_learner_who_opened_the_join_link_trains(monkeypatch):
    monkeypatch.setenv("RLHF_LAB_CLASS_CODE", "maple-42")
    outsider = open_as(None)
    assert outsider.button(key="grpo:train").disabled
    assert any("training on this server needs the class's join link" in w.value for w in outsider.warning)
    assert outsider.select_slider(key="grpo:steps") is not None, "the page itself stays open"
    assert open_as(None, "grpo", **{"class": "wrong"}).button(key="grpo:train").disabled
    joined = open_as(None, "grpo", **{"class": "maple-42"})
    assert not joined.button(key="grpo:train").disabled
    later = open_as(None, me=joined.session_state[KEY])  # the same learner later, without the link
    assert not later.button(key="grpo:train").disabled


def test_the_overview_gives_the_link_that_opens_the_same_runs_elsewhere():
    token = secrets.token_urlsafe(18)
    at = open_as(token, "overview")
    assert any(code.value.endswith(f"?me={token}") for code in at.code)


def test_a_me_link_on_a_lab_page_is_not_read_as_a_setting():
    at = open_as(None, "overview")
    at.switch_page("app_pages/grpo.py")
    at.query_params["me"] = secrets.token_urlsafe(18)
    at.run()
    assert not at.warning, [w.value for w in at.warning]


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 120)
def test_a_reload_finds_the_run_still_training_and_another_learner_sees_none_of_it():
    token = secrets.token_urlsafe(18)
    first = open_as(token)
    first.select_slider(key="grpo:steps").set_value(3).run()
    first.select_slider(key="grpo:sft_steps").set_value(50).run()
    first.button(key="grpo:train").click().run()
    job = first.session_state["grpo:runs"][-1]
    try:
        again = open_as(token)  # a reload: a new session of the same learner, while the run trains
        assert again.session_state["grpo:runs"] == [job], "the page reattaches to the run"
        deadline = time.monotonic() + TIMEOUT
        while job.active:
            assert time.monotonic() < deadline
            time.sleep(1)
        assert job.snapshot().status == "finished", "the reload did not stop it"
        again.run()
        assert again.get("plotly_chart"), "its charts are drawn in the new session"
        again.button(key="grpo:train").click().run()
        assert [j.number for j in again.session_state["grpo:runs"]] == [1, 2], "numbering goes on"
        other = open_as(None)
        assert other.session_state["grpo:runs"] == [] and not other.get("plotly_chart")
    finally:
        for j in list(first.session_state["grpo:runs"]) + list(again.session_state["grpo:runs"]):
            j.stop()
            j.join(30)


class FinishedRun:
    """A stand-in for a finished run: Reset stops and forgets it before the page draws it again."""

    active, number, stopped = False, 1, False

    def stop(self):
        self.stopped = True


def test_reset_forgets_the_runs_for_every_session_of_the_learner():
    token = secrets.token_urlsafe(18)
    first = open_as(token)
    run = FinishedRun()
    first.session_state["grpo:runs"].append(run)
    assert _learners()[token]["grpo:runs"] == [run], "kept for the learner's next session"
    first.button(key="grpo:reset").click().run()
    assert run.stopped and _learners()[token]["grpo:runs"] == []
    assert open_as(token).session_state["grpo:runs"] == []


def test_x_forwarded_for_names_the_learner_only_behind_a_proxy_the_instructor_trusts(monkeypatch):
    from types import SimpleNamespace

    import ui.session

    # The connection comes from the proxy; the proxy appended the learner's address to what the client sent.
    context = SimpleNamespace(headers={"X-Forwarded-For": "6.6.6.6, 203.0.113.9"}, ip_address="10.0.0.2")
    monkeypatch.setattr(ui.session, "st", SimpleNamespace(context=context))
    assert ui.session.client_address() == "10.0.0.2", "a header anyone can write is ignored"
    monkeypatch.setenv("RLHF_LAB_TRUSTED_PROXY", "1")
    assert ui.session.client_address() == "203.0.113.9", "the address the trusted proxy wrote, not the client's own"
