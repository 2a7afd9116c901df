""" "See it happen": under a page, the experiments that back its claims. One click runs one (its arms over its
seeds, in worker processes, inside the app's training cap); the arms are drawn with seed bands on the metrics
that matter, and the measured effect is stated in one sentence.

An experiment's job lives in `st.session_state["experiment:<name>"]`, so every page that offers it shows the same
run, and in the learner's state on the server (`ui.session.learner_state`), so a reload finds it. A request the run
store has answered before is answered from it at once, labelled with when it was recorded, with *Re-run live* (train
it again) and *New seeds* (the next seeds the store has no runs of). The charts are read from the run store, as on
the Compare page; while a job is active they refresh in one `st.fragment(run_every=…)`.
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path

import pandas as pd
import streamlit as st

from rl_core.config import RunConfig
from rl_core.engine.sft import default_cache_dir, warm_starts_to_build
from rl_core.experiments import EXPERIMENTS, Arm, Experiment
from rl_core.experiments._measures import mean_over_steps
from rl_core.experiments.runner import (
    arm_variant,
    effect_sentence,
    past_run_seconds,
    plain_verdict,
    plan_experiment,
    seed_effects,
    shared_departures,
    summarise_effects,
    unused_seeds,
)
from rl_core.messages import brief
from rl_core.numbers import number
from rl_core.runs.limits import contention, estimated_warm_start_seconds
from rl_core.runs.reuse import every_run_reusable
from rl_core.runs.store import RunStore, StoredRun, StoreError
from rl_core.runs.sweep import batch_count, default_workers, warm_start_kind
from ui.compare import CURVE_UNITS, CURVES, PLOT_CONFIG, band_figure
from ui.experiment_jobs import ExperimentJob, ExperimentSnapshot
from ui.jobs import reference_seconds, time_left
from ui.knobs import knob_text
from ui.lab import training_slots
from ui.limits import check_learner, check_runs
from ui.session import learner_state, session_token, session_worker_cap

REFRESH_SECONDS = 1.0
# The arm table and "What happened" read each metric from the mean of its first START_STEPS steps to the mean
# of its last END_STEPS (fewer in a short run: `end_window`).
START_STEPS, END_STEPS = 5, 10
# Titles of the record keys experiments chart beyond the Compare page's curves (`CURVES`).
RECORD_TITLES = {
    **CURVES,
    "advantage_first_token": "Credit (advantage) given to each answer's first token",
    "advantage_last_token": "Credit (advantage) given to each answer's last token",
    "advantage_std": "Spread of the advantages over tokens (std)",
    "approx_kl": "KL to π_old over a step's updates (k2 per token)",
    "beta": "β, the KL coefficient",
    "clip_frac_tokens": "Share of tokens the clip stops from learning (GSPO: every token of a clipped answer)",
    "clip_frac_high": "Share of tokens the upper clip bound stops from rising further",
    "dynamic_sampling_rounds": "Sampling rounds per step",
    "equal_group_weight_share": "How much of the push goes to groups whose answers all scored the same",
    "explained_variance": "Critic's explained variance",
    "grad_norm": "Size of the policy gradient (its norm, before clipping)",
    "kl_k1_neg_frac": "Share of tokens where the k1 estimate of the KL is negative",
    "kl_k1_std": "Spread of k1 over tokens (std)",
    "kl_k2_bias": "k2's mean error against the exact KL",
    "kl_k3_std": "Spread of k3 over tokens (std)",
    "kl_sequence": "KL estimate summed over each response",
    "logps/chosen": "log π_θ(y_w|x) of the chosen responses (DPO's training pairs)",
    "logps/rejected": "log π_θ(y_l|x) of the rejected responses (DPO's training pairs)",
    "response_length_correct": "Length of right answers (tokens)",
    "response_length_incorrect": "Length of wrong answers (tokens)",
    "rollout_is_capped_frac": "Share of importance weights cut at the cap",
    "rollout_corr/kl": "KL between the sampler and the trainer",
    "silenced_frac": "Share of tokens that should learn (Â ≠ 0) but get no gradient",
    "silenced_rare_frac": "Share of tokens that are rare (π_old < 0.1), should learn and get no gradient",
    "skewed_group_weight_ratio": "Push on near-solved or near-failed prompts ÷ push on evenly split ones",
    "teacher_kl": "KL to the teacher, k1 on the sampled tokens",
    "truncated_frac": "Share of answers cut off at the length limit",
    # Counted on a step's first sample: with dynamic sampling, before its dropped groups are refilled.
    "zero_adv_group_frac": "Share of groups whose answers all got the same reward (they teach nothing)",
}


# The y axis title of each record key the experiments chart.
RECORD_UNITS = {
    **CURVE_UNITS,
    "advantage_first_token": "advantage",
    "advantage_last_token": "advantage",
    "advantage_std": "advantage",
    "approx_kl": "nats per token",
    "beta": "β",
    "clip_frac_high": "share of tokens",
    "clip_frac_tokens": "share of tokens",
    "dynamic_sampling_rounds": "rounds",
    "equal_group_weight_share": "share of Σ|Â|",
    "explained_variance": "explained variance",
    "grad_norm": "‖ĝ‖",
    "kl_k1_neg_frac": "share of tokens",
    "kl_k1_std": "nats",
    "kl_k2_bias": "nats per token",
    "kl_k3_std": "nats",
    "kl_sequence": "nats per response",
    "logps/chosen": "nats per response",
    "logps/rejected": "nats per response",
    "response_length_correct": "tokens",
    "response_length_incorrect": "tokens",
    "rollout_is_capped_frac": "share",  # of tokens or of responses, as rollout_is_level says
    "rollout_corr/kl": "nats per token",
    "silenced_frac": "share of tokens",
    "silenced_rare_frac": "share of tokens",
    "skewed_group_weight_ratio": "ratio",
    "teacher_kl": "nats per token",
    "truncated_frac": "share of responses",
    "zero_adv_group_frac": "share of groups",
}


def record_title(key: str) -> str:
    """A chart or column title for a record key: readable where the key is known, the key itself otherwise."""
    return RECORD_TITLES.get(key, key)


def experiments_for(page: str) -> list[Experiment]:
    return [e for e in EXPERIMENTS.values() if page in e.pages]


def see_it_happen(page: str) -> None:
    """The page's experiments, each with its claim, a Run button and, once run, its charts and effect."""
    experiments = experiments_for(page)
    if not experiments:
        return
    st.header("See it happen", anchor="see-it-happen")
    st.caption(
        "Each experiment trains two or more arms that differ only in the knobs the claim is about, over "
        "several seeds, side by side. Lines are the mean over seeds, bands span the lowest to the highest "
        "seed."
    )
    for experiment in experiments:
        job = _job(experiment)
        _controls(page, experiment, job)
        if job is not None and job.active:
            st.fragment(run_every=REFRESH_SECONDS)(_live)(page, experiment)
        elif job is not None:
            _results(page, experiment, job.snapshot())


def _arm_knobs(experiment: Experiment, arm: Arm) -> str:
    """The arm's values of the knobs in which the arms differ, e.g. `epsilon_high` 0.28."""
    return ", ".join(f"`{k}` {knob_text(k, v)}" for k, v in arm_variant(experiment, arm).items())


def _controls(page: str, experiment: Experiment, job: ExperimentJob | None) -> None:
    st.subheader(experiment.title)
    labels = [f"**{arm.label}**" for arm in experiment.arms]
    st.markdown(
        f"**Claim.** {experiment.plain or experiment.title}  \nRun trains {labels[0]} and "
        f"{' and '.join(labels[1:])} side by side on {len(experiment.seeds)} seeds, {experiment.steps} steps "
        "each, alike in everything else."
    )
    with st.expander("How sure are we? The claim in full, its measure, seed sets and history"):
        st.markdown(f"{experiment.claim}  \n*Source:* {experiment.source}")
        arms = " · ".join(f"**{arm.label}** ({_arm_knobs(experiment, arm)})" for arm in experiment.arms)
        st.caption(
            f"Arms: {arms}, differing only in {', '.join(f'`{k}`' for k in experiment.knobs)}. Task "
            f"`{experiment.task}`, model `{experiment.model}`, {experiment.steps} steps, seeds "
            f"{', '.join(map(str, experiment.seeds))}. Measured: {experiment.metric} "
            f"(expected {experiment.expected})."
        )
        settings = shared_departures(experiment)
        if settings:
            st.caption(
                "Every arm also sets, unlike its preset: "
                + ", ".join(f"`{k}` {knob_text(k, v)}" for k, v in settings.items())
                + "."
            )
    if job is not None and tuple(job.seeds) != tuple(experiment.seeds):  # New seeds, or a request with others
        st.caption(f"The runs below: seeds {', '.join(map(str, job.seeds))}.")
    active = job is not None and job.active
    planned = None if active else [arm_run.planned.run for arm_run in plan_experiment(experiment)]
    refusal = None if active else _refusal(planned)
    if refusal:
        st.warning(f"This experiment cannot run now: {refusal}", icon=":material/block:")
    # A row that wraps, each button as wide as its label: columns put a column's width between Run and Stop.
    buttons = st.container(horizontal=True)
    key = f"{page}:experiment:{experiment.name}"
    buttons.button(
        "Run",
        key=f"{key}:run",
        type="primary",
        disabled=active or refusal is not None,
        on_click=_start,
        args=(experiment,),
        help=f"Train {len(experiment.arms) * len(experiment.seeds)} runs, or show them at once if this "
        "server has recorded them; a run of the page's lab or of another learner may make it wait its "
        "turn.",
    )
    buttons.button(
        "Stop",
        key=f"{key}:stop",
        disabled=not active,
        on_click=job.stop if active else None,
        help="End every run after its current step.",
    )
    if job is not None and not active and job.snapshot().recorded:
        buttons.button(
            "Re-run live",
            key=f"{key}:rerun",
            disabled=refusal is not None,
            on_click=_start,
            args=(experiment,),
            kwargs={**job.plan_options, "seeds": list(job.seeds), "fresh": True},
            help="Train these runs again and watch them learn, instead of the recorded ones.",
        )
        buttons.button(
            "New seeds",
            key=f"{key}:new_seeds",
            disabled=refusal is not None,
            on_click=_start_new_seeds,
            args=(experiment, job),
            help="Run the experiment on seeds this server has not run it with yet.",
        )
    refused = st.session_state.pop(f"experiment:{experiment.name}:error", None)
    if refused:
        st.error(refused)
    if not active:
        st.caption(_duration(experiment, planned))


def experiment_workers() -> int:
    # A panel's experiment counts against the server's training cap and the session's worker cap, like a sweep.
    return min(default_workers(), training_slots().limit, session_worker_cap())


def _duration(experiment: Experiment, planned: list[RunConfig]) -> str:
    """How long Run (its `planned` runs) will take on this server: no time when the server has every one of them
    (recorded, or training now: Run answers from those); from this experiment's earlier runs here when there are
    some, else from the step times measured on the reference CPU (`reference_seconds`). Not from the
    server's live trainings' speed: a single one of them on a busy machine would swing it tenfold, and they step in
    the app's own process, beside its redraws, where an experiment's runs have worker processes."""
    try:
        store = RunStore(recover=False)
        if every_run_reusable(store, planned):
            return "This server has these runs, recorded or training now: Run shows them without training them again."
        past = past_run_seconds(experiment, store)
    except StoreError:
        past = []
    at_once = min(experiment_workers(), len(planned))
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    slower = contention(load, cores, at_once)
    busy = (
        f" At this server's load now (load average {load:.1f} on {cores} cores) that is {slower:.1f} times "
        "as long as on an idle machine."
        if slower > 1
        else ""
    )
    if past:
        # The runs of a batch train together, each as long as the batch: time the batches, not the runs.
        batches = batch_count(planned)
        at_once = min(at_once, batches)
        seconds = batches * statistics.median(past) / at_once * slower
        return (
            f"About {_seconds(seconds)} for {len(planned)} runs, trained as {batches} batches, {at_once} at a "
            f"time (a batch as long as the median of its {len(past)} earlier runs on this server).{busy}"
        )
    seconds = reference_seconds(planned, at_once) * slower
    # The step times are the server limits' estimate, meant not to fall short: on the reference CPU (2 cores,
    # bench/experiments_speed.py) every experiment at its 8 seeds took 1.0 to 7.4 times less (critic_from_rm
    # 14.3 s against 14.6, dynamic_sampling 23.2 s against 171), so the caption gives it as a bound.
    # A first run also trains the SFT warm starts the cache lacks (a first distillation run took 54 s where its
    # steps alone came to 6 s, its teachers untrained): counted apart, shared among the workers as the runs are.
    warm = estimated_warm_start_seconds(_warm_starts_to_build(experiment.name, str(default_cache_dir()))) / at_once
    warm *= slower
    built = (
        f" Before them, about {_seconds(warm)} to train the SFT warm starts (policies, teachers) this server has "
        "not cached yet."
        if warm
        else " Every SFT warm start they start from is cached on this server."
    )
    return (
        f"Not run on this server yet: up to about {_seconds(seconds)} for {len(planned)} runs, {at_once} at a "
        "time (each run's steps at the step times measured on the reference CPU: there the experiments took "
        f"from about this long down to a seventh of it).{busy}{built}"
    )


# How long a page trusts its look at the cache for an experiment's warm starts: a look costs about 0.1 s (a
# tokenizer and a model's identity per seed), and every page with the experiment redraws it in every full run.
WARM_START_LOOK_SECONDS = 30


@st.cache_data(ttl=WARM_START_LOOK_SECONDS, show_spinner=False)
def _warm_starts_to_build(name: str, cache: str) -> list[tuple[str, int]]:
    """The SFT warm starts of experiment `name`'s runs that the cache folder `cache` lacks, each once however many
    runs start from it."""
    asked, builds = set(), {}
    for run in (arm_run.planned.run for arm_run in plan_experiment(EXPERIMENTS[name])):
        teacher = getattr(run.algo, "teacher_model", None), getattr(run.algo, "teacher_sft_steps", None)
        if (warm_start_kind(run), run.seed, teacher) in asked:
            continue
        asked.add((warm_start_kind(run), run.seed, teacher))
        for build in warm_starts_to_build(run, Path(cache)):  # (model, steps): a policy's and a teacher's differ
            builds[warm_start_kind(run), run.seed, build] = build
    return list(builds.values())


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _refusal(planned: list[RunConfig]) -> str | None:
    """Why the server's limits refuse the experiment's `planned` runs now (how many, how long, this learner's
    hour)."""
    try:
        check_runs(planned)
        check_learner()
    except ValueError as error:
        return brief(str(error))
    return None


def _start(experiment: Experiment, **options) -> None:
    """Start the experiment (`options`: ExperimentRun's seeds, fresh); a request answered from the store is waited
    for (it takes well under REFRESH_SECONDS), so the rerun after the click draws the answer."""
    job = ExperimentJob(experiment, training_slots(), workers=experiment_workers(), session=session_token(), **options)
    # Kept for the learner as well as the session: a reload finds the experiment, still training or done.
    st.session_state[f"experiment:{experiment.name}"] = learner_state()[f"experiment:{experiment.name}"] = job.start()
    if job.from_store:
        job.join(REFRESH_SECONDS)


def _job(experiment: Experiment) -> ExperimentJob | None:
    """The learner's latest run of this experiment: this session's, else one started before a reload or in
    another tab."""
    key = f"experiment:{experiment.name}"
    if key not in st.session_state and key in learner_state():
        st.session_state[key] = learner_state()[key]
    return st.session_state.get(key)


def _start_new_seeds(experiment: Experiment, job: ExperimentJob) -> None:
    """`job`'s request on as many seeds as it had, the first after them that the store has no runs of."""
    try:
        seeds = unused_seeds(
            experiment, RunStore(recover=False), len(job.seeds), after=max(job.seeds), **job.plan_options
        )
    except StoreError as error:
        st.session_state[f"experiment:{experiment.name}:error"] = brief(str(error))
        return
    _start(experiment, **job.plan_options, seeds=seeds)


def _live(page: str, experiment: Experiment) -> None:
    """An active experiment, redrawn every second; one full rerun when it ends."""
    job = _job(experiment)
    _results(page, experiment, job.snapshot())
    if not job.active:
        st.rerun()  # re-enables the Run button and stops this refresh


def _results(page: str, experiment: Experiment, snapshot: ExperimentSnapshot) -> None:
    seeds = "" if snapshot.seeds == experiment.seeds else f" (seeds {', '.join(map(str, snapshot.seeds))})"
    st.markdown(f"**{experiment.title}**{seeds}: {_status_line(snapshot)}")
    if snapshot.error:
        st.error(f"The experiment failed: {brief(snapshot.error)}")
    if not snapshot.arms:
        return
    found = arm_records(experiment, snapshot)
    if found is None:
        return
    runs, records, groups = found
    done = sum(run.steps_done for run in runs)
    total = sum(run.steps_total for run in runs)
    left = time_left(snapshot.training_for, done, total) if snapshot.active and snapshot.training_for else None
    st.progress(
        done / total if total else 0.0,
        text=f"{done} of {total} steps" + (f" · about {_seconds(left)} left" if left is not None else ""),
    )
    if snapshot.active and done == total:  # every step trained: the runs' evaluations and the summary remain
        st.caption("Every step is trained; the runs' last evaluations and the summary are being written.")
    elif snapshot.active and any(records for seeds in groups.values() for records in seeds):
        counts = ", ".join(
            f"{label} {sum(bool(records) for records in seeds)} of {len(seeds)}" for label, seeds in groups.items()
        )
        st.caption(
            f"Still training, so each line averages only the seeds with steps so far ({counts}), and a band "
            "needs two. Early steps can favour either arm; the effect is measured once every run has "
            "finished."
        )
    charts = chart_panels(experiment)
    for row in range(0, len(charts), 2):  # two charts a row, as on the Compare page
        for column, (title, keys) in zip(st.columns(2), charts[row : row + 2]):
            drawn = band_figure(
                keys,
                groups,
                title,
                RECORD_UNITS[keys[0]],
                log=keys[0] in experiment.log_charts,
                names={key: record_title(key) for key in keys},
            )
            column.plotly_chart(drawn, config=PLOT_CONFIG, key=f"{page}:experiment:{experiment.name}:{'+'.join(keys)}")
    finished = {}
    for run in runs:
        if run.status == "finished":
            finished.setdefault(run.seed, {})[snapshot.arms[run.id]] = records[run.id]
    if snapshot.status == "finished":
        summary = summarise_effects(experiment, seed_effects(experiment, finished))
        st.success(plain_verdict(experiment, summary))
        with st.expander("How sure are we? The measured effect, seed by seed"):
            st.markdown(effect_sentence(experiment, summary))
            st.markdown(f"**What happened.** {what_happened(experiment, groups)}")
            st.dataframe(
                _arm_table(experiment, groups), hide_index=True, key=f"{page}:experiment:{experiment.name}:table"
            )
            steps = max((run.steps_total for run in runs), default=0)
            st.caption(
                f"Each charted metric from its mean over the first {START_STEPS} steps to its mean over the "
                f"last {end_window(steps)}, averaged over seeds."
            )
        # The server's folder stays unnamed (a learner has no use for a server path); the command writes its own.
        st.caption(
            f"The same on your own machine, with every record and summary.json in DIR: "
            f"`python -m rl_core experiment {experiment.name} --out DIR`."
        )


def chart_panels(experiment: Experiment) -> list[tuple[str, tuple[str, ...]]]:
    """The experiment's charts as drawn, (title, keys) each: a key on its own, or the keys `together` puts on one
    chart, in the place of the first of them."""
    together = {key: (title, keys) for title, keys in experiment.together.items() for key in keys}
    panels = [together.get(key, (record_title(key), (key,))) for key in experiment.charts]
    return list(dict.fromkeys(panels))


def arm_records(
    experiment: Experiment, snapshot: ExperimentSnapshot
) -> tuple[list[StoredRun], dict[int, list[dict]], dict[str, list[list[dict]]]] | None:
    """The experiment's runs in the store, their records by run id, and arm label → each seed's records; None (the
    store's message drawn) when the run store cannot be opened."""
    try:
        store = RunStore(recover=False)
    except StoreError as error:
        st.error(brief(str(error)))
        return None
    runs = store.runs(list(snapshot.arms))
    records = {run.id: store.steps(run.id) for run in runs}
    groups: dict[str, list[list[dict]]] = {arm.label: [] for arm in experiment.arms}
    for run in runs:
        groups[snapshot.arms[run.id]].append(records[run.id])
    return runs, records, groups


def _status_line(snapshot: ExperimentSnapshot) -> str:
    if snapshot.status == "queued":
        place = snapshot.place or 1
        return (
            f"queued, {_ordinal(place)} in line for the training slots ({snapshot.running_elsewhere} in use by "
            "other trainings); it starts by itself."
        )
    if snapshot.status == "finished" and snapshot.recorded:
        return f"recorded {snapshot.recorded} on this server."
    if snapshot.status == "finished" and snapshot.summary:
        return f"finished in {snapshot.summary['wall_time']:.0f} s."
    return {
        "training": "training…",
        "finished": "finished.",
        "stopped": "stopped; the effect needs every run.",
        "failed": "failed.",
    }[snapshot.status]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def end_window(steps: int) -> int:
    """How many of a run's last steps are its end: the last END_STEPS, but none of the first START_STEPS (in a
    10-step run the last 10 would be the whole run, and a gap that closes by step 6 would read as half open); a run
    of START_STEPS or fewer is one window."""
    return min(END_STEPS, steps - START_STEPS) if steps > START_STEPS else steps


def _start_and_end(seeds: list[list[dict]], key: str) -> tuple[float, float]:
    """A metric at the start (its mean over the first START_STEPS steps) and at the end (the last `end_window`),
    over the seeds."""
    return (
        mean_over_steps([r for records in seeds for r in records[:START_STEPS]], key),
        mean_over_steps([r for records in seeds for r in records[-end_window(len(records)) :]], key),
    )


def _arm_table(experiment: Experiment, groups: dict[str, list[list[dict]]]) -> pd.DataFrame:
    """Per arm: each charted metric at the start and at the end, mean over seeds."""
    rows = []
    for label, seeds in groups.items():
        row = {"arm": label, "seeds": len(seeds)}
        for key in experiment.charts:
            start, end = _start_and_end(seeds, key)
            row[record_title(key)] = "—" if math.isnan(end) else f"{number(start)} → {number(end)}"
        rows.append(row)
    return pd.DataFrame(rows)


def _movement(start: float, end: float) -> str:
    """How a metric moved, in words; a change within 5 % of its size is "stayed"."""
    if math.isnan(start) or math.isnan(end):
        return "was not measured"
    if abs(end - start) <= 0.05 * max(abs(start), abs(end)):
        return f"stayed near {number(end)}"
    return f"{'rose' if end > start else 'fell'} from {number(start)} to {number(end)}"


def what_happened(experiment: Experiment, groups: dict[str, list[list[dict]]]) -> str:
    """The experiment's first two charted metrics in words, arm by arm, start (the first START_STEPS steps) to end
    (`end_window`), averaged over seeds: what the verdict's number came from."""
    return " ".join(
        f"{record_title(key)} "
        + "; ".join(f"{_movement(*_start_and_end(seeds, key))} with {label}" for label, seeds in groups.items())
        + "."
        for key in experiment.charts[:2]
    )


def experiment_list() -> None:
    """Every experiment of the lab, for the Compare page: what it claims in plain words and where to run it (the
    claim in full, with its measure and seed sets, is on those pages under "How sure are we?")."""
    st.header("Experiments")
    st.caption(
        "One-click reproductions of the papers' claims. Each runs from the pages listed (the \"See it "
        'happen" panel, where "How sure are we?" gives each claim in full) or from a terminal with '
        "`python -m rl_core experiment NAME --out DIR`."
    )
    # A static table wraps its cells: a claim is a sentence or two, which a data grid's one-line cells would cut.
    st.table(
        pd.DataFrame(
            [
                {
                    "experiment": e.name,
                    "title": e.title,
                    "claim": e.plain or e.claim,
                    "arms": " · ".join(a.label for a in e.arms),
                    "differing knobs": ", ".join(e.knobs),
                    "task": e.task,
                    "pages": ", ".join(e.pages),
                }
                for e in EXPERIMENTS.values()
            ]
        ).set_index("experiment")
    )
