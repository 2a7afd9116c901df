"""Teaching a class: the instructor's page (only with RLHF_LAB_INSTRUCTOR_TOKEN, only opened with it), the class's
answers aggregated from several learners' sessions, the banner pinned on every learner's page, the presenter
switch, and a learner's page runs read back from the run store after a server restart."""

import json
import secrets
import sqlite3
import time

import pytest
from streamlit.testing.v1 import AppTest

from app_driver import app_test_on
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.runs.store import MIGRATIONS, RunStore
from ui.instructor import TOKEN_ENV, banner_link, banner_text, learner_names
from ui.jobs import Job, LiveLoop, TrainingSlots
from ui.session import _learners

TOKEN = "instructor-token-for-tests"
QUESTION = "Will token entropy end higher or lower than it starts?"  # the GRPO page's


@pytest.fixture(autouse=True)
def store_path(tmp_path, monkeypatch):
    path = tmp_path / "runs.sqlite"
    monkeypatch.setenv("RLHF_LAB_DB", str(path))
    return path


def open_app(page: str, token: str | None = None, **params):
    """The app in a new browser session (of learner `token`, else a new one) with these query parameters."""
    return app_test_on(page, learner=token, **params)


def chart_specs(at: AppTest) -> list[dict]:
    return [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]


def html_bodies(at: AppTest) -> str:
    return "\n".join(element.proto.body for element in at.get("html"))


# ---------------------------------------------------------------------------------------------- the store
def test_answers_count_each_learners_latest_answer_of_each_phase(store_path):
    store = RunStore(store_path)
    options = ("higher", "lower")
    for session, before in (("a", "higher"), ("b", "lower"), ("c", "higher")):
        store.answer(session, "grpo", "before", QUESTION, options, before)
    store.answer("c", "grpo", "before", QUESTION, options, "lower")  # c changed their mind: b and c say lower
    store.answer("a", "grpo", "after", QUESTION, options, "lower")
    store.answer("b", "ppo", "before", "Another question?", ("yes", "no"), "no")
    counts = {count.page: count for count in store.answer_counts()}
    assert counts["grpo"].question == QUESTION and counts["grpo"].options == options
    assert counts["grpo"].counts == {"before": {"higher": 1, "lower": 2}, "after": {"lower": 1}}
    assert counts["ppo"].counts == {"before": {"no": 1}, "after": {}}
    with pytest.raises(ValueError, match="phase='during'.*allowed: before, after"):
        store.answer("a", "grpo", "during", QUESTION, options, "higher")


def test_active_learners_are_those_seen_since_the_time_asked(store_path):
    store = RunStore(store_path)
    now = time.time()
    store.seen("old", now - 700)
    store.seen("recent", now - 10)
    store.seen("now", now)
    store.seen("old", now - 650)  # seen again, still long ago
    assert store.active_learners(now - 600) == 2
    assert store.active_learners(now - 800) == 3


def test_one_banner_is_pinned_at_a_time_until_unpinned(store_path):
    store = RunStore(store_path)
    assert store.pinned() is None
    store.pin("Now open: GRPO", "/grpo")
    store.pin("Now open: DAPO, ε_high 0.28", "/grpo?algo=dapo&epsilon_high=0.28")
    assert store.pinned() == ("Now open: DAPO, ε_high 0.28", "/grpo?algo=dapo&epsilon_high=0.28")
    store.unpin()
    assert store.pinned() is None


def test_a_v3_store_is_migrated_and_its_runs_belong_to_no_page(store_path):
    with sqlite3.connect(store_path) as db:
        for migration in MIGRATIONS[:3]:
            for statement in migration:
                db.execute(statement)
        db.execute(
            "INSERT INTO runs (label, task, algo, seed, variant, config, status, steps_total, created_at, "
            "heartbeat_at, owner_pid, owner_host, session) VALUES ('old', 'caesar', 'grpo', 0, '{}', '{}', "
            "'finished', 3, 0, 0, 1, 'elsewhere', 'learner')"
        )
        db.execute("PRAGMA user_version = 3")
    store = RunStore(store_path)
    (run,) = store.runs()
    assert run.label == "old" and run.page is None and run.page_run is None
    assert store.runs(page="grpo") == []


def test_a_v5_store_moves_the_policy_gradient_labs_runs_and_answers_to_its_page(store_path):
    """Before v6 the Policy Gradient lab kept its runs and answers under `pg`: after the migration they are the
    `policy_gradient` page's, the old runs keep their numbers and runs already made under the new name move past
    them (learner a: pg #1, #2 and policy_gradient #1 → #1, #2, #3), and a learner who answered under both names
    keeps the answer under the new one."""
    with sqlite3.connect(store_path) as db:
        for migration in MIGRATIONS[:5]:
            for statement in migration:
                db.execute(statement)
        for label, session, page, number in (
            ("a-old-1", "a", "pg", 1),
            ("a-old-2", "a", "pg", 2),
            ("a-new-1", "a", "policy_gradient", 1),
            ("b-old-1", "b", "pg", 1),
            ("a-grpo-1", "a", "grpo", 1),
        ):
            db.execute(
                "INSERT INTO runs (label, task, algo, seed, variant, config, status, steps_total, created_at, "
                "heartbeat_at, owner_pid, owner_host, session, page, page_run) VALUES (?, 'caesar', 'pg', 0, "
                "'{}', '{}', 'finished', 3, 0, 0, 1, 'elsewhere', ?, ?, ?)",
                (label, session, page, number),
            )
        for session, page, phase, answer in (
            ("a", "pg", "before", "about 0"),
            ("a", "policy_gradient", "before", "clearly positive"),
            ("b", "pg", "after", "about 0"),
        ):
            db.execute(
                "INSERT INTO predictions VALUES (?, ?, ?, 'Will it average 0?', '[\"about 0\", \"clearly "
                "positive\"]', ?, 0)",
                (session, page, phase, answer),
            )
        db.execute("PRAGMA user_version = 5")
    store = RunStore(store_path)
    assert [(r.label, r.page_run) for r in store.runs(page="policy_gradient")] == [
        ("a-old-1", 1),
        ("a-old-2", 2),
        ("a-new-1", 3),
        ("b-old-1", 1),
    ]
    assert store.runs(page="pg") == []
    assert [(r.label, r.page_run) for r in store.runs(page="grpo")] == [("a-grpo-1", 1)]
    (count,) = store.answer_counts()
    assert count.page == "policy_gradient"
    assert count.counts == {"before": {"clearly positive": 1}, "after": {"about 0": 1}}


def stored_page_run(
    store: RunStore, session: str, number: int, steps: int = 3, samples: bool = False, page: str = "grpo"
) -> int:
    """A finished run of the GRPO page (or `page`), as a live lab writes it (with a stand-in sample at each step if
    `samples`)."""
    run = RunConfig(algo=get_preset("grpo", beta=0.01 * number), task="caesar", steps=steps, seed=number)
    settings = {"variant": "GRPO", "beta": 0.01 * number, "seed": number}
    run_id = store.add_run(run, f"GRPO · {page} page #{number}", settings, session=session, page=page, page_run=number)
    store.start_run(run_id)
    for step in range(1, steps + 1):
        store.add_step(
            run_id,
            {
                "step": step,
                "entropy": 1.0 - 0.1 * step,
                "success_rate": 0.2 * step,
                "samples": [{"text": f"step {step}"}] if samples else [],
            },
        )
    store.finish_run(run_id, "finished")
    return run_id


def test_a_job_rebuilt_from_the_store_shows_the_run_as_it_ended(store_path):
    store = RunStore(store_path)
    run_id = stored_page_run(store, "learner", 2, samples=True)
    job = Job.from_store(store.run(run_id), store, LiveLoop(1))
    snap = job.snapshot()
    assert (job.number, job.page, job.session, snap.status) == (2, "grpo", "learner", "finished")
    assert job.settings == {"variant": "GRPO", "beta": 0.02, "seed": 2}
    assert job.run.algo.beta == 0.02 and job.run.seed == 2
    assert [r["step"] for r in snap.records] == [1, 2, 3] and snap.records[-1]["entropy"] == pytest.approx(0.7)
    assert snap.samples == {3: [{"text": "step 3"}]}
    assert not job.active and job.join(0)


# ---------------------------------------------------------------------------------------------- a server restart
def test_after_a_restart_a_learner_finds_their_page_runs_and_reset_lets_them_go(store_path):
    token, other = secrets.token_urlsafe(18), secrets.token_urlsafe(18)
    store = RunStore(store_path)
    for number in (1, 2):
        stored_page_run(store, token, number)
    stored_page_run(store, other, 1)
    _learners().clear()  # what a restarted server holds: no learner's live objects
    at = open_app("grpo", token)
    assert [(job.number, job.snapshot().status) for job in at.session_state["grpo:runs"]] == [
        (1, "finished"),
        (2, "finished"),
    ]
    assert at.get("plotly_chart"), "their charts are drawn again"
    assert any("#2" in str(label) for label in at.button_group[0].proto.options), "labelled as before"
    assert open_app("grpo", secrets.token_urlsafe(18)).session_state["grpo:runs"] == [], "another learner: none"
    at.button(key="grpo:reset").click().run()
    _learners().clear()
    assert open_app("grpo", token).session_state["grpo:runs"] == [], "Reset holds after a restart"
    assert len(store.runs(visible_to=token)) == 2, "the runs stay in the store"


# ---------------------------------------------------------------------------------------------- the instructor's page
def test_without_the_token_set_there_is_no_instructor_page(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    at = open_app("overview", instructor=TOKEN)
    with pytest.raises(ValueError, match="Could not find a navigation page"):
        at.switch_page("app_pages/instructor.py")


@pytest.mark.parametrize("given", [None, "wrong-token", TOKEN[:-1]])
def test_the_instructor_page_refuses_without_the_right_token(monkeypatch, given):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    at = open_app("instructor", **({} if given is None else {"instructor": given}))
    (error,) = at.error
    assert "open it with the instructor's link" in error.value
    assert ("wrong" in error.value) == (given is not None)
    assert not at.metric and not at.get("plotly_chart") and not at.button


def test_the_instructor_sees_three_learners_and_their_answers_aggregated(monkeypatch, store_path):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    learners = [secrets.token_urlsafe(18) for _ in range(3)]
    for token, answer in zip(learners, ("higher", "lower", "lower")):
        open_app("grpo", token).radio(key="grpo:prediction").set_value(answer).run()
    # What their runs showed, as the page records it once a run has ended (the dashboard's reveal).
    RunStore(store_path).answer(learners[0], "grpo", "after", QUESTION, ("higher", "lower"), "lower")
    at = open_app("instructor", instructor=TOKEN)
    assert not at.error
    assert at.metric[0].value == "3", "the three learners, not the instructor"
    (answers,) = [spec for spec in chart_specs(at) if QUESTION in spec["layout"]["title"]["text"]]
    assert answers["layout"]["title"]["text"] == f"<b>GRPO · DAPO · Dr. GRPO</b><br>{QUESTION}", "the page's title"
    bars = {trace["name"].split(" ")[0]: dict(zip(trace["x"], trace["y"])) for trace in answers["data"]}
    assert bars == {"before": {"higher": 1, "lower": 2}, "after": {"higher": 0, "lower": 1}}


def test_the_class_runs_are_overlaid_anonymised_unless_ids_are_asked_for(monkeypatch, store_path):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    store = RunStore(store_path)
    learners = ["zeta" + "x" * 16, "alpha" + "y" * 16]
    stored_page_run(store, learners[0], 1)
    stored_page_run(store, learners[1], 1)
    stored_page_run(store, learners[0], 2)
    at = open_app("instructor", instructor=TOKEN)
    names = [trace["name"] for trace in chart_specs(at)[-1]["data"] if trace.get("name")]
    assert names == ["learner 1 · #1", "learner 2 · #1", "learner 1 · #2"]
    assert not any(token[:4] in json.dumps(chart_specs(at)) for token in learners), "no token in the page"
    at.toggle(key="instructor:show_ids").set_value(True).run()
    names = [trace["name"] for trace in chart_specs(at)[-1]["data"] if trace.get("name")]
    assert names == ["zetaxx · #1", "alphay · #1", "zetaxx · #2"]
    assert learner_names(["b", "a", "b"], False) == {"b": "learner 1", "a": "learner 2"}


def test_the_class_runs_name_pages_by_their_titles_and_count_runs_and_learners(monkeypatch, store_path):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    store = RunStore(store_path)
    learner = "beta" + "z" * 16
    stored_page_run(store, learner, 1)
    stored_page_run(store, learner, 2)
    stored_page_run(store, learner, 1, page="policy_gradient")  # the page's runs are stored under its file's name
    at = open_app("instructor", instructor=TOKEN)
    picker = at.selectbox(key="instructor:runs_page")
    assert picker.options == ["Policy Gradient", "GRPO · DAPO · Dr. GRPO"], "titles, in the navigation's order"
    assert chart_specs(at)[-1]["layout"]["title"]["text"].endswith(": 1 run of 1 learner")
    picker.set_value("grpo").run()
    assert chart_specs(at)[-1]["layout"]["title"]["text"].endswith(": 2 runs of 1 learner")


def test_a_pinned_banner_shows_on_every_learner_page_until_unpinned(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    instructor = open_app("instructor", instructor=TOKEN)
    instructor.text_input[0].set_value("algo=dapo&epsilon_high=0.28")
    next(button for button in instructor.button if button.label == "Pin").click().run()
    assert not instructor.error, [e.value for e in instructor.error]
    for page in ("grpo", "overview", "labs_kl"):
        shown = html_bodies(open_app(page))
        assert 'href="/grpo?algo=dapo&amp;epsilon_high=0.28"' in shown and "Now open: DAPO, ε_high 0.28" in shown
    instructor.button(key="instructor:unpin").click().run()
    assert "Now open" not in html_bodies(open_app("grpo"))


def test_a_banner_link_is_checked_like_a_share_link():
    assert banner_link("grpo", "algo=dapo&epsilon_high=0.28") == (
        "/grpo?algo=dapo&epsilon_high=0.28",
        {"algo": "dapo", "epsilon_high": 0.28},
    )
    assert banner_link("ppo", "") == ("/ppo", {})
    assert banner_text("grpo", {"algo": "grpo", "beta": 0.0}) == "Now open: GRPO, KL coefficient β 0"
    for page, settings, refused in (
        ("nowhere", "", "page='nowhere' is not a page"),
        ("grpo", "algo=nope", "algo='nope' is not a preset"),
        ("grpo", "epsilon_high=abc", "epsilon_high='abc' is not a number"),
        ("grpo", "colour=red", "colour is not a knob"),
    ):
        with pytest.raises(ValueError, match=refused):
            banner_link(page, settings)


# ---------------------------------------------------------------------------------------------- presenter switch
def test_the_presenter_switch_enlarges_text_and_charts_and_stays_in_the_url(store_path):
    from ui.present import CHART_SCALE, FONT_PX

    token = secrets.token_urlsafe(18)
    stored_page_run(RunStore(store_path), token, 1)
    _learners().clear()
    normal = open_app("grpo", token)
    at = open_app("grpo", token, present="1")
    assert f"html{{font-size:{FONT_PX}px}}" in html_bodies(at)
    assert at.query_params["present"] == "1"
    heights = [
        (spec["layout"]["height"], big["layout"]["height"]) for spec, big in zip(chart_specs(normal), chart_specs(at))
    ]
    assert heights and all(big == round(small * CHART_SCALE) for small, big in heights)
    at.switch_page("app_pages/ppo.py").run()
    assert "present" in at.query_params, "kept across a page switch"
    assert f"html{{font-size:{FONT_PX}px}}" in html_bodies(at)
    at.query_params["present"] = "0"
    at.run()
    assert f"html{{font-size:{FONT_PX}px}}" not in html_bodies(at) and "present" not in at.query_params


# ---------------------------------------------------------------------------------------------- warm-up
def test_the_warm_up_runs_experiments_in_turn_and_stop_ends_it_while_it_waits():
    import threading

    from rl_core.experiments import EXPERIMENTS
    from ui.experiment_jobs import WarmUp

    first, second = list(EXPERIMENTS.values())[:2]
    slots = TrainingSlots(1)
    with slots.hold(threading.Event()):  # another training holds the only slot: the first experiment waits
        warm_up = WarmUp([first, second], slots, workers=1).start()
        deadline = time.monotonic() + 60
        while warm_up.snapshot().current_status != "queued":
            assert time.monotonic() < deadline, warm_up.snapshot()
            time.sleep(0.05)
        snap = warm_up.snapshot()
        assert (snap.current, snap.done, snap.total, snap.active) == (first.name, {}, 2, True)
        warm_up.stop()
        assert warm_up.join(30)
    snap = warm_up.snapshot()
    assert (snap.status, snap.done, snap.current) == ("stopped", {first.name: "stopped"}, None), (
        "the second experiment never started"
    )
