"""Plotly figures of a run's step records, one table entry per chart; several runs can share a chart.

Figures are built from plain records, so they can be drawn for a live run, a finished one, or both overlaid.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from rl_core.config import GROUP_ESTIMATORS, AlgoConfig
from rl_core.formulas.loss_terms import LOSS_TERMS
from rl_core.numbers import number
from ui.labs.figures import log_scale
from ui.present import chart_layout

MAX_POINTS = 400  # per trace: enough to see the shape, small enough to redraw every second
LONG_TRACE = 30  # points from which a trace's markers are invisible (they would hide the line)
RUN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")


def _always(algo: AlgoConfig) -> bool:
    return True


@dataclass(frozen=True)
class Series:
    key: str  # the record field
    name: str
    colour: str | None = None  # a fixed colour where the meaning has one (correct = green), else by position
    dash: str | None = None  # on a chart of one run: a dash where the series often lies on another (success on reward)
    applies: Callable[[AlgoConfig], bool] = _always  # e.g. the dual-clip share only with a dual clip
    width: float = 1.8  # the line's; wider where another series often lies on it (reward under success)


CORRECT, INCORRECT = "#2ca02c", "#d62728"
NOISE_FLOOR = 1e-9  # |values| below this are float round-off of quantities that are exactly 0, e.g. KL(π ‖ π)
# Overlaid runs whose peaks differ this many times: on a linear axis the smaller run is a flat line near 0, in a
# tenth of the plot's height (seed 0, 30 steps: DAPO's β = 0 KL peaks at 3.97 nats, GRPO's β = 0.04 at 0.199), so
# such a chart switches to a log axis, as experiments do. The axis starts LOG_FLOOR times below the lower peak.
APART = 10
LOG_FLOOR = 100


def _clips_tokens(algo: AlgoConfig) -> bool:
    return algo.policy_loss in ("clip", "gspo_token")


def _clips_sequences(algo: AlgoConfig) -> bool:
    return algo.policy_loss == "gspo"


def _has_critic(algo: AlgoConfig) -> bool:
    return algo.advantage_estimator == "gae"


@dataclass(frozen=True)
class Chart:
    title: str
    series: tuple[Series, ...]
    caption: str
    unit: str  # the y axis title
    band: tuple[str, str] | None = None  # (mean, std) fields drawn as a shaded mean ± std band
    emphasise: Callable[[AlgoConfig], str | None] | None = None  # the field drawn thicker, e.g. the KL estimator in use
    applies: Callable[[AlgoConfig], bool] = _always  # a run whose algorithm lacks the quantity is left out
    notes: Callable[[AlgoConfig], str] | None = None  # a caption line that depends on the algorithm
    y_range: tuple[float, float] | None = None  # a fixed axis, where outliers would flatten everything else
    noise_floor: bool = False  # values within NOISE_FLOOR of 0 are drawn as 0
    log_when_apart: bool = False  # overlaid runs whose peaks differ APART-fold or more share a log axis
    # |value| on a log axis, each series at its own scale where their sizes differ by decades (k1's swings beside
    # k3's small values); the hover keeps the sign
    magnitude: bool = False


@dataclass(frozen=True)
class ChartRun:
    """One run as the charts see it: `tag` (e.g. "#3") names it in legends, `label` in full on hover."""

    label: str
    records: list[dict]
    algo: AlgoConfig
    tag: str = ""
    colour: str = RUN_COLOURS[0]


def run_colour(number: int) -> str:
    """A run's colour, fixed by its number, so it keeps it however the overlay is chosen."""
    return RUN_COLOURS[(number - 1) % len(RUN_COLOURS)]


def _kl_in_use(algo: AlgoConfig) -> str | None:
    """The estimator the run optimises with, or None when no KL term acts (β = 0 without an adaptive target)."""
    return f"kl_{algo.kl_estimator}" if algo.beta > 0 or algo.target_kl is not None else None


def _teacher_per_token(algo: AlgoConfig) -> bool:
    """On-policy distillation's policy-gradient form: the teacher's −k is added to every token's advantage."""
    return algo.teacher_model is not None and algo.use_policy_gradient


def _advantage_note(algo: AlgoConfig) -> str:
    if _teacher_per_token(algo):
        return (
            "Per token: the teacher's signal log π_T − log π_θ (minus k1) is added to each sampled token's "
            + ("advantage from the task's reward" if algo.use_task_rewards else "advantage, the only signal")
            + ". Its mean is minus the KL to the teacher, so it sits below 0, far below where the teacher rules "
            "a sampled token out."
        )
    if algo.advantage_estimator in ("reinforce_pp", "reinforce_pp_baseline") or algo.whiten_advantages:
        return "Whitened over the batch: mean 0 and std 1 by construction, so watch the extremes."
    if _centred_per_response(algo):
        # The mean drawn is over tokens: a response weighs by its length, so unequal lengths move it off 0.
        return (
            "One advantage per response, centred over the responses of each group (or of the batch): the mean "
            "drawn here is over tokens, so it is 0 only where the responses are equally long, and negative "
            "when the wrong ones run longer. Watch the spread and the extremes."
        )
    if algo.advantage_estimator in GROUP_ESTIMATORS:
        return (
            f"Not centred per response (adv_norm_mean = {algo.adv_norm_mean}, adv_norm_std = "
            f"{algo.adv_norm_std}): a mean away from 0 is expected."
        )
    if algo.advantage_estimator == "gae":
        return "GAE advantages come from the critic: a mean far from 0 means its values are biased."
    return "Without a baseline every advantage of a rewarded response is positive: compare with the baseline on."


def _returns_are_the_reward(algo: AlgoConfig) -> bool:
    """The critic's target at every token is its response's final reward: γ = λ_critic = 1 (GAE with λ = 1 is the
    Monte-Carlo return) and no per-token KL penalty in the reward."""
    return (
        algo.lam_critic == 1
        and algo.gamma == 1
        and (algo.kl_in == "loss" or (algo.beta == 0 and algo.target_kl is None))
    )


# Measured on the GRPO page's default run (caesar, tiny model, 50 steps), seeds 0, 1 and 2, steps 11–50.
K3_SKEW = (
    "k3 is unbiased but skewed: the tokens that would lift a batch's mean (π_ref far above π_θ) are seldom sampled. "
    "On the GRPO page's default run (seeds 0–2, steps 11–50) k3 read below the exact KL on 32–34 of 40 steps, "
    "about half of it at the median step, and 2–7 times it on a few, so its mean over those steps stayed close "
    "(0.27, 0.19 and 0.29 nats against 0.28, 0.28 and 0.26)."
)


def _explained_variance_note(algo: AlgoConfig) -> str:
    if not _returns_are_the_reward(algo):
        # Measured on the PPO page's default run (caesar, tiny model, 50 steps), seeds 0, 1 and 2.
        return (
            "Why it stays near 0: on the PPO page's default run (caesar, 50 steps, seeds 0–2) the last ten "
            "steps averaged −0.16, +0.17 and +0.05, the highest step reached +0.26 and the lowest −9.2, while "
            "success rose to 0.93–0.97. The critic loss falls all the same: as success nears 1 the returns "
            "themselves vary less, which lowers any critic's squared error; explained variance divides that "
            "out. In 50 steps this critic learns about the batch's mean return, not which answers are right."
        )
    # Measured on the VAPO page's default run (caesar, tiny model, seed 0, 10 steps), every critic minibatch of it.
    return (
        "Why it stays near 0 here: every token's return is its response's final reward (γ = λ_critic = 1, no "
        "KL in the reward), and the critic predicts about the batch's mean reward at every token. On the "
        "default task (seed 0, 10 steps, with 20 and with 0 pretraining batches) its values spread over a "
        "batch's tokens with a fifth of the returns' standard deviation (median ratios 0.15 and 0.20), and even "
        "at the end-of-answer token, whose state already holds the deciding last letter, its explained "
        "variance stayed between −0.14 and +0.22."
    )


def _centred_per_token(algo: AlgoConfig) -> bool:
    """Advantages with mean 0 over the batch's tokens: whitened, or returns less their token mean."""
    if _teacher_per_token(algo):  # the teacher's per-token signal is added after any centring
        return False
    return (
        algo.whiten_advantages
        or algo.advantage_estimator in ("reinforce_pp", "reinforce_pp_baseline")
        or (algo.advantage_estimator == "reward_to_go" and algo.use_baseline and algo.baseline == "batch_mean")
    )


def _centred_per_response(algo: AlgoConfig) -> bool:
    """One advantage per response, with mean 0 over the responses of each group (or of the batch)."""
    if algo.whiten_advantages or _teacher_per_token(
        algo
    ):  # whitening re-centres over tokens, which weighs a response by its length
        return False
    if algo.advantage_estimator == "grpo":  # b_i, then a divisor s_i that must be the same across a centring
        return algo.adv_norm_mean in ("group", "leave_one_out") or (
            algo.adv_norm_mean == "batch" and algo.adv_norm_std != "group"
        )
    return algo.advantage_estimator in ("dr_grpo", "rloo", "maxrl")


def policy_term_cancels(algo: AlgoConfig) -> bool:
    """Whether the policy term of a whole batch is exactly 0 at ρ = 1 (before the first update moves the policy).

    There PPO's clip and GSPO give each token `−A_t`, so the term is minus the advantages' mean as
    `loss_agg_mode` weighs them: 0 when they were centred with the same weights — per response under
    `seq-mean-token-mean`, per token under the other modes. Those weigh a response by its length, so
    advantages centred per response over unequal lengths do not cancel. Losses of `−w·A·log π_θ` (vanilla, CISPO,
    DPPO) mix in the log-probabilities, and SAPO's gate weighs A > 0 and A < 0 by 2/τ_pos and 2/τ_neg."""
    if algo.policy_loss not in ("clip", "gspo", "gspo_token"):
        return False
    if algo.loss_agg_mode == "seq-mean-token-mean":
        return _centred_per_response(algo)
    return _centred_per_token(algo)  # the other modes weigh every token alike (sums with a constant divisor)


def _loss_note(algo: AlgoConfig) -> str:
    if algo.policy_loss in ("vanilla", "cispo", "dppo_tv"):
        return (
            "This policy term is −w·A·log π_θ per token: its value mixes the advantages with the tokens' "
            "log-probabilities, far from 0 even with centred advantages (most negative when the tokens with "
            "A < 0 are unlikely), and says nothing about learning: watch the reward."
        )
    if policy_term_cancels(algo):
        return (
            f"Its advantages are centred with the weights {algo.loss_agg_mode} gives them, so the policy term "
            "of a whole batch is exactly 0 before the first update; a minibatch holds only part of the batch, "
            "and the ratios move off 1 after that update, so the term drawn sits near, not at, 0. A falling "
            "total says nothing about learning: watch the reward."
        )
    if algo.loss_agg_mode == "seq-mean-token-mean":
        reason = "its advantages are not centred response by response"
    elif _centred_per_response(algo):
        reason = (
            f"{algo.loss_agg_mode} weighs a response by its length, so advantages centred per response do "
            "not cancel over unequal lengths"
        )
    else:
        reason = "its advantages are not centred"
    return (
        f"The policy term is minus the advantages' mean as {algo.loss_agg_mode} weighs them (at ρ = 1"
        f"{', times 2/τ by the sign of A' if algo.policy_loss == 'sapo' else ''}), not 0 here: {reason}. Its size "
        "is not progress: watch the reward."
    )


CHARTS: tuple[Chart, ...] = (
    Chart(
        "Reward and success rate",
        (
            # Wide: on a task whose reward is 1 for a right answer and 0 otherwise, success lies on it, dashed.
            Series("reward_mean", "reward", applies=lambda algo: algo.use_task_rewards, width=4),
            # On-policy distillation trains on the teacher alone: the verifier's reward is measured, never used.
            Series(
                "reward_mean",
                "reward (measured, not trained on)",
                applies=lambda algo: not algo.use_task_rewards,
                width=4,
            ),
            Series("success_rate", "success rate", CORRECT, dash="dash"),
        ),
        "Look for: success climbing to 1. With a learned reward model, reward rising while success stalls is "
        "reward hacking. A run without task rewards (on-policy distillation) records the verifier's reward but "
        "never trains on it.",
        unit="reward / share",
    ),
    Chart(
        "Token entropy",
        (Series("entropy", "entropy"),),
        "Look for: a slide towards 0 (entropy collapse): every response in a group becomes the same and the "
        "group stops teaching anything.",
        unit="nats per token",
    ),
    Chart(
        "KL to the reference",
        (Series("kl_exact", "exact"), Series("kl_k1", "k1"), Series("kl_k2", "k2"), Series("kl_k3", "k3")),
        "Per-token KL(π_θ ‖ π_ref): exact over the vocabulary against the three sample estimators. Look for: how "
        "far the policy drifts from the SFT model, and which estimator tracks the exact value. " + K3_SKEW,
        unit="nats per token",
        emphasise=_kl_in_use,
        log_when_apart=True,
        notes=lambda algo: (
            "The estimator in the loss is drawn thick."
            if _kl_in_use(algo)
            else "β = 0: no KL term acts on this run; the curves only measure the drift."
        ),
    ),
    Chart(
        "KL to the teacher",
        (Series("teacher_kl_exact", "exact"), Series("teacher_kl", "k1 on the sampled tokens")),
        "Per-token KL(π_θ ‖ π_T) of the student to its teacher, exact over the vocabulary and k1 on the tokens the "
        "student sampled (minus the mean of the policy-gradient form's advantages). Look for: a fall towards 0 as "
        "the student takes on the teacher's choices where it samples.",
        unit="nats per token",
        applies=lambda algo: algo.teacher_model is not None,
    ),
    Chart(
        "KL guard",
        (Series("kl_capped_frac", "capped at 10"),),
        "Share of tokens whose KL term in the loss the guard caps (π_θ < π_ref and k > 10: no gradient beyond). "
        "Look for: 0 near the reference; a few tenths of a per cent once the policy rules out tokens the "
        "reference still likes.",
        unit="share of tokens",
        applies=lambda algo: algo.kl_in == "loss" and (algo.beta > 0 or algo.target_kl is not None),
    ),
    Chart(
        "Clip fraction (tokens)",
        (
            Series("clip_frac_low", "low side"),
            Series("clip_frac_high", "high side"),
            Series("dual_clip_frac", "dual clip", applies=lambda algo: algo.dual_clip is not None),
        ),
        "Share of tokens whose clip is active given the sign of A: low side ρ < 1−ε_low with A < 0, high side "
        "ρ > 1+ε_high with A > 0, dual clip A < 0 with ρ > c. Look for: exactly 0 with one update per batch (the "
        "ratio is then 1); with several, most at the start, where the policy moves most: the GRPO and PPO pages' "
        "default runs (50 steps, seeds 0–2) clip 19–24 % of the tokens at their first step, and 0.8–2 % at a "
        "median step.",
        unit="share of tokens",
        applies=_clips_tokens,
    ),
    Chart(
        "Clip fraction (responses)",
        (Series("clip_frac_low", "low side"), Series("clip_frac_high", "high side")),
        "GSPO clips whole responses by their sequence ratio s: share of responses with s < 1−ε_low and A < 0 (low) "
        "or s > 1+ε_high and A > 0 (high). Look for: a large share is normal at GSPO's tiny ε.",
        unit="share of responses",
        applies=_clips_sequences,
    ),
    Chart(
        "DPPO mask (tokens)",
        (
            Series("clip_frac", "masked, m = 0"),
            Series("silenced_frac", "silenced with A ≠ 0"),
        ),
        "DPPO's clip is its mask: the share of tokens whose probability moved more than δ in the direction of "
        "their advantage (m = 0, verl's pg_clipfrac, A = 0 counted as A ≤ 0), beside the share of tokens with "
        "A ≠ 0 that get no gradient. Look for: exactly 0 with one update per batch; the gap is the masked "
        "tokens of zero-advantage groups, which lose nothing.",
        unit="share of tokens",
        applies=lambda algo: algo.policy_loss == "dppo_tv",
    ),
    Chart(
        "Advantages",
        (
            Series("advantage_mean", "mean"),
            Series("advantage_min", "min"),
            Series("advantage_max", "max"),
        ),
        "Mean ± standard deviation (band) and extremes of the token advantages.",
        unit="advantage",
        band=("advantage_mean", "advantage_std"),
        notes=_advantage_note,
    ),
    Chart(
        "Response length",
        (
            Series("response_length", "all"),
            Series("response_length_correct", "correct", CORRECT),
            Series("response_length_incorrect", "incorrect", INCORRECT),
        ),
        "Mean tokens per response (EOS included). Look for: lengths that collapse or run to the limit, a length "
        "bias of the loss aggregation or the critic.",
        unit="tokens",
    ),
    Chart(
        "Loss parts",
        tuple(Series(term.name, term.label) for term in LOSS_TERMS),  # the engine's list of loss terms
        "The terms of the minimised loss, not their total.",
        unit="loss",
        notes=_loss_note,
    ),
    Chart(
        "Batch composition",
        (
            Series("zero_adv_group_frac", "groups with identical rewards"),
            Series("dynamic_sampling_dropped_frac", "groups dropped by dynamic sampling"),
            Series("truncated_frac", "responses cut at the length limit"),
        ),
        "Look for: the share of groups whose members all got the same reward (zero advantage, no gradient) "
        "growing as the policy gets good, or stuck.",
        unit="share",
        notes=lambda algo: (
            ""
            if algo.num_generations > 1
            else "With one response per prompt there are no groups: only the share of responses cut at "
            "the length limit is drawn."
        ),
    ),
    Chart(
        "Policy change per step",
        (Series("approx_kl", "approx KL(π_old ‖ π_θ)"),),
        "How far each step's updates moved the policy from the one that sampled the batch (k2 on the sampled "
        f"tokens), what the clip range is meant to bound. Look for: exactly 0 with one update per batch (values "
        f"below {NOISE_FLOOR:g} are round-off and drawn as 0).",
        unit="nats per token",
        noise_floor=True,
    ),
    Chart(
        "Sampler–trainer mismatch",
        (Series("rollout_corr/kl", "k1 · rollout_corr/kl"), Series("rollout_corr/k3_kl", "k3 · rollout_corr/k3_kl")),
        "KL(μ ‖ π_old) per token on the sampler's tokens, under verl's names: k1 (can dip below 0 on a batch) and "
        "k3 (never). Drawn as |value| on a log axis, so that each keeps a readable scale: a bfloat16 sampler's k1 "
        "swings by about ±6e-4 from batch to batch while k3 stays near 1e-5, which a linear axis flattens to 0; "
        "hover a point for k1's sign. Drawn only when the sampler μ may differ from the trainer's π_old — a lag, "
        "another temperature, a bfloat16 sampler; with the trainer's own float32 kernels μ is π_old and there is "
        "nothing to draw. Look for: the gap growing with the lag.",
        unit="|KL|, nats per token (log)",
        magnitude=True,
    ),
    Chart(
        "Rollout correction",
        (
            Series("rollout_corr/rollout_is_eff_sample_size", "effective sample size, share"),
            Series("rollout_is_capped_frac", "weights above C"),
            Series("rollout_corr/rollout_rs_masked_fraction", "tokens the correction drops"),
        ),
        "The weights π_old/μ: the effective sample size of those the loss applies (verl's rollout_is_eff_sample_size, "
        "(mean w)²/mean(w²) over the valid tokens, a dropped token's weight 0: 1 when all are equal), the share "
        "above C, and the share of tokens the "
        "correction drops (MIS, or a binary-KL / TV gate; verl's rollout_rs_masked_fraction). Look for: the ESS "
        "falling as the sampler lags.",
        unit="share",
    ),
    Chart(
        "Critic loss",
        (Series("critic_loss", "critic loss"),),
        "Clipped squared error between the critic's values and its targets (the returns). Look for: a fall.",
        unit="squared error",
        applies=_has_critic,
    ),
    Chart(
        "Explained variance",
        (Series("explained_variance", "explained variance"),),
        "1 − Var(R − V)/Var(R): 1 = the critic predicts the returns, 0 = no better than their mean, below 0 = "
        "worse than useless. Look for: a climb towards 1. The axis stops at −1; lower values sit on its edge "
        "(hover for the number).",
        unit="explained variance",
        applies=_has_critic,
        notes=_explained_variance_note,
        y_range=(-1.05, 1.05),
    ),
)


def _value(record: dict, key: str) -> float | None:
    value = record.get(key)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def thin(records: list[dict], limit: int = MAX_POINTS) -> list[dict]:
    """At most about `limit` evenly spaced records, always keeping the latest."""
    stride = math.ceil(len(records) / limit) if records else 1
    kept = records[::stride]
    return kept if kept[-1:] == records[-1:] else kept + records[-1:]


def shown_runs(chart: Chart, runs: list[ChartRun]) -> list[ChartRun]:
    """The runs whose algorithm has this chart's quantity (no clip fraction for a loss without a clip)."""
    return [run for run in runs if chart.applies(run.algo)]


def has_data(chart: Chart, runs: list[ChartRun]) -> bool:
    return any(
        _value(r, s.key) is not None for run in shown_runs(chart, runs) for r in run.records for s in chart.series
    )


def caption(chart: Chart, runs: list[ChartRun]) -> str:
    """The chart's caption and, for the algorithms shown, what it means for them; where overlaid runs differ in
    what it means, each note names its runs ("#1, #3: …"); and why the axis is logarithmic where it is."""
    tags_of_note: dict[str, list[str]] = {}
    for run in shown_runs(chart, runs) if chart.notes else ():
        tags_of_note.setdefault(chart.notes(run.algo), []).append(run.tag)
    if len(tags_of_note) > 1:  # "" is an algorithm without a note: its runs are not named
        notes = [f"{', '.join(tags)}: {note}" for note, tags in tags_of_note.items() if note]
    else:
        notes = [note for note in tags_of_note if note]
    peaks = run_peaks(chart, runs)
    if log_axis(chart, runs):
        high, low = max(peaks, key=peaks.get), min(peaks, key=peaks.get)
        notes.append(
            f"Log axis: {high}'s peak ({peaks[high]:.3g}) is {peaks[high] / peaks[low]:,.0f} times {low}'s "
            f"({peaks[low]:.3g}), which a linear axis would flatten to 0. It starts at "
            f"{log_range(peaks)[0]:.2g}, {LOG_FLOOR} times below the lower peak: smaller values and those at "
            "or below 0 (k1's negative means) are not drawn."
        )
    return " ".join([chart.caption, *notes])


def run_peaks(chart: Chart, runs: list[ChartRun]) -> dict[str, float]:
    """Each shown run's (by tag) largest positive value on this chart."""
    peaks = {}
    for run in shown_runs(chart, runs):
        values = [_value(r, s.key) for r in run.records for s in chart.series]
        positive = [v for v in values if v is not None and v > 0]
        if positive:
            peaks[run.tag] = max(positive)
    return peaks


def log_range(peaks: dict[str, float]) -> tuple[float, float]:
    """A log axis for runs with these peaks: from LOG_FLOOR times below the lowest peak (the start of a run, at the
    reference, is near 0 and would stretch the axis over many empty decades) to just above the highest."""
    return min(peaks.values()) / LOG_FLOOR, max(peaks.values()) * 1.5


def log_axis(chart: Chart, runs: list[ChartRun]) -> bool:
    """Whether the chart draws these runs on a log axis: overlaid runs whose peaks differ APART-fold or more."""
    peaks = run_peaks(chart, runs).values() if chart.log_when_apart and len(runs) > 1 else ()
    return bool(peaks) and max(peaks) >= APART * min(peaks)


def _drawn(chart: Chart, value: float | None) -> float | None:
    """The value as plotted: round-off shown as 0, outliers held at the edge of a fixed axis, and its size alone
    where the axis is of magnitudes (0 has no place on a log axis: a gap)."""
    if value is None:
        return None
    if chart.magnitude:
        return abs(value) or None
    if chart.noise_floor and abs(value) < NOISE_FLOOR:
        return 0.0
    if chart.y_range:
        return min(max(value, chart.y_range[0]), chart.y_range[1])
    return value


PLOT_PX, AXIS_PX, LEGEND_ROW_PX = 210, 55, 20
# Legend rows are estimated for the narrowest chart the layout draws (two charts beside the controls on a
# 1024-pixel screen): an entry takes its line sample plus about 6.5 px per character.
LEGEND_WIDTH_PX, LEGEND_SAMPLE_PX, LEGEND_CHAR_PX = 260, 40, 6.5


def figure(chart: Chart, runs: list[ChartRun], by_run: bool | None = None, marked_step: int | None = None) -> go.Figure:
    """The chart for these runs. One run: a colour per series. Several (or `by_run`, where the page shows
    several runs): a colour per run, a dash per series, so that a colour means one run on every chart of the
    page, also on a chart that holds only one of them (e.g. GSPO's clip fraction beside a GRPO run).
    The legend sits under the plot area, whatever its length, and the figure grows to hold it. `marked_step`
    (the step the token view shows) is a dotted vertical line across the plot, the same on every chart."""
    overlay = len(runs) > 1 if by_run is None else by_run
    log = log_axis(chart, runs)
    runs = shown_runs(chart, runs)
    traces = []

    def style(run: ChartRun, series_index: int) -> tuple[str, str]:
        series = chart.series[series_index]
        if overlay:
            return run.colour, DASHES[series_index % len(DASHES)]
        return series.colour or RUN_COLOURS[series_index % len(RUN_COLOURS)], series.dash or "solid"

    for run in runs:
        first_trace = len(traces)
        records = thin(run.records)
        steps = [r["step"] for r in records]
        prefix = f"{run.tag} " if overlay else ""
        if chart.band:
            mean, std = chart.band
            colour, _ = style(run, [s.key for s in chart.series].index(mean))
            upper = [None if _value(r, mean) is None else r[mean] + (_value(r, std) or 0) for r in records]
            lower = [None if _value(r, mean) is None else r[mean] - (_value(r, std) or 0) for r in records]
            traces.append(
                dict(
                    type="scatter",
                    x=steps,
                    y=upper,
                    mode="lines",
                    line=dict(width=0),
                    showlegend=False,
                    hoverinfo="skip",
                )
            )
            traces.append(
                dict(
                    type="scatter",
                    x=steps,
                    y=lower,
                    mode="lines",
                    line=dict(width=0),
                    fill="tonexty",
                    fillcolor=_translucent(colour),
                    name=f"{prefix}mean ± std",
                    hoverinfo="skip",
                )
            )
        emphasised = chart.emphasise(run.algo) if chart.emphasise else None
        # The thick series in use first, underneath: a thin one lying on it (the exact KL on k3) stays visible.
        for series_index, series in sorted(enumerate(chart.series), key=lambda item: item[1].key != emphasised):
            values = [_value(r, series.key) for r in records]
            if all(v is None for v in values) or not series.applies(run.algo):
                continue
            colour, dash = style(run, series_index)
            shown_markers = len(steps) < LONG_TRACE or None in values
            traces.append(
                dict(
                    type="scatter",
                    x=steps,
                    y=[_drawn(chart, v) for v in values],
                    customdata=values,
                    # The value as the pages write numbers (plotly's own format would write -0.5 and 2e-05).
                    text=[None if v is None else number(v, ".4g") for v in values],
                    hovertemplate=f"{run.label}<br>{series.name}: %{{text}} at step %{{x}}<extra></extra>",
                    # Always markers: plotly selects (and Streamlit's on_select reports) only points drawn as markers,
                    # and a click on a step opens it in the token view. Seen on short runs and where NaN gaps would
                    # leave isolated values without a line to draw; on long runs they would bury the line, so they
                    # are invisible there but still catch the click.
                    mode="lines+markers",
                    cliponaxis=False,  # the axis ends at the first and last step: their markers drawn whole
                    name=prefix + series.name + (" (in use)" if series.key == emphasised else ""),
                    line=dict(color=colour, dash=dash, width=3.5 if series.key == emphasised else series.width),
                    marker=dict(size=5, opacity=1) if shown_markers else dict(size=8, opacity=0),
                )
            )
        for trace in traces[first_trace:]:  # which run drew it: a click on it opens that run's samples
            trace["meta"] = run.tag
    drawn = [y for trace in traces for y in trace["y"] if y is not None]
    x_axis = step_axis([step for trace in traces for step in trace["x"]])
    names = [t["name"] for t in traces if t.get("showlegend", True)]
    # A multi-series chart always names its series, even when only one of them has data.
    show_legend = len(names) > 1 or len(chart.series) > 1
    layout = dict(
        title=dict(text=chart.title, font=dict(size=14), x=0, xanchor="left"),
        **legend_below(names if show_legend else []),
        showlegend=show_legend,
        xaxis=x_axis,
        # Powers of ten as 5×10⁻⁹, as the pages write them: plotly's default SI prefixes turn 2e-14 into "20f", and
        # its "e" notation writes "0.5e−8".
        yaxis=dict(
            title=dict(text=chart.unit),
            exponentformat="power",
            **({"range": list(chart.y_range)} if chart.y_range else {}),
            **(log_scale(log_range(run_peaks(chart, runs)), headroom=1) if log else {}),
            **(log_scale(drawn) if chart.magnitude else {}),
            **({"rangemode": "nonnegative"} if not log and not chart.y_range and nonnegative(drawn) else {}),
        ),
        uirevision=chart.title,  # keep the learner's zoom and hidden traces across refreshes
        **(step_marker(marked_step, x_axis.get("range")) if marked_step is not None else {}),
    )
    # Plotly's per-property validation costs ~8x the rest of a redraw (≈0.25 s of CPU for the whole dashboard,
    # every second, while training competes for the same cores); these dicts use fixed, known-good keys, and a
    # test builds every chart with validation on.
    return go.Figure(data=traces, layout=chart_layout(layout), _validate=False)


def nonnegative(values) -> bool:
    """Whether a chart's values are all ≥ 0 (and there are some): its axis then stays at or above 0, so that a
    line flat at 0 (a clip fraction, a success rate before the first success) is drawn on 0…1, not on plotly's
    made-up −1…1."""
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return bool(finite) and min(finite) >= 0


MARKER_COLOUR = "#444"
STEP_TICKS = 10  # a step axis spanning at most this many steps has a tick on every step (none at 1.5)


def step_axis(steps: Sequence[float]) -> dict:
    """The x axis of a chart against the training step: from the first step drawn to the last, exactly. Plotly's
    own range pads past both ends, and stretched to hold the step marker's label (a 10-step run's axis reached
    12.5, at 1024 px 14.9). Ticks on whole steps where there are few; a single step in the middle of the axis."""
    axis = dict(title=dict(text="step"), exponentformat="e")
    if not steps:
        return axis
    first, last = min(steps), max(steps)
    span = [first, last] if last > first else [first - 0.5, first + 0.5]
    return dict(axis, range=span, **({"dtick": 1} if span[1] - span[0] <= STEP_TICKS else {}))


def step_marker(step: int, span: Sequence[float] | None = None) -> dict:
    """Layout entries that mark `step` on a chart whose step axis spans `span`: a dotted line from the bottom of
    the plot to its top, labelled "tokens" (what the token view shows), whatever the y axis. The label reads
    towards the middle of the axis, so that it stays inside the plot at the last step."""
    right = span is not None and step > (span[0] + span[1]) / 2
    return dict(
        shapes=[
            dict(
                type="line",
                xref="x",
                yref="paper",
                x0=step,
                x1=step,
                y0=0,
                y1=1,
                line=dict(color=MARKER_COLOUR, width=1.5, dash="dot"),
            )
        ],
        annotations=[
            dict(
                x=step,
                xref="x",
                y=1,
                yref="paper",
                text=f"tokens: step {step}",
                showarrow=False,
                xanchor="right" if right else "left",
                yanchor="top",
                bgcolor="rgba(255,255,255,0.7)",
                font=dict(size=10, color=MARKER_COLOUR),
            )
        ],
    )


def legend_below(names: Sequence[str], plot_px: int = PLOT_PX, top_px: int = 40) -> dict:
    """Layout entries (height, margin, legend) that put a horizontal legend of these entries under the x axis
    and its title, and grow the figure by the rows it wraps to, so that the plot area keeps `plot_px`. Placed
    as a fraction of the plot's height instead, a legend that wraps to more rows climbs onto the axis title."""
    legend_px = LEGEND_ROW_PX * _legend_rows([LEGEND_SAMPLE_PX + LEGEND_CHAR_PX * len(n) for n in names]) + 14
    legend_px = legend_px if names else 0
    # 4 px between the axis title's descenders and the legend's first row
    return dict(
        height=top_px + plot_px + AXIS_PX + legend_px,
        margin=dict(l=10, r=10, t=top_px, b=AXIS_PX + legend_px),
        legend=dict(orientation="h", yanchor="top", y=-(AXIS_PX + 4) / plot_px, x=0, font=dict(size=11)),
    )


def _legend_rows(widths: list[float]) -> int:
    """How many rows a horizontal legend with entries this wide fills, wrapping at LEGEND_WIDTH_PX."""
    rows, used = 1, 0.0
    for width in widths:
        if used and used + width > LEGEND_WIDTH_PX:
            rows, used = rows + 1, 0.0
        used += width
    return rows


def _translucent(hex_colour: str, alpha: float = 0.18) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
