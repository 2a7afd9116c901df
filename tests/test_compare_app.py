"""The Compare page under AppTest: it renders with its controls, refuses bad knobs by name, shows and deletes the
runs of a store, names the experiment whose runs it shows, draws valid figures, and its Run button trains a sweep
whose runs land in the store.

AppTest has no browser, so `run_every` never fires: the tests poll the store and call `at.run()`.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import plotly.graph_objects as go
import pytest
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.experiments import get_experiment
from rl_core.runs.store import RunStore, process_alive
from rl_core.runs.sweep import Sweep, default_workers, plan_sweep
from toy_tasks import DEFAULT_TASK
from ui.compare import CURVES, band_figure, live_sweeps

ROOT = Path(__file__).resolve().parents[1]
PAGE = str(ROOT / "app_pages" / "compare.py")
TIMEOUT = 120


@pytest.fixture
def store(tmp_path, monkeypatch) -> RunStore:
    """An empty run store that the page (and any worker it spawns) uses."""
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    return RunStore()


def open_page(session: str = "me") -> AppTest:
    """The page in a new browser session whose token is `session`."""
    at = AppTest.from_file(PAGE, default_timeout=TIMEOUT)
    at.session_state["lab:session"] = session
    at.run()
    assert not at.exception, at.exception
    return at


SAMPLE = {
    "prompt": "ab",
    "response": "ba",
    "tokens": ["b", "a", "<eos>"],
    "reward": 1.0,
    "success": True,
    "truncated": False,
    "advantages": [0.5, 0.5, 0.5],
    "ratios": [1.0, 1.1, 0.9],
    "clipped": [False] * 3,
    "entropies": [0.2, 0.1, 0.0],
}


def table(at: AppTest, column: str):
    """The first table on the page with this column, as a DataFrame (AppTest does not expose a table's key)."""
    return next(frame.value for frame in at.dataframe if column in frame.value.columns)


def stored_run(
    store: RunStore,
    algo: str,
    seed: int,
    sweep_id: int | None = None,
    session: str | None = "me",
    error: str | None = None,
    kl_exact: tuple[float, float, float] = (0.01, 0.02, 0.03),
) -> int:
    """A finished three-step run, as a sweep of `session` would have written it (its exact KL per step
    `kl_exact`)."""
    run_id = store.add_run(
        RunConfig(algo=get_preset(algo), task="reverse", steps=3, seed=seed), algo, sweep_id=sweep_id, session=session
    )
    store.start_run(run_id)
    for step in (1, 2, 3):
        store.add_step(
            run_id,
            {
                "step": step,
                "success_rate": 0.3 * step,
                "reward_mean": 0.3 * step,
                "entropy": 1.0 / step,
                "kl_exact": kl_exact[step - 1],
                "kl_k3": 0.012 * step,
                "clip_frac": 0.0,
                "response_length": 5.0,
                "elapsed": 0.2 * step,
                "samples": [SAMPLE],
            },
        )
    store.finish_run(run_id, "failed" if error else "finished", final={"success_rate": 0.9}, error=error)
    return run_id


def test_the_page_renders_its_controls_on_an_empty_store(store):
    at = open_page()
    assert at.selectbox(key="compare:task").value == DEFAULT_TASK
    assert [at.number_input(key=f"compare:{name}").value for name in ("seeds", "steps")] == [3, 40]
    assert at.number_input(key="compare:workers").value == min(default_workers(), 2)  # the session's cap
    assert at.number_input(key="compare:sft_steps").value == RunConfig.sft_steps
    assert at.radio(key="compare:mode").value == "Presets side by side" and at.text_area(key="compare:extra")
    assert at.multiselect(key="compare:presets").value == ["grpo", "rloo", "reinforce_pp"]
    assert not at.button(key="compare:run").disabled and at.button(key="compare:stop").disabled
    assert "9 runs: 3 groups × 3 seeds" in " ".join(c.value for c in at.caption)
    assert "No runs of yours yet, and none shared from the command line." in [c.value for c in at.caption]
    at.radio(key="compare:mode").set_value("One preset, several values of a knob").run()
    assert at.selectbox(key="compare:knob").value == "beta" and at.text_input(key="compare:values").value
    assert not at.error


@pytest.mark.parametrize(
    "widget, key, value, message",
    [
        ("text_area", "compare:extra", "epsilon=1.5", "epsilon=1.5 is out of range"),
        ("text_area", "compare:extra", "bogus=1", "unknown knob 'bogus'"),
        ("multiselect", "compare:presets", [], "algos is empty"),
    ],
)
def test_bad_input_names_the_knob_and_disables_run(store, widget, key, value, message):
    at = open_page()
    getattr(at, widget)(key=key).set_value(value).run()
    assert not at.exception
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    assert at.button(key="compare:run").disabled


def test_a_bad_grid_value_names_the_knob(store):
    at = open_page()
    at.radio(key="compare:mode").set_value("One preset, several values of a knob").run()
    at.text_input(key="compare:values").set_value("0, -0.5").run()
    assert any("beta=-0.5 is out of range" in e.value for e in at.error)


def test_stored_runs_are_listed_shown_and_deleted(store):
    sweep_id = store.create_sweep({"algos": ["grpo", "rloo"]}, session="me")
    runs = [stored_run(store, algo, seed, sweep_id) for algo in ("grpo", "rloo") for seed in (0, 1)]
    loose = stored_run(store, "ppo", 0)  # a run outside the latest sweep: listed, not shown at first
    at = open_page()
    listing = table(at, "date")
    assert listing["run"].tolist() == [loose, *runs[::-1]] and set(listing["status"]) == {"finished"}
    # a new session shows the latest sweep: one curve per group, a summary row per group
    summary = table(at, "final success")
    assert summary["group"].tolist() == ["grpo", "rloo"] and summary["seeds"].tolist() == [2, 2]
    assert summary["final success"].tolist() == ["0.9 ± 0", "0.9 ± 0"], "mean ± spread in one column"
    titles = [json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")]
    assert len(titles) == len(CURVES) and "Clip fraction (tokens)" in titles, "no GSPO run, no per-response chart"
    assert any("✓ solved" in m.value for m in at.markdown)  # the latest step's samples of the first run
    assert [b.label for b in at.get("download_button")] == ["Summary table (CSV)", "Every step's metrics (CSV)"]

    at.multiselect(key="compare:stored").set_value([loose]).run()
    at.button(key="compare:reopen").click().run()
    assert table(at, "final success")["group"].tolist() == ["ppo"]

    at.multiselect(key="compare:stored").set_value([loose, runs[0]]).run()
    at.button(key="compare:delete").click().run()
    assert not at.exception
    assert sorted(r.id for r in store.runs()) == runs[1:] and store.steps(loose) == []
    assert table(at, "date")["run"].tolist() == runs[1:][::-1]
    assert any("Deleted 2 run(s)." in i.value for i in at.info)


def test_an_experiments_runs_are_named_as_that_experiment(store):
    plain = store.create_sweep({"algos": ["grpo"]}, session="me")
    stored_run(store, "grpo", 0, plain)
    assert not any("Shown: the runs of the experiment" in c.value for c in open_page().caption)
    experiment = store.create_sweep(
        {"experiment": "gspo_clipping", "seeds": [0], "arms": ["GRPO", "GSPO"]}, session="me"
    )
    for algo in ("grpo", "gspo"):
        stored_run(store, algo, 0, experiment)
    captions = [c.value for c in open_page().caption]
    assert any(f"the experiment **{get_experiment('gspo_clipping').title}** (`gspo_clipping`)" in c for c in captions)


def test_a_group_keeps_its_colour_on_a_chart_that_leaves_others_out(store):
    # RLOO's vanilla loss has no clip: the clip chart draws GRPO alone, in GRPO's colour on every other chart.
    sweep_id = store.create_sweep({"algos": ["rloo", "grpo"]}, session="me")
    for algo in ("rloo", "grpo"):
        stored_run(store, algo, 0, sweep_id)
    at = open_page()
    specs = {
        spec["layout"]["title"]["text"]: spec
        for spec in (json.loads(chart.proto.spec) for chart in at.get("plotly_chart"))
    }

    def colour(title: str, name: str) -> str:
        return next(trace["line"]["color"] for trace in specs[title]["data"] if trace.get("name") == name)

    assert [t.get("name") for t in specs["Clip fraction (tokens)"]["data"] if t.get("name")] == ["grpo"]
    assert (
        colour("Clip fraction (tokens)", "grpo")
        == colour(CURVES["entropy"], "grpo")
        != colour(CURVES["entropy"], "rloo")
    )
    assert any("Not on a clip chart: rloo, whose loss has no ratio clip." in c.value for c in at.caption)


def test_a_kl_axis_starts_at_0_under_round_off(store):
    # A policy still at its reference: its exact KL, a sum over the vocabulary in float32, measured −5.2×10⁻⁸ at
    # the first step of a stored sweep. A KL is never negative: the axis starts at 0, not at plotly's −0.02.
    sweep_id = store.create_sweep({"algos": ["grpo"]}, session="me")
    stored_run(store, "grpo", 0, sweep_id, kl_exact=(-5.2184574883540336e-08, 0.2, 0.4))
    at = open_page()
    specs = {
        spec["layout"]["title"]["text"]: spec
        for spec in (json.loads(chart.proto.spec) for chart in at.get("plotly_chart"))
    }
    assert specs[CURVES["kl_exact"]]["layout"]["yaxis"].get("rangemode") == "nonnegative"


def test_the_band_figures_pass_plotly_validation():
    groups = {
        "grpo": [[{"step": 1, "entropy": 1.0}, {"step": 2, "entropy": 0.8}], [{"step": 1, "entropy": 0.9}]],
        "rloo": [[{"step": 1, "entropy": 1.1}]],
    }
    figure = band_figure("entropy", groups)
    go.Figure(figure.to_dict())  # validates every property
    mean = [t for t in figure.data if t.name == "grpo"][0]
    assert list(mean.x) == [1, 2] and list(mean.y) == [0.95, 0.8]
    assert sum(t.fill == "tonexty" for t in figure.data) == 1  # a band only where there are several seeds
    assert figure.layout.yaxis.title.text == "nats per token"
    # Before a run's first step (no clip fraction in these records) there is nothing to scale an axis to: no axes,
    # only a note, where plotly would draw an empty frame from −1 to 6 and 4.
    empty = band_figure("clip_frac", groups, "Clip fraction (responses)", "share of responses")
    go.Figure(empty.to_dict())
    assert not empty.data and empty.layout.xaxis.visible is False and empty.layout.yaxis.visible is False
    assert [note.text for note in empty.layout.annotations] == ["No steps yet: the curves appear as the runs train."]


@pytest.mark.slow
def test_run_from_the_page_trains_a_sweep_into_the_store(store):
    at = open_page()
    at.multiselect(key="compare:presets").set_value(["grpo", "rloo"]).run()
    at.number_input(key="compare:seeds").set_value(1).run()
    at.number_input(key="compare:steps").set_value(2).run()
    at.number_input(key="compare:sft_steps").set_value(10).run()
    at.text_area(key="compare:extra").set_value("prompts_per_step=2\nnum_generations=2\nppo_epochs=1").run()
    at.button(key="compare:run").click().run()
    assert not at.exception, at.exception
    runs = store.runs()
    assert [(r.label, r.seed) for r in runs] == [("grpo", 0), ("rloo", 0)]
    assert at.button(key="compare:run").disabled
    deadline = time.monotonic() + 600
    try:
        while any(run.active for run in store.runs()):
            assert time.monotonic() < deadline, [(r.status, r.steps_done) for r in store.runs()]
            time.sleep(1)
        at.run()
    finally:
        for sweep in list(live_sweeps().values()):
            sweep.stop()
    assert [(r.status, r.steps_done) for r in store.runs()] == [("finished", 2), ("finished", 2)]
    assert table(at, "final success")["group"].tolist() == ["grpo", "rloo"]
    assert not at.button(key="compare:run").disabled


def test_the_router_opens_the_compare_page(store):
    at = AppTest.from_file(str(Path(PAGE).parents[1] / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page("app_pages/compare.py").run()
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Compare and ablate"]


@pytest.mark.slow
def test_a_sweep_killed_mid_way_leaves_finished_runs_intact_and_the_rest_marked(store, tmp_path):
    """The coordinator and its workers die at once (SIGKILL to the whole process group, as when the app is killed);
    the next session finds the finished run whole and every other run marked interrupted, none left 'running'."""
    command = [
        sys.executable,
        "-m",
        "rl_core",
        "sweep",
        # Two group sizes are two shapes, so two batches, one after the other on the one worker: the first batch's
        # runs have finished while the second's train.
        "--algos",
        "grpo",
        "--grid",
        "num_generations=2,4",
        "--seeds",
        "2",
        "--steps",
        "300",
        "--workers",
        "1",
        "--db",
        os.environ["RLHF_LAB_DB"],
        "--out",
        str(tmp_path / "out"),
        "--set",
        "prompts_per_step=2",
        "--set",
        "ppo_epochs=1",
        "--set",
        "num_minibatches=1",
        "--sft-steps",
        "20",
    ]
    sweep = subprocess.Popen(
        command,
        cwd=ROOT,
        env=os.environ | {"RLHF_LAB_CACHE": str(tmp_path / "cache")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    try:
        while True:
            assert sweep.poll() is None, sweep.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, [(r.status, r.steps_done) for r in store.runs()]
            runs = store.runs()
            # Cut mid-way: a run of a batch that has trained all its steps may still be running its evaluation.
            running = [r for r in runs if r.status == "running" and 5 <= r.steps_done < 300]
            if running and any(r.status == "finished" for r in runs):
                break
            time.sleep(0.05)
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
    # A killed worker takes a moment to exit (a busy machine once left one still alive when the store reopened);
    # a restarted app opens the store after its processes are gone.
    owners, deadline = {run.owner_pid for run in store.runs()}, time.monotonic() + 30
    while any(process_alive(pid) for pid in owners) and time.monotonic() < deadline:
        time.sleep(0.05)

    reopened = RunStore()  # what a restarted app opens
    runs = reopened.runs()
    finished = [r for r in runs if r.status == "finished"]
    interrupted = [r for r in runs if r.status == "interrupted"]
    assert finished and len(finished) + len(interrupted) == 4, [(r.status, r.steps_done) for r in runs]
    for run in finished:
        assert run.steps_done == 300 and run.final is not None
        assert [s["step"] for s in reopened.steps(run.id)] == list(range(1, 301))
    [cut] = [r for r in interrupted if r.id == running[0].id]
    assert running[0].steps_done <= cut.steps_done < 300
    for run in interrupted:
        assert [s["step"] for s in reopened.steps(run.id)] == list(range(1, run.steps_done + 1))
    with sqlite3.connect(os.environ["RLHF_LAB_DB"]) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    at = open_page()
    listing = table(at, "date")
    assert dict(zip(listing["run"], listing["status"])) == {r.id: r.status for r in runs}


# ---------------------------------------------------------------------------------------------- serving a class
def page_text(at: AppTest) -> str:
    """Everything the page shows as text, tables included."""
    parts = [
        e.value
        for kind in ("title", "header", "markdown", "caption", "error", "info", "warning")
        for e in getattr(at, kind)
    ]
    parts += [frame.value.to_csv() for frame in at.dataframe]
    return "\n".join(map(str, parts))


def test_a_session_sees_and_deletes_only_its_own_runs_and_the_shared_ones_read_only(store):
    mine = stored_run(store, "grpo", 0, session="me")
    theirs = stored_run(store, "rloo", 0, session="them")
    shared = stored_run(store, "ppo", 0, session=None)  # from the command line
    at = open_page("me")
    listing = table(at, "date")
    assert dict(zip(listing["run"], listing["owner"])) == {shared: "shared", mine: "you"}
    # (the preset controls name rloo, a default preset: the other learner's run is looked for by its number)
    assert theirs not in at.multiselect(key="compare:stored").options and f"#{theirs} " not in page_text(at)
    at.multiselect(key="compare:stored").set_value([mine, shared]).run()
    at.button(key="compare:delete").click().run()
    assert sorted(run.id for run in store.runs()) == [theirs, shared]
    assert any("Deleted 1 run(s). 1 kept: still training or shared." in i.value for i in at.info)
    # a run id typed into the session state by hand is still not shown
    at.session_state["compare:shown"] = [theirs]
    at.run()
    assert not at.get("plotly_chart") and f"#{theirs} " not in page_text(at)


def test_a_new_session_opens_empty_and_only_the_owner_can_stop_a_live_sweep(store):
    planned = plan_sweep(["grpo"], range(2), "reverse", 5, sft_steps=0)
    sweep = Sweep(planned, store, workers=1, session="teacher")  # queued runs, owned by this test process
    live_sweeps()[sweep.sweep_id] = sweep
    try:
        student = open_page("student")
        assert not student.get("plotly_chart") and student.button(key="compare:stop").disabled
        assert f"#{sweep.run_ids[0]} " not in page_text(student)
        teacher = open_page("teacher")  # opens on its own latest sweep, live, with Stop
        assert table(teacher, "progress")["run"].tolist() == sweep.run_ids
        assert not teacher.button(key="compare:stop").disabled
        teacher.button(key="compare:stop").click().run()
        assert sweep.stopping
    finally:
        live_sweeps().pop(sweep.sweep_id, None)
        store.settle(sweep.run_ids, "stopped")


def test_a_session_has_at_most_its_worker_cap(store, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_MAX_SESSION_WORKERS", "1")
    at = open_page()
    assert at.number_input(key="compare:workers").max == 1 and at.number_input(key="compare:workers").value == 1


def test_no_server_path_or_traceback_reaches_the_page(store, tmp_path):
    cache = os.environ["RLHF_LAB_CACHE"]
    stored_run(
        store,
        "grpo",
        0,
        store.create_sweep({}, session="me"),
        error=f"OSError: [Errno 28] No space left on device: '{cache}/sft/x/model.bin'",
    )
    at = open_page()
    at.text_area(key="compare:extra").set_value("name=foo").run()  # once a traceback on the page
    assert not at.exception and any("name names the preset and is not a knob" in e.value for e in at.error)
    text = page_text(at)
    assert "…/model.bin" in text
    for path in (str(tmp_path), cache, str(ROOT), os.path.expanduser("~")):
        assert path not in text, path


def test_a_store_that_cannot_be_opened_is_reported_without_its_path(tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("RLHF_LAB_DB", str(blocked / "runs.sqlite"))
    at = open_page()
    assert any("The run store cannot be opened" in e.value for e in at.error)
    assert str(tmp_path) not in page_text(at)


def test_a_live_lab_run_without_elapsed_is_shown_and_a_choice_survives_its_status_changing(store):
    # A live-lab run as the lab stored them before its records carried `elapsed`: one that reached 90 % success.
    old = store.add_run(
        RunConfig(algo=get_preset("grpo"), task="reverse", steps=2), "GRPO · grpo page #1", session="me"
    )
    store.start_run(old)
    for step in (1, 2):
        store.add_step(
            old,
            {"step": step, "success_rate": 0.95, "reward_mean": 0.95, "entropy": 0.5, "kl_exact": 0.01, "samples": []},
        )
    store.finish_run(old, "finished", final={"success_rate": 0.9})
    training = store.add_run(RunConfig(algo=get_preset("rloo"), task="reverse", steps=3), "rloo", session="me")
    store.start_run(training)
    at = open_page()
    at.multiselect(key="compare:stored").set_value([old, training]).run()
    store.finish_run(training, "finished")  # its status changes while chosen
    at.run()
    assert not at.exception and at.multiselect(key="compare:stored").value == [old, training]
    at.button(key="compare:reopen").click().run()
    assert not at.exception
    summary = table(at, "final success")
    assert summary["group"].tolist() == ["GRPO · grpo page #1", "rloo"]
    assert summary["steps to 90%"].tolist()[0] == "1 ± 0"


def test_a_huge_knob_name_is_refused_in_a_message_of_a_few_hundred_characters(store):
    at = open_page()
    at.text_area(key="compare:extra").set_value("x" * 10_000 + "=1").run()
    refusal = next(e.value for e in at.error if "unknown knob" in e.value)
    assert len(refusal) <= 350 and refusal.startswith("This comparison cannot run: unknown knob 'xxx")
    assert at.button(key="compare:run").disabled


def test_presets_that_differ_in_several_knobs_are_flagged_and_one_knob_is_one_click_away(store):
    at = open_page()
    at.multiselect(key="compare:presets").set_value(["grpo", "dapo"]).run()
    # DAPO is GRPO with ε_high 0.28, dynamic sampling, token-mean and the overlong penalty, and β = 0 (the spec's
    # DAPO preset): five knobs, each named with both values.
    listed = " ".join(c.value for c in at.caption)
    for change in (
        "`beta` 0.04 → 0",
        "`epsilon_high` 0.2 → 0.28",
        "`dynamic_sampling` False → True",
        "`loss_agg_mode` seq-mean-token-mean → token-mean",
        "`overlong_punishment` False → True",
    ):
        assert change in listed
    assert any("dapo differs from grpo in 5 knobs" in w.value for w in at.warning)
    at.selectbox(key="compare:confound_knob").set_value("epsilon_high").run()
    at.button(key="compare:one_knob").click().run()
    assert not at.exception, at.exception
    assert at.radio(key="compare:mode").value == "One preset, several values of a knob"
    assert at.selectbox(key="compare:preset").value == "grpo"
    assert at.selectbox(key="compare:knob").value == "epsilon_high"
    assert at.text_input(key="compare:values").value == "0.2, 0.28"
    assert "6 runs: 2 groups × 3 seeds" in " ".join(c.value for c in at.caption)


def test_presets_that_differ_in_one_knob_are_not_flagged(store):
    at = open_page()
    at.multiselect(key="compare:presets").set_value(["grpo", "maxrl"]).run()
    assert "**maxrl** against **grpo**: `advantage_estimator` grpo → maxrl" in " ".join(c.value for c in at.caption)
    assert not any("differs from" in w.value for w in at.warning)
    assert "compare:one_knob" not in [b.key for b in at.button]
