"""The pages' wiring under Streamlit's AppTest: every page renders, its controls exist, Train from those
controls produces metrics and charts, refused knob combinations name the knob, and sessions stay apart.

AppTest has no browser, so `run_every` never fires: the tests poll the job and call `at.run()` (a full rerun,
which draws the dashboard inline). The live refresh itself is covered by test_browser.py.
"""

import json
import re
import time
from pathlib import Path

import pytest
import torch
from streamlit.runtime.caching import clear_session_resource_cache
from streamlit.testing.v1 import AppTest

from ui.charts import run_colour
from ui.lab import live_loop

APP = str(Path(__file__).resolve().parents[1] / "app.py")
ALGORITHM_PAGES = {  # page file → the lab's key
    "policy_gradient": "policy_gradient",
    "ppo": "ppo",
    "grpo": "grpo",
    "gspo": "gspo",
    "rloo": "rloo",
    "reinforce_pp": "reinforce_pp",
    "vapo": "vapo",
}
SHARED_KNOBS = ("learning_rate", "temperature", "entropy_coef", "ppo_epochs", "num_minibatches")
TRAINING_TIMEOUT = 300  # seconds; the first run of a test process also trains the (short) SFT warm start


@pytest.fixture
def open_page():
    """`open_page(name)` → an AppTest on that page; every training it started is stopped afterwards."""
    apps = []

    def open_(page: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        if page != "overview":
            at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, at.exception
        apps.append(at)
        return at

    yield open_
    for at in apps:
        for key, value in at.session_state.to_dict().items():
            if key.endswith(":runs"):
                for job in value:
                    job.stop()
                    job.join(5)


def quick_settings(at: AppTest, lab: str) -> None:
    """Two RL steps after a short SFT warm start: enough to exercise the whole path in seconds."""
    at.select_slider(key=f"{lab}:steps").set_value(2).run()
    at.select_slider(key=f"{lab}:sft_steps").set_value(50).run()
    if lab == "vapo":
        at.select_slider(key="vapo:value_pretrain_steps").set_value(5).run()


def train(at: AppTest, lab: str):
    """Press Train, rerun until the run ends, and return its final snapshot."""
    at.button(key=f"{lab}:train").click().run()
    job = at.session_state[f"{lab}:runs"][-1]
    deadline = time.monotonic() + TRAINING_TIMEOUT
    while job.active:
        assert time.monotonic() < deadline, f"{lab}: still {job.snapshot().status} after {TRAINING_TIMEOUT} s"
        time.sleep(1)
        at.run()
    at.run()
    assert not at.exception, at.exception
    return job.snapshot()


def chart_points(at: AppTest) -> dict[str, int]:
    """Chart title → number of points in its first trace, read from the plotly spec AppTest exposes."""
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    return {spec["layout"]["title"]["text"]: len(spec["data"][0]["x"]) for spec in specs}


def chart_spec(at: AppTest, title: str) -> dict:
    return next(
        spec
        for spec in map(json.loads, (chart.proto.spec for chart in at.get("plotly_chart")))
        if spec["layout"]["title"]["text"] == title
    )


def training_charts(at: AppTest) -> list[str]:
    """The titles of the charts drawn against the training step (not the chat's charts of tokens)."""
    return [
        title
        for title in chart_points(at)
        if chart_spec(at, title)["layout"].get("xaxis", {}).get("title", {}).get("text") == "step"
    ]


def test_overview_renders_the_pipeline_and_the_four_models(open_page):
    at = open_page("overview")
    text = " ".join(m.value for m in at.markdown)
    for model in ("actor", "reference", "critic", "reward model"):
        assert model in text
    assert len(at.get("graphviz_chart")) == 1
    # The first screen says where to go: the call to action comes before the pipeline's background.
    order = [node.type for node in at.main if node.type in ("page_link", "graphviz_chart")]
    assert order[:3] == ["page_link", "page_link", "graphviz_chart"], order
    links = [link.proto.label for link in at.get("page_link")]
    assert links[:2] == [
        "Start at the beginning: the policy gradient",
        "Or train GRPO now: press Train at the top of its page",
    ]
    assert "ends in a lab" not in text and "ⓘ" not in text, "no false promise and no glyph without a font"
    assert '<abbr title="β, the KL coefficient' in text, "a formula's symbols are explained on hover"


def test_the_overview_lists_the_loops_threads_and_names_the_variable_when_it_is_wrong(open_page, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_LOOP_THREADS", "3")
    (table,) = [frame.value for frame in open_page("overview").dataframe]  # the "This server" table, the only one
    assert table.loc[table["variable"] == "RLHF_LAB_LOOP_THREADS", "value"].tolist() == ["3"]
    monkeypatch.setenv("RLHF_LAB_LOOP_THREADS", "two")
    at = open_page("overview")
    assert not at.dataframe and not at.exception
    assert [error.value for error in at.error] == [
        "RLHF_LAB_LOOP_THREADS='two' is out of range; allowed: an integer ≥ 1"
    ]


@pytest.mark.timeout(TRAINING_TIMEOUT + 120)
@pytest.mark.parametrize("page", ALGORITHM_PAGES)
def test_page_trains_from_its_controls(open_page, page):
    lab = ALGORITHM_PAGES[page]
    at = open_page(page)
    assert at.latex, "the page shows its formulas"
    assert any("def " in code.value for code in at.code), "and the code beside them"
    for key in ("train", "stop", "reset"):
        assert at.button(key=f"{lab}:{key}")
    assert at.button(key=f"{lab}:stop").disabled, "nothing to stop yet"
    assert ("gpt2" in at.selectbox(key=f"{lab}:model").options) == torch.cuda.is_available(), "gpt2 needs CUDA"
    for knob in SHARED_KNOBS:
        assert at.select_slider(key=f"{lab}:{knob}").help, f"{knob} has a tooltip"

    quick_settings(at, lab)
    question = at.radio(key=f"{lab}:prediction")
    question.set_value(question.options[0]).run()
    snap = train(at, lab)

    assert snap.status == "finished", snap.error
    assert [r["step"] for r in snap.records] == [1, 2]
    assert {"reward_mean", "entropy", "kl_exact", "clip_frac_low", "advantage_std"} <= set(snap.records[-1])
    assert sorted(snap.samples) == [1, 2] and snap.samples[2][0]["tokens"], "every step's samples are kept"
    points = chart_points(at)
    assert points["Reward and success rate"] == 2
    if page in ("ppo", "vapo"):
        assert points["Explained variance"] == 2
    assert at.success and "Finished 2 steps" in at.success[0].value
    assert not at.button(key=f"{lab}:train").disabled, "controls are enabled again"
    assert at.get("download_button"), "the metrics can be downloaded"
    reveal = [m.value for m in (*at.success, *at.warning, *at.info) if "You predicted" in m.value]
    assert reveal and question.options[0] in reveal[0], "the prediction is answered from the run"


def test_refused_knob_combination_names_the_knob(open_page):
    at = open_page("grpo")
    at.select_slider(key="grpo:num_generations").set_value(1).run()
    assert not at.exception
    assert len(at.error) == 1 and "num_generations" in at.error[0].value
    assert at.button(key="grpo:train").disabled


def test_variant_switch_loads_that_presets_defaults(open_page):
    at = open_page("grpo")
    at.radio(key="grpo:variant").set_value("DAPO").run()
    assert at.select_slider(key="grpo:epsilon_high").value == 0.28
    assert at.select_slider(key="grpo:beta").value == 0.0
    assert at.selectbox(key="grpo:loss_agg_mode").value == "token-mean"
    assert at.toggle(key="grpo:dynamic_sampling").value
    at.radio(key="grpo:variant").set_value("Dr. GRPO").run()
    assert at.selectbox(key="grpo:loss_agg_mode").value == "seq-mean-token-sum-norm"
    assert not at.toggle(key="grpo:dynamic_sampling").value


def test_knob_values_survive_a_page_switch(open_page):
    at = open_page("grpo")
    at.select_slider(key="grpo:num_generations").set_value(4).run()
    at.switch_page("app_pages/ppo.py").run()
    at.switch_page("app_pages/grpo.py").run()
    assert at.select_slider(key="grpo:num_generations").value == 4


@pytest.mark.timeout(2 * TRAINING_TIMEOUT + 120)
def test_runs_persist_and_overlay_with_labels_naming_the_difference(open_page):
    at = open_page("grpo")
    quick_settings(at, "grpo")
    train(at, "grpo")
    at.select_slider(key="grpo:beta").set_value(0.1).run()
    assert chart_points(at)["Reward and success rate"] == 2, "a finished run stays on screen after a change"

    train(at, "grpo")
    picker = at.get("button_group")[0]
    assert picker.proto.label == "Runs on the charts"
    assert [option.content for option in picker.proto.options] == ["#1 · GRPO", "#2 · beta=0.1"]
    assert "#2 against #1: `beta` 0.04 → 0.1" in [c.value for c in at.caption], "the one knob that differs"
    names = {trace.get("name", "") for trace in chart_spec(at, "Reward and success rate")["data"]}
    assert {name.split()[0] for name in names} == {"#1", "#2"}, "both runs overlaid by default"
    at.session_state["grpo:overlay"] = [2]
    at.run()
    traces = chart_spec(at, "Reward and success rate")["data"]
    # One run of the page's two: still named and coloured as run #2, as the picker's swatch shows it.
    assert {trace["name"] for trace in traces} == {"#2 reward", "#2 success rate"}
    assert {trace["line"]["color"] for trace in traces} == {run_colour(2)}


@pytest.mark.timeout(TRAINING_TIMEOUT + 120)
def test_two_sessions_never_see_each_others_runs(open_page):
    first, second = open_page("grpo"), open_page("grpo")
    quick_settings(first, "grpo")
    train(first, "grpo")
    second.run()
    assert not second.session_state["grpo:runs"]
    assert not second.get("plotly_chart")
    assert chart_points(first)["Reward and success rate"] == 2


@pytest.fixture
def one_live_run_at_a_time(monkeypatch):
    """The live loop's cap set to 1 (it is built once from the environment, so rebuild it around the test)."""
    monkeypatch.setenv("RLHF_LAB_MAX_LIVE_RUNS", "1")
    live_loop.clear()
    yield
    live_loop.clear()


def long_run(at: AppTest, lab: str) -> None:
    at.select_slider(key=f"{lab}:steps").set_value(500).run()
    at.select_slider(key=f"{lab}:sft_steps").set_value(50).run()
    at.button(key=f"{lab}:train").click().run()


@pytest.mark.timeout(TRAINING_TIMEOUT + 60)
def test_a_training_beyond_the_cap_waits_in_the_queue_and_says_so(open_page, one_live_run_at_a_time):
    first, second = open_page("grpo"), open_page("ppo")
    long_run(first, "grpo")
    long_run(second, "ppo")
    second.run()
    assert any(
        note.value.startswith("Queued behind 1 run: 1 is training")
        and "you are number 1 in the queue" in note.value
        and re.search(r"about \d+ s to wait", note.value)
        for note in second.info
    )
    second.button(key="ppo:stop").click().run()
    job = second.session_state["ppo:runs"][-1]
    assert job.join(1.0) and job.snapshot().status == "stopped"
    assert first.session_state["grpo:runs"][-1].active, "the running one is untouched"


@pytest.mark.timeout(TRAINING_TIMEOUT + 60)
def test_a_closed_session_leaves_its_training_to_the_learners_next_visit(open_page):
    at = open_page("grpo")
    long_run(at, "grpo")
    job = at.session_state["grpo:runs"][-1]
    # What Streamlit does when a browser session disconnects (a reload, a closed tab): release the session's
    # cached resources. The run belongs to the learner, not the connection: it goes on (ui.session).
    clear_session_resource_cache("test session id")
    assert not job.join(3.0) and job.active, "the release did not stop it"
    job.stop()
    assert job.join(TRAINING_TIMEOUT) and job.snapshot().status == "stopped", "Stop still ends it"


def open_with_url(page: str, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"app_pages/{page}.py")
    for name, value in params.items():
        at.query_params[name] = value
    return at.run()


def test_a_link_sets_the_knobs_and_the_page_writes_its_settings_back():
    at = open_with_url("grpo", algo="dapo", epsilon_high="0.31", seed="1")
    assert not at.exception and not at.warning
    assert at.radio(key="grpo:variant").value == "DAPO"
    assert at.select_slider(key="grpo:epsilon_high").value == 0.31, "a value off the grid is offered too"
    assert at.select_slider(key="grpo:seed").value == 1
    assert at.select_slider(key="grpo:beta").value == 0.0, "the rest is DAPO's preset"
    at.select_slider(key="grpo:beta").set_value(0.1).run()
    assert dict(at.query_params) == {"algo": ["dapo"], "seed": ["1"], "epsilon_high": ["0.31"], "beta": ["0.1"]} or {
        k: (v[0] if isinstance(v, list) else v) for k, v in at.query_params.items()
    } == {"algo": "dapo", "seed": "1", "epsilon_high": "0.31", "beta": "0.1"}


def test_a_query_string_the_page_wrote_a_few_moves_ago_does_not_move_the_sliders_back():
    at = open_with_url("grpo", algo="grpo", seed="0")
    for beta in (0.05, 0.1, 0.2):  # three fast moves: each rerun writes its URL
        at.select_slider(key="grpo:beta").set_value(beta).run()
    # The browser's query string, sent with the next rerun, still holds the first move's URL (it lags under load).
    at.query_params.clear()
    at.query_params.update(algo="grpo", seed="0", beta="0.05")
    at.run()
    assert not at.exception and not at.warning
    assert at.select_slider(key="grpo:beta").value == 0.2, "the learner's last move stands"
    share = next(code.value for code in at.code if "beta=" in code.value)
    assert share.endswith("?algo=grpo&seed=0&beta=0.2"), "the Share link names the value the slider holds"


@pytest.mark.parametrize("name, value", [("epsilon_high", "abc"), ("epsilon_high", "-1"), ("num_generations", "1")])
def test_a_bad_value_in_the_link_is_refused_by_name_and_the_default_kept(name, value):
    at = open_with_url("grpo", **{name: value})
    assert not at.exception
    assert len(at.warning) == 1 and name in at.warning[0].value and "refused" in at.warning[0].value
    default = {"epsilon_high": 0.2, "num_generations": 8}[name]
    assert at.select_slider(key=f"grpo:{name}").value == default
    assert not at.button(key="grpo:train").disabled


@pytest.mark.timeout(TRAINING_TIMEOUT + 120)
def test_lora_is_a_knob_of_every_page_and_a_link_to_it_trains_adapters_only():
    at = open_with_url("grpo", use_peft="true", lora_r="4", lora_target_modules="c_attn,c_proj")
    assert not at.exception and not at.warning
    assert at.toggle(key="grpo:use_peft").value is True
    assert at.select_slider(key="grpo:lora_r").value == 4
    quick_settings(at, "grpo")
    snap = train(at, "grpo")
    assert snap.status == "finished", snap.error
    job = at.session_state["grpo:runs"][-1]
    algo = job.run.algo
    assert (algo.use_peft, algo.lora_r, algo.lora_target_modules) == (True, 4, "c_attn,c_proj")
    for page in ALGORITHM_PAGES:
        other = open_with_url(page)
        assert other.toggle(key=f"{ALGORITHM_PAGES[page]}:use_peft").value is False, page


def test_switching_gspo_to_the_token_clip_loads_the_token_clip_range(open_page):
    at = open_page("gspo")
    assert at.select_slider(key="gspo:epsilon").value == 3e-4
    at.selectbox(key="gspo:policy_loss").set_value("clip").run()
    assert at.select_slider(key="gspo:epsilon").value == 0.2
    assert at.select_slider(key="gspo:epsilon_high").value == 0.2


def token_widget(at, page: str, name: str):
    """The token view's selectbox `name` (token_run_picker, token_row): keyed by what it lists, so found by name."""
    return next(box for box in at.selectbox if box.key.startswith(f"{page}:") and name in box.key)


def pick_first_token(at, page: str) -> None:
    """Pick the first token of the response the token view's picker shows, and draw its term of the loss."""
    row = token_widget(at, page, "token_row")
    at.session_state[f"{row.key.removesuffix('token_row')}{row.value}:token_index"] = 0
    at.run()
    assert not at.exception, at.exception


@pytest.mark.timeout(TRAINING_TIMEOUT + 120)
@pytest.mark.parametrize(
    "variant, loss", [("CISPO", r"\mathrm{sg}[\min(\rho_t, 5)]"), ("SAPO", r"g_\tau(\rho_t)"), ("DPPO", r"-m_t\,A")]
)
def test_the_token_view_shows_the_runs_own_loss(open_page, variant, loss):
    at = open_page("beyond_grpo")
    at.radio(key="beyond_grpo:variant").set_value(variant).run()
    quick_settings(at, "beyond_grpo")
    train(at, "beyond_grpo")
    at.session_state["beyond_grpo:tab"] = "Tokens"
    at.run()
    pick_first_token(at, "beyond_grpo")
    formulas = [latex.value for latex in at.latex if r"\ell_t" in latex.value and "gathered" in latex.value]
    assert len(formulas) == 1 and loss in formulas[0], formulas
    assert r"\mathrm{clip}" not in formulas[0], "not PPO's clipped surrogate"
    assert any("Gradient weight on log π" in m.value for m in at.markdown)


@pytest.mark.timeout(2 * TRAINING_TIMEOUT + 120)
def test_the_token_view_shows_the_chosen_runs_samples_and_loss(open_page):
    at = open_page("beyond_grpo")
    quick_settings(at, "beyond_grpo")
    for variant in ("CISPO", "SAPO"):
        at.radio(key="beyond_grpo:variant").set_value(variant).run()
        train(at, "beyond_grpo")
    at.session_state["beyond_grpo:tab"] = "Tokens"
    at.run()

    def formula() -> str:
        pick_first_token(at, "beyond_grpo")
        return next(latex.value for latex in at.latex if r"\ell_t" in latex.value and "gathered" in latex.value)

    chooser = token_widget(at, "beyond_grpo", "token_run_picker")
    assert chooser.value == 2 and r"g_\tau(\rho_t)" in formula(), "the newest run, SAPO, by default"
    token_widget(at, "beyond_grpo", "token_run_picker").set_value(1).run()
    assert r"\mathrm{sg}[\min(\rho_t, 5)]" in formula(), "run #1's own samples and loss: CISPO's"


def test_a_click_on_an_overlaid_trace_opens_that_runs_samples():
    def page():
        import streamlit as st

        from ui.dashboard import _chart_key, _follow_chart_click

        st.session_state["lab:trace_runs:Reward and success rate"] = [1, 1, 2, 2]  # traces of runs #1 and #2
        st.session_state[_chart_key("lab", "Reward and success rate")] = {
            "selection": {"points": [{"x": 7, "curve_number": 1}]}
        }
        _follow_chart_click("lab")
        st.session_state[_chart_key("lab", "Reward and success rate")] = {
            "selection": {"points": [{"x": 9, "curve_number": 3}]}
        }
        _follow_chart_click("lab")

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    assert at.session_state["lab:token_run"] == 2 and at.session_state["lab:token_step"] == 9
    assert at.session_state["lab:tab"] == "Tokens"


@pytest.mark.timeout(TRAINING_TIMEOUT + 120)
def test_the_token_view_shows_every_group_of_its_step_names_its_run_and_every_chart_marks_its_step(open_page):
    at = open_page("grpo")
    quick_settings(at, "grpo")
    snap = train(at, "grpo")
    # The whole batch is recorded at the defaults: 8 prompts × 8 responses, eight groups.
    assert [len(samples) for samples in snap.samples.values()] == [64, 64]
    # Every chart marks the step the token view shows: the newest, 2, until the learner chooses another.
    step_charts = training_charts(at)
    marks = {
        title: [shape["x0"] for shape in chart_spec(at, title)["layout"].get("shapes", [])] for title in step_charts
    }
    assert marks and set(map(tuple, marks.values())) == {(2,)}, marks
    at.session_state["grpo:tab"] = "Tokens"
    at.run()
    assert not at.exception, at.exception
    assert any("samples of run <b>#1 · GRPO</b>" in m.value and run_colour(1) in m.value for m in at.markdown)
    group = at.selectbox(key="grpo:token_group")
    assert group.value == "all" and len(group.options) == 9, "all groups, or one of the eight"

    def rows() -> list[str]:
        view = next(m.value for m in at.markdown if "reward " in m.value and "font-family:monospace" in m.value)
        return re.findall(r"(\d+)\. ", re.sub(r"<[^>]+>", " ", view)), re.findall(r">(group \d+) · ", view)

    numbers, headings = rows()
    assert len(numbers) == 64 and headings == [f"group {g}" for g in range(1, 9)]
    group.set_value(2).run()
    numbers, headings = rows()
    assert len(numbers) == 8 and headings == ["group 3"], "one group: its eight responses under its summary"
    assert token_widget(at, "grpo", "token_row").options[0].startswith("1. ")
    # Choosing a step in the token view marks it on the charts.
    at.select_slider(key="grpo:token_step").set_value(1).run()
    at.session_state["grpo:tab"] = "Charts"
    at.run()
    assert not at.exception, at.exception
    assert {chart_spec(at, title)["layout"]["shapes"][0]["x0"] for title in training_charts(at)} == {1}


def test_a_clicked_step_whose_samples_were_thinned_opens_the_nearest_kept_step():
    def page():
        from types import SimpleNamespace

        import streamlit as st

        from ui.dashboard import _token_step

        st.session_state["lab:token_step"] = 6  # a chart point at step 6; steps 1, 3, 5, 7 and 9 kept samples
        st.session_state["lab:step"] = _token_step("lab", SimpleNamespace(samples=dict.fromkeys((1, 3, 5, 7, 9))))

    at = AppTest.from_function(page).run()
    assert not at.exception, at.exception
    assert at.session_state["lab:step"] == 5 == at.session_state["lab:token_step"], "the nearer of 5 and 7: 5"


def test_a_run_without_a_prediction_still_gets_the_answer():
    def page():
        from types import SimpleNamespace

        from ui.dashboard import reveal
        from ui.predict import Prediction

        question = Prediction("Will it rise?", ("yes", "no"), lambda records: ("yes", "0.1 → 0.9"))
        reveal("lab", SimpleNamespace(number=1), SimpleNamespace(active=False, records=[]), question)

    at = AppTest.from_function(page).run()
    assert [i.value for i in at.info] == [
        "Will it rise? The run says **yes**: 0.1 → 0.9. Answer before the next Train to test your intuition."
    ]
