"""The "See it happen" panel under AppTest: it lists a page's experiments, draws a finished experiment's arms with
seed bands and states the effect the runner measured, tells a queued learner its place, and its Run button starts
the experiment inside the training cap. A request the store has recorded answers without a training slot, labelled
with when it was recorded, and offers Re-run live and New seeds. The Compare page lists every experiment.

AppTest has no browser, so `run_every` never fires: a finished job is placed in session state, as the page keeps
it, after its thread has really trained (a short version: one seed, two steps).
"""

import dataclasses
import json
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from rl_core.experiments import EXPERIMENTS, get_experiment
from rl_core.experiments.runner import (
    SUMMARY_FILE,
    past_run_seconds,
    plain_verdict,
    plan_experiment,
    records_file,
    shared_departures,
)
from rl_core.runs.limits import SFT_STEP_SECONDS
from rl_core.runs.records import read_jsonl
from rl_core.runs.reuse import recorded_when, run_key
from rl_core.runs.store import RunStore
from ui.compare import band_figure
from ui.experiment_jobs import ExperimentJob
from ui.experiments_panel import (
    RECORD_UNITS,
    chart_panels,
    end_window,
    experiments_for,
    record_title,
    what_happened,
)
from ui.jobs import TrainingSlots, planned_seconds_left
from ui.lab import training_slots

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 120
NAME = "gspo_clipping"


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))


def panel(page: str) -> AppTest:
    return AppTest.from_string(
        f"from ui.experiments_panel import see_it_happen\nsee_it_happen({page!r})\n", default_timeout=TIMEOUT
    )


def test_a_page_lists_exactly_the_experiments_that_name_it():
    page = get_experiment(NAME).pages[0]
    at = panel(page).run()
    assert not at.exception, at.exception
    titles = [h.value for h in at.subheader]
    assert titles == [e.title for e in experiments_for(page)] and get_experiment(NAME).title in titles
    assert at.button(key=f"{page}:experiment:{NAME}:run").disabled is False
    assert at.button(key=f"{page}:experiment:{NAME}:stop").disabled is True
    empty = panel("no_such_page").run()
    assert not empty.exception and not empty.header, "a page without experiments shows no panel"


def test_each_arm_states_its_values_of_the_knobs_the_arms_differ_in():
    experiment = get_experiment("gspo_clipping")
    at = panel(experiment.pages[0]).run()
    captions = " ".join(c.value for c in at.caption)
    # GSPO's preset clips sequence ratios at 1 ± 3e-4 / 4e-4 (the spec's GSPO preset), GRPO's token ratios at 0.2.
    assert (
        "**GRPO** (`policy_loss` clip, `epsilon` 0.2, `epsilon_high` 0.2) · **GSPO** (`policy_loss` gspo, "
        "`epsilon` 0.0003, `epsilon_high` 0.0004), differing only in"
    ) in captions


def test_the_panel_names_what_every_arm_sets_away_from_its_presets_defaults():
    experiment = get_experiment("rloo_leave_one_out")
    # RLOO's preset samples 16 prompts × 4 with β 0.05 as k1 in the reward; the experiment, 32 × 2 with β 0.1 as k3 in
    # the loss. The rest of what it spells out (vanilla loss, one update, lr 1e-3, …) is the preset's own.
    assert shared_departures(experiment) == {
        "prompts_per_step": 32,
        "num_generations": 2,
        "beta": 0.1,
        "kl_estimator": "k3",
        "kl_in": "loss",
    }
    captions = " ".join(c.value for c in panel(experiment.pages[0]).run().caption)
    assert (
        "Every arm also sets, unlike its preset: `prompts_per_step` 32, "
        "`num_generations` 2, `beta` 0.1, `kl_estimator` k3, `kl_in` loss."
    ) in captions
    # Run fields count too where they leave a run's defaults: dynamic_sampling's warm start. Its 8 prompts a step are
    # DAPO's preset's own; its groups of 4 are not (the preset samples 8).
    assert shared_departures(get_experiment("dynamic_sampling")) == {
        "num_generations": 4,
        "sft_steps": 500,
        "demo_noise": 0.8,
    }
    assert shared_departures(get_experiment("gspo_clipping")) == {}, "GRPO's and GSPO's presets as they are"


def test_run_says_how_long_it_will_take_from_this_servers_earlier_runs_of_it(monkeypatch, tmp_path):
    monkeypatch.setenv("RLHF_LAB_MAX_SESSION_WORKERS", "1")  # one run at a time: the arithmetic below
    monkeypatch.setenv("RLHF_LAB_CACHE", str(tmp_path / "cache"))  # no warm start cached
    load = [0.0]  # an idle machine of 2 cores until the end
    monkeypatch.setattr(os, "getloadavg", lambda: (load[0], load[0], load[0]))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    experiment = get_experiment(NAME)  # 2 arms × 8 seeds
    first = " ".join(c.value for c in panel(experiment.pages[0]).run().caption)
    # A server whose trainings have measured nothing steps at the reference CPU's step times (speed 1).
    reference = planned_seconds_left([r.planned.run for r in plan_experiment(experiment)], 1, TrainingSlots(1))(0.0)
    shown = f"{reference:.0f} s" if reference < 90 else f"{reference / 60:.0f} min"
    assert (
        f"Not run on this server yet: up to about {shown} for 16 runs, 1 at a time (each run's steps at "
        "the step times measured on the reference CPU:"
    ) in first
    # Its 8 seeds' 200-step SFT warm starts of the tiny model, one at a time, at the measured SFT step time.
    warm = 8 * 200 * SFT_STEP_SECONDS
    assert (
        f"Before them, about {warm:.0f} s to train the SFT warm starts (policies, teachers) this server has not "
        "cached yet."
    ) in first
    # A live training that stepped twelve times slower than the reference (a busy machine) leaves it as it was.
    training_slots().observe_speed(12.0, 1.0)
    assert " ".join(c.value for c in panel(experiment.pages[0]).run().caption) == first
    store = RunStore()
    for label, seconds, status in (("GRPO", 10.0, "finished"), ("GSPO", 30.0, "finished"), ("GSPO", 500.0, "failed")):
        run_id = store.add_run(plan_experiment(experiment)[0].planned.run, f"{NAME}: {label}")
        store.start_run(run_id)
        store.finish_run(run_id, status)
        with store._write() as db:  # the durations these runs took
            db.execute("UPDATE runs SET started_at = 0, finished_at = ? WHERE id = ?", (seconds, run_id))
    other = store.add_run(plan_experiment(get_experiment("clip_higher"))[0].planned.run, "clip_higher: x")
    store.start_run(other)
    store.finish_run(other, "finished")
    assert sorted(past_run_seconds(experiment, store)) == [10.0, 30.0], "finished runs of this one only"
    # An arm's 8 seeds train as one batch (one program), each run as long as the batch: the median of 10 s and 30 s
    # for each of 2 batches, one at a time: 40 s.
    captions = " ".join(c.value for c in panel(experiment.pages[0]).run().caption)
    assert (
        "About 40 s for 16 runs, trained as 2 batches, 1 at a time (a batch as long as the median of its 2 "
        "earlier runs on this server)."
    ) in captions
    # On a loaded machine, load average 7 on 2 cores: the batch's process is one of 8 runnable on 2 cores, so
    # 40 s × (7 + 1) / 2 = 160 s, shown as 3 min.
    load[0] = 7.0
    captions = " ".join(c.value for c in panel(experiment.pages[0]).run().caption)
    assert (
        "About 3 min for 16 runs, trained as 2 batches, 1 at a time (a batch as long as the median of its 2 "
        "earlier runs on this server). At this server's load now (load average 7.0 on 2 cores) that is 4.0 "
        "times as long as on an idle machine."
    ) in captions


def test_run_says_it_answers_at_once_once_the_server_has_recorded_every_run():
    experiment = get_experiment(NAME)
    planned = [arm_run.planned.run for arm_run in plan_experiment(experiment)]
    store = RunStore()
    for run in planned[:-1]:
        run_id = store.add_run(run, NAME, key=run_key(run))
        store.start_run(run_id)
        store.finish_run(run_id, "finished")
    answers_at_once = "Run shows them without training them again"
    assert answers_at_once not in " ".join(c.value for c in panel(experiment.pages[0]).run().caption)  # one missing
    run_id = store.add_run(planned[-1], NAME, key=run_key(planned[-1]))
    store.start_run(run_id)
    store.finish_run(run_id, "finished")
    captions = " ".join(c.value for c in panel(experiment.pages[0]).run().caption)
    assert answers_at_once in captions and "About " not in captions and "Not run on this server" not in captions


def test_what_happened_puts_each_arms_start_and_end_in_words():
    experiment = dataclasses.replace(get_experiment(NAME), charts=("entropy", "clip_frac", "kl_k3"))
    steps = lambda values: [{"entropy": v, "clip_frac": 0.1} for v in values]  # noqa: E731
    # GRPO: seeds start at 1.0 and 1.2 (first 5 steps), end at 0.4 and 0.6 (last 10): 1.1 → 0.5.
    # GSPO: 1.0 → 1.02 over the seeds, within 5 %: "stayed". clip_frac is constant; kl_k3 is beyond the first two.
    groups = {
        "GRPO": [steps([1.0] * 5 + [0.4] * 10), steps([1.2] * 5 + [0.6] * 10)],
        "GSPO": [steps([1.0] * 5 + [1.02] * 10)],
    }
    assert what_happened(experiment, groups) == (
        "Token entropy fell from 1.1 to 0.5 with GRPO; stayed near 1.02 with GSPO. "
        f"{record_title('clip_frac')} stayed near 0.1 with GRPO; stayed near 0.1 with GSPO."
    )


def test_in_a_run_shorter_than_fifteen_steps_the_end_is_the_steps_after_the_start():
    # critic_from_rm trains 10 steps: "the last 10" would be the whole run, its start included, and a gap that
    # closes by step 6 would read as half open. First 5 steps at 1.0, the next 5 at 0.0: 1 → 0, not 1 → 0.5.
    experiment = dataclasses.replace(get_experiment(NAME), charts=("entropy", "clip_frac"))
    ten = [{"entropy": v, "clip_frac": 0.1} for v in [1.0] * 5 + [0.0] * 5]
    assert what_happened(experiment, {"GRPO": [ten]}).startswith("Token entropy fell from 1 to 0 with GRPO.")
    assert end_window(10) == 5 and end_window(15) == 10 and end_window(60) == 10
    assert end_window(7) == 2 and end_window(2) == 2, "a run of 5 steps or fewer is one window"


def test_every_charted_record_has_a_readable_title():
    untitled = {key for e in EXPERIMENTS.values() for key in e.charts if record_title(key) == key}
    assert untitled == set()


def test_a_finished_experiment_is_drawn_with_seed_bands_and_its_effect_stated():
    experiment = get_experiment(NAME)
    job = ExperimentJob(experiment, TrainingSlots(2), workers=2, seeds=[0, 1], steps=2, sft_steps=5).start()
    assert job.join(600) and job.snapshot().status == "finished", job.snapshot().error
    page = experiment.pages[0]
    at = panel(page)
    at.session_state[f"experiment:{NAME}"] = job
    at.run()
    assert not at.exception, at.exception
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert [c["layout"]["title"]["text"] for c in charts] == [title for title, _ in chart_panels(experiment)]
    for chart in charts:
        names = [trace.get("name") for trace in chart["data"] if trace.get("showlegend", True)]
        assert names == [arm.label for arm in experiment.arms]
        assert sum(trace.get("fill") == "tonexty" for trace in chart["data"]) == len(experiment.arms), "seed bands"
    # The sentence on the page is computed from the store; the runner's summary.json from its own pass.
    written = json.loads((job.out / SUMMARY_FILE).read_text())
    # The page opens with the verdict in plain words; the runner's sentence with every number sits under it, in
    # the "How sure are we?" expander.
    assert [s.value for s in at.success] == [plain_verdict(experiment, written)]
    assert at.success[0].value.startswith(f"{written['verdict'].capitalize()}")
    assert written["sentence"] in [m.value for m in at.markdown]
    assert any(e.label.startswith("How sure are we?") for e in at.expander)
    assert any(m.value.startswith("**What happened.** ") for m in at.markdown)
    assert any("finished in" in m.value for m in at.markdown)
    table = at.dataframe[0].value
    assert list(table["arm"]) == [arm.label for arm in experiment.arms] and list(table["seeds"]) == [2, 2]
    # two steps per run: the start (first 5 steps) and the end (last 10) are both the mean of all four records
    for arm in experiment.arms:
        runs = [read_jsonl(job.out / records_file(arm, seed)) for seed in (0, 1)]
        mean = sum(r[experiment.charts[0]] for records in runs for r in records) / 4
        cell = table.loc[table["arm"] == arm.label, record_title(experiment.charts[0])].item()
        assert cell == f"{mean:.3g} → {mean:.3g}"
    # The same runs drawn as if still training: the page says how many seeds each line holds and states no effect.
    midrun = SimpleNamespace(
        active=False, seeds=job.seeds, snapshot=lambda: dataclasses.replace(job.snapshot(), status="training")
    )
    at = panel(page)
    at.session_state[f"experiment:{NAME}"] = midrun
    at.run()
    assert not at.exception, at.exception
    # Every step of these runs is stored: what is left is their evaluations and the summary, and no effect yet.
    assert any(c.value.startswith("Every step is trained; the runs' last evaluations") for c in at.caption)
    assert not at.success and not any("seeds with steps so far" in c.value for c in at.caption)
    # One run a step short (as the store would say mid-run): each line averages the seeds it has so far.
    store = RunStore()
    with store._write() as db:
        db.execute("UPDATE runs SET steps_done = 1 WHERE id = ?", (min(job.snapshot().arms),))
    at.run()
    counts = ", ".join(f"{arm.label} 2 of 2" for arm in experiment.arms)
    assert any(f"seeds with steps so far ({counts})" in c.value for c in at.caption) and not at.success


def test_a_queued_learner_is_told_its_place():
    slots = TrainingSlots(2)
    release, held = threading.Event(), threading.Event()

    def other_training():
        with slots.hold(threading.Event()):
            held.set()
            release.wait(60)

    threading.Thread(target=other_training, daemon=True).start()
    assert held.wait(10)
    job = ExperimentJob(get_experiment(NAME), slots, workers=2).start()  # needs both slots: waits
    try:
        at = panel(get_experiment(NAME).pages[0])
        at.session_state[f"experiment:{NAME}"] = job
        at.run()
        assert not at.exception, at.exception
        status = " ".join(m.value for m in at.markdown)
        assert "queued, 1st in line for the training slots (1 in use by other trainings)" in status
        assert at.button(key=f"{get_experiment(NAME).pages[0]}:experiment:{NAME}:run").disabled
    finally:
        job.stop()
        release.set()
    assert job.join(30) and job.snapshot().status == "stopped"


def test_run_starts_the_experiment_and_stop_ends_it():
    page = get_experiment(NAME).pages[0]
    at = panel(page).run()
    at.button(key=f"{page}:experiment:{NAME}:run").click().run()
    job = at.session_state[f"experiment:{NAME}"]
    try:
        assert isinstance(job, ExperimentJob) and job.active
        assert not at.button(key=f"{page}:experiment:{NAME}:stop").disabled
        at.button(key=f"{page}:experiment:{NAME}:stop").click().run()
    finally:
        job.stop()
    assert job.join(120) and job.snapshot().status == "stopped"


def test_the_compare_page_lists_every_experiment():
    at = AppTest.from_file(str(ROOT / "app_pages" / "compare.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    table = next(frame.value for frame in at.table if "claim" in frame.value.columns)
    assert list(table.index) == list(EXPERIMENTS)
    # The claims in plain words: the full ones (seed sets, intervals, history) stay on the pages, one click further.
    assert list(table["claim"]) == [experiment.plain for experiment in EXPERIMENTS.values()]


def test_an_experiments_log_charts_are_among_its_charts_and_drawn_on_a_log_axis():
    for experiment in EXPERIMENTS.values():
        assert set(experiment.log_charts) <= set(experiment.charts), experiment.name
    assert get_experiment("kl_estimators").log_charts, "its near arm would be a flat line at 0"
    groups = {"arm": [[{"step": 1, "kl_exact": 0.005}, {"step": 2, "kl_exact": 2.5}]]}
    assert band_figure("kl_exact", groups, log=True).layout.yaxis.type == "log"
    assert band_figure("kl_exact", groups).layout.yaxis.type is None


def test_k1_and_k3_spreads_share_one_chart_arm_by_arm():
    experiment = get_experiment("kl_estimators")
    panels = chart_panels(experiment)
    keys = [key for _, shown in panels for key in shown]
    assert sorted(keys) == sorted(experiment.charts), "every key drawn once"
    title, together = next(panel for panel in panels if "kl_k1_std" in panel[1])
    assert together == ("kl_k1_std", "kl_k3_std") and len(panels) == len(experiment.charts) - 1
    groups = {arm.label: [[{"step": 1, "kl_k1_std": 0.1, "kl_k3_std": 0.015}]] for arm in experiment.arms}
    drawn = band_figure(
        together, groups, title, RECORD_UNITS["kl_k1_std"], log=True, names={key: record_title(key) for key in together}
    )
    # one curve per arm and estimator: the colour names the arm, the dash the estimator
    assert [(t.name, t.line.color, t.line.dash) for t in drawn.data] == [
        (f"{arm.label} · {record_title(key)}", colour, dash)
        for arm, colour in zip(experiment.arms, ("#1f77b4", "#d62728"))
        for key, dash in zip(together, ("solid", "dash"))
    ]
    assert [t.y[0] for t in drawn.data] == [0.1, 0.015, 0.1, 0.015] and drawn.layout.yaxis.type == "log"


def test_keys_charted_together_are_charts_of_one_unit_and_one_axis_type():
    for experiment in EXPERIMENTS.values():
        for keys in experiment.together.values():
            assert set(keys) <= set(experiment.charts), experiment.name
            assert len({RECORD_UNITS[key] for key in keys}) == 1, experiment.name
            assert len({key in experiment.log_charts for key in keys}) == 1, experiment.name


def test_every_experiment_chart_names_its_y_axis():
    for experiment in EXPERIMENTS.values():
        for key in experiment.charts:
            assert RECORD_UNITS.get(key), (experiment.name, key)
    groups = {"arm": [[{"step": 1, "kl_sequence": 0.5}]]}
    assert (
        band_figure("kl_sequence", groups, "KL", RECORD_UNITS["kl_sequence"]).layout.yaxis.title.text
        == "nats per response"
    )


def test_a_recorded_request_answers_at_once_with_re_run_live_and_new_seeds():
    experiment = get_experiment(NAME)
    options = {"seeds": [0], "steps": 2, "sft_steps": 5}
    trained = ExperimentJob(experiment, TrainingSlots(2), workers=2, **options).start()
    assert trained.join(600) and trained.snapshot().status == "finished" and trained.snapshot().recorded is None
    # Every slot is taken by another training: a request that needed one would wait for it.
    slots, release, held = TrainingSlots(1), threading.Event(), threading.Event()

    def other_training():
        with slots.hold(threading.Event()):
            held.set()
            release.wait(120)

    threading.Thread(target=other_training, daemon=True).start()
    assert held.wait(10)
    try:
        job = ExperimentJob(experiment, slots, workers=1, **options)
        assert job.from_store
        assert job.start().join(120), "it waited for a training slot"
    finally:
        release.set()
    snapshot = job.snapshot()
    runs = RunStore().runs(list(snapshot.arms))
    assert snapshot.status == "finished" and all(run.reused for run in runs)
    assert snapshot.recorded == recorded_when(run.finished_at for run in runs)
    page = experiment.pages[0]
    at = panel(page)
    at.session_state[f"experiment:{NAME}"] = job
    at.run()
    assert not at.exception, at.exception
    assert any(f"recorded {snapshot.recorded} on this server." in m.value for m in at.markdown)
    assert at.success, "the effect is stated as for a run trained now"
    assert "The runs below: seeds 0." in [c.value for c in at.caption]  # not the experiment's seeds 0 … 7
    at.button(key=f"{page}:experiment:{NAME}:new_seeds").click().run()
    new = at.session_state[f"experiment:{NAME}"]
    try:
        assert new is not job and new.seeds == (1,) and new.plan_options == {"steps": 2, "sft_steps": 5}
        assert not new.from_store
        assert "The runs below: seeds 1." in [c.value for c in at.caption]
    finally:
        new.stop()
    assert new.join(120)
    at.session_state[f"experiment:{NAME}"] = job
    at.run()
    at.button(key=f"{page}:experiment:{NAME}:rerun").click().run()
    rerun = at.session_state[f"experiment:{NAME}"]
    try:
        assert rerun.seeds == (0,) and rerun.options["fresh"] and not rerun.from_store
    finally:
        rerun.stop()
    assert rerun.join(120)
