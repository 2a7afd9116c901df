"""The dashboard's pure parts: chart figures (built without plotly's validation, so checked here with it), what
each chart shows for which algorithm, the token view and one token's loss term, run labels, URL settings and
the prediction answers."""

import math

import plotly.graph_objects as go
import pytest
import torch
from streamlit.testing.v1 import AppTest

from rl_core.algorithms import PRESETS, get_preset
from rl_core.config import RunConfig, knob_differences
from rl_core.formulas.aggregation import aggregate_loss
from rl_core.formulas.distillation import reverse_kl_advantages
from rl_core.formulas.estimators import AdvantageInputs, estimate_advantages, policy_loss
from rl_core.formulas.metrics import advantage_stats
from ui import share
from ui.charts import (
    CHARTS,
    CORRECT,
    INCORRECT,
    ChartRun,
    caption,
    figure,
    has_data,
    policy_term_cancels,
    run_colour,
    thin,
)
from ui.predict import end_versus_start, ever_above, mean_near_zero
from ui.runs import SHORT_LABEL, full_labels, labels, short_label, token_label
from ui.tokens import COLOURINGS, legend_html, token_html, token_term

CHART = {chart.title: chart for chart in CHARTS}


def record(step: int) -> dict:
    """A step record with every charted field, plus a NaN where a metric has no value."""
    fields = {series.key for chart in CHARTS for series in chart.series} | {"advantage_std"}
    return {"step": step, **dict.fromkeys(fields, 0.1 * step), "response_length_correct": math.nan}


def run(preset: str, number: int = 1, steps: int = 10, **overrides) -> ChartRun:
    return ChartRun(
        f"#{number} · {preset}",
        [record(s) for s in range(1, steps + 1)],
        get_preset(preset, **overrides),
        tag=f"#{number}",
        colour=run_colour(number),
    )


def test_every_chart_is_a_valid_plotly_figure_for_one_run_and_for_an_overlay():
    runs = [run("grpo", 1, 39), run("ppo", 2, 9), run("gspo", 3), run("pg", 4), run("dppo", 5), run("opd", 6)]
    for chart in CHARTS:
        for shown in (runs[:1], runs, runs[2:3]):
            if has_data(chart, shown):
                go.Figure(figure(chart, shown).to_dict())  # raises on any invalid property
        assert has_data(chart, runs), chart.title


def test_a_quantity_an_algorithm_lacks_is_not_drawn_for_it():
    pg, grpo, gspo = run("pg", 1), run("grpo", 2), run("gspo", 3)
    assert not has_data(CHART["Clip fraction (tokens)"], [pg]), "vanilla PG has no clip"
    assert not has_data(CHART["Explained variance"], [grpo]), "no critic, no explained variance"
    assert not has_data(CHART["KL to the teacher"], [grpo]), "no teacher, no KL to it"
    assert has_data(CHART["KL to the teacher"], [run("opd", 4)])
    # Per-response and per-token clip fractions never share an axis.
    tokens = figure(CHART["Clip fraction (tokens)"], [grpo, gspo])
    responses = figure(CHART["Clip fraction (responses)"], [grpo, gspo])
    assert [t.name for t in tokens.data] == ["#2 low side", "#2 high side"], "only the GRPO run, named as a run"
    assert [t.name for t in responses.data] == ["#3 low side", "#3 high side"], "only the GSPO run"
    assert tokens.layout.yaxis.title.text == "share of tokens"
    assert responses.layout.yaxis.title.text == "share of responses"
    # The dual-clip share only for a run that has a dual clip.
    assert "dual clip" not in [t.name for t in tokens.data]
    dual = figure(CHART["Clip fraction (tokens)"], [run("ppo", dual_clip=3.0)])
    assert "dual clip" in [t.name for t in dual.data]


def test_kl_in_use_is_marked_only_when_a_kl_term_acts():
    kl = CHART["KL to the reference"]
    marked = figure(kl, [run("reinforce_pp_baseline")])
    assert [t.name for t in marked.data if t.line.width > 2] == ["k2 (in use)"]
    dapo = run("dapo")
    assert dapo.algo.beta == 0
    assert not [t.name for t in figure(kl, [dapo]).data if "in use" in t.name]
    assert "β = 0" in caption(kl, [dapo])


def test_a_colour_means_one_run_on_every_chart_of_the_page():
    grpo, gspo = run("grpo", 1), run("gspo", 2)
    # GSPO's per-response clip fraction holds only run #2 of the two: drawn in #2's colour (red), its sides told
    # apart by the dash, never blue = low side and red = high side beside a legend where red is run #2.
    responses = figure(CHART["Clip fraction (responses)"], [grpo, gspo])
    assert [t.line.color for t in responses.data] == [run_colour(2)] * 2
    assert [t.line.dash for t in responses.data] == ["solid", "dash"]
    assert [t.name for t in responses.data] == ["#2 low side", "#2 high side"]
    # A page with several runs, showing one of them: still that run's colour.
    alone = figure(CHART["Clip fraction (tokens)"], [run("grpo", 2)], by_run=True)
    assert {t.line.color for t in alone.data} == {run_colour(2)} and alone.data[0].name == "#2 low side"
    # A page with one run: a colour per series, as before.
    single = figure(CHART["Clip fraction (tokens)"], [run("grpo", 1)])
    assert len({t.line.color for t in single.data}) == 2 and single.data[0].name == "low side"


def test_correct_is_green_incorrect_red_and_nan_becomes_a_gap():
    length = figure(CHART["Response length"], [run("grpo")])
    assert [t.name for t in length.data] == ["all", "incorrect"]  # 'correct' was NaN throughout
    assert length.data[1].line.color == INCORRECT
    records = [{"step": s, "response_length_correct": 3.0} for s in (1, 2)]
    correct = figure(CHART["Response length"], [ChartRun("#1", records, get_preset("grpo"))])
    assert correct.data[0].line.color == CORRECT


def test_round_off_is_drawn_as_zero_and_outliers_sit_on_a_fixed_axis():
    noisy = [{"step": s, "approx_kl": 3e-14} for s in (1, 2)]
    change = figure(CHART["Policy change per step"], [ChartRun("#1", noisy, get_preset("grpo"))])
    assert list(change.data[0].y) == [0.0, 0.0] and list(change.data[0].customdata) == [3e-14, 3e-14]
    assert change.layout.yaxis.exponentformat == "power", "no SI suffixes such as '20f', no '0.5e−8'"
    spikes = [{"step": 1, "explained_variance": -1200.0}, {"step": 2, "explained_variance": 0.5}]
    ev = figure(CHART["Explained variance"], [ChartRun("#1", spikes, get_preset("vapo"))])
    assert list(ev.data[0].y) == [-1.05, 0.5] and ev.data[0].customdata[0] == -1200.0
    assert tuple(ev.layout.yaxis.range) == (-1.05, 1.05)


def test_captions_speak_of_the_algorithm_on_screen():
    advantages = CHART["Advantages"]
    assert "group" in caption(advantages, [run("grpo")])
    assert "group" not in caption(advantages, [run("ppo")]) and "group" not in caption(advantages, [run("vapo")])
    assert "critic" in caption(advantages, [run("vapo")])


def test_overlaid_runs_that_read_a_chart_differently_are_named_in_its_caption():
    kl = CHART["KL to the reference"]
    text = caption(kl, [run("grpo", 1), run("grpo", 2, beta=0.1), run("grpo", 3, beta=0.0)])
    assert text.endswith(
        "#1, #2: The estimator in the loss is drawn thick. #3: β = 0: no KL term acts on this run; "
        "the curves only measure the drift."
    )
    assert caption(kl, [run("grpo", 1), run("grpo", 2, beta=0.1)]).endswith(
        "(0.27, 0.19 and 0.29 nats against 0.28, 0.28 and 0.26). The estimator in the loss is drawn thick."
    ), "one note for all: no names"


UNEQUAL_LENGTHS = (3, 5, 2, 7, 4, 6, 1, 3, 8, 2, 5, 5, 1, 7, 3, 4)


def _batch(algo, lengths=UNEQUAL_LENGTHS):
    """A batch of 16 responses (two groups of 8, or four of 4) with different rewards: its mask, advantages from
    the run's own estimator, and log-probabilities."""
    lengths = torch.tensor(lengths)
    mask = (torch.arange(8)[None, :] < lengths[:, None]).double()
    rewards = torch.tensor(
        [1.0, 0.0, 0.5, 1.0, 0.0, 0.2, 0.9, 0.3, 0.4, 0.4, 1.0, 0.0, 0.7, 0.1, 0.0, 0.6], dtype=torch.float64
    )
    token_rewards = torch.zeros(16, 8, dtype=torch.float64)
    token_rewards[torch.arange(16), lengths - 1] = rewards
    generator = torch.Generator().manual_seed(0)
    values = torch.rand(16, 8, generator=generator, dtype=torch.float64) * mask
    logp = -torch.rand(16, 8, generator=generator, dtype=torch.float64) * 3
    advantages, _ = estimate_advantages(algo, AdvantageInputs(token_rewards, mask, values, algo.num_generations, 0.3))
    if algo.teacher_model is not None:  # on-policy distillation: a teacher's per-token signal, as the trainer adds
        teacher_logp = -torch.rand(16, 8, generator=generator, dtype=torch.float64) * 3
        advantages = advantages if algo.use_task_rewards else torch.zeros_like(advantages)
        if algo.use_policy_gradient:
            advantages = advantages + algo.distillation_loss_coef * reverse_kl_advantages(
                logp, teacher_logp, mask, algo.distillation_loss_mode
            )
    return mask, advantages, logp


def _policy_term_at_ratio_one(algo) -> float:
    """The engine's policy term of the batch before any update (π_θ = π_old), aggregated by the run's
    loss_agg_mode."""
    mask, advantages, logp = _batch(algo)
    loss = policy_loss(algo, logp, logp, advantages, mask)
    return aggregate_loss(loss, mask, algo.loss_agg_mode, 8).item()


def _configs():
    for name in PRESETS:
        for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean-token-sum"):
            for overrides in (
                {},
                {"whiten_advantages": True},
                {"adv_norm_mean": "batch", "adv_norm_std": "group"},
                {"adv_norm_mean": "batch", "adv_norm_std": "batch"},
                {"adv_norm_mean": "none"},
                {"baseline": "running_mean"},
                {"policy_loss": "gspo"},
                {"policy_loss": "clip"},
            ):
                try:
                    yield get_preset(name, loss_agg_mode=mode, **overrides)
                except ValueError:  # a combination the engine refuses
                    continue


def test_the_loss_parts_caption_says_zero_exactly_where_the_engines_policy_term_is_zero():
    cancels = []
    for algo in _configs():
        term = _policy_term_at_ratio_one(algo)
        assert policy_term_cancels(algo) == (abs(term) < 1e-12), (algo, term)
        cancels.append(policy_term_cancels(algo))
    assert len(cancels) > 50 and any(cancels) and not all(cancels)
    loss = CHART["Loss parts"]
    # GRPO (seq-mean-token-mean over group-centred advantages) cancels; DAPO's token-mean over unequal lengths,
    # RLOO's −A·log π and SAPO's asymmetric gate do not, and the caption says so.
    assert "exactly 0 before the first update" in caption(loss, [run("grpo")])
    for name in ("dapo", "rloo", "sapo", "cispo", "pg"):
        assert "exactly 0" not in caption(loss, [run(name)]) and "≈ 0" not in caption(loss, [run(name)]), name
    assert "log π_θ" in caption(loss, [run("rloo")]) and "length" in caption(loss, [run("dapo")])


def test_the_advantages_caption_says_the_token_mean_is_zero_only_for_equal_lengths():
    # The chart's mean is advantage_mean, over tokens: group-centred advantages of unequal lengths move it off 0.
    grpo = get_preset("grpo")
    mask, advantages, _ = _batch(grpo)
    unequal = advantage_stats(advantages, mask)["mean"]
    mask, advantages, _ = _batch(grpo, (4,) * 16)
    equal = advantage_stats(advantages, mask)["mean"]
    assert abs(unequal) > 0.01 and equal == pytest.approx(0, abs=1e-12)
    text = caption(CHART["Advantages"], [run("grpo")])
    assert "≈ 0" not in text and "equally long" in text
    assert "Not centred" in caption(CHART["Advantages"], [run("grpo", adv_norm_mean="none")])


def test_a_chart_with_several_series_always_has_a_legend_below_its_plot_area():
    only_entropy = figure(
        CHART["Batch composition"], [ChartRun("#1", [{"step": 1, "zero_adv_group_frac": 0.5}], get_preset("grpo"))]
    )
    assert len(only_entropy.data) == 1 and only_entropy.layout.showlegend
    six = [run("grpo", n, beta=0.01 * n) for n in range(1, 7)]
    kl = figure(CHART["KL to the reference"], six)
    assert len(kl.data) == 24 and len({t.line.color for t in kl.data}) == 6, "a colour per run"
    assert len({t.line.dash for t in kl.data}) == 4, "a line style per series"
    legend_rows = math.ceil(24 / 3)
    # The legend hangs below the plot area (y < 0 in plot fractions) and the bottom margin holds all its rows.
    assert kl.layout.legend.y < 0 and kl.layout.legend.yanchor == "top"
    assert kl.layout.margin.b >= 20 * legend_rows


def test_every_step_of_a_long_run_is_a_point_a_click_can_select():
    # Plotly's point selection (Streamlit's on_select="rerun", selection_mode="points") picks only points drawn
    # as markers: a lines-only trace gives an empty selection, and the click opens no step in the token view.
    for chart in CHARTS:
        for shown in ([run("grpo", 1, 50)], [run("grpo", 1, 50), run("ppo", 2, 50)], [run("dppo", 1, 50)]):
            if not has_data(chart, shown):
                continue
            for trace in figure(chart, shown).data:
                if trace.hoverinfo == "skip":  # the mean ± std band's edges are not steps
                    continue
                assert "markers" in trace.mode, (chart.title, trace.name)
                assert list(trace.x) == list(range(1, 51)), (chart.title, trace.name)
    # Long traces' markers are invisible (the line stays readable); short ones, and values between gaps, show.
    entropy = CHART["Token entropy"]
    assert figure(entropy, [run("grpo", 1, 50)]).data[0].marker.opacity == 0
    assert figure(entropy, [run("grpo", 1, 10)]).data[0].marker.opacity == 1
    gappy = [{"step": s, "entropy": math.nan if s % 2 else 1.0} for s in range(1, 51)]
    assert figure(entropy, [ChartRun("#1", gappy, get_preset("grpo"))]).data[0].marker.opacity == 1


def test_thinning_keeps_the_shape_bounded_and_the_latest_point():
    records = [{"step": s} for s in range(1, 1001)]
    kept = thin(records, limit=100)
    assert len(kept) <= 101 and kept[0]["step"] == 1 and kept[-1]["step"] == 1000


# π_old = 0.4, 0.5, 0.9 and π_θ = 0.6, 0.45, 0.9 after the updates: ρ = 1.5, 0.9, 1; π_ref = 0.5, 0.5, 0.9.
SAMPLE = {
    "prompt": "<b>",
    "response": "ab",
    "tokens": ["a", "<", "<eos>"],
    "reward": 1.0,
    "success": True,
    "truncated": False,
    "advantages": [0.5, -0.5, 0.0],
    "ratios": [1.5, 0.9, 1.0],
    "clipped": [True, False, False],
    "silenced": [False, True, False],
    "entropies": [0.3, 0.1, 0.0],
    "log_probs": [math.log(0.6), math.log(0.45), math.log(0.9)],
    "old_log_probs": [math.log(0.4), math.log(0.5), math.log(0.9)],
    "ref_log_probs": [math.log(0.5), math.log(0.5), math.log(0.9)],
}


def test_token_view_escapes_text_and_colours_by_each_quantity_with_numbers_and_a_legend():
    for colour_by in COLOURINGS:
        html = token_html([SAMPLE], colour_by)
        assert "&lt;b&gt;" in html and "<b>" not in html
        assert "⏎" in html and "solved" in html
        assert legend_html([SAMPLE], colour_by)
    assert "rgba(255,179,0" in token_html([SAMPLE], "clipped")
    # The second token, and only it, is marked as given no gradient by the run's own loss.
    silenced = token_html([SAMPLE], "silenced")
    assert silenced.count("rgba(200,30,90") == 1 and silenced.count("0·∇") == 1
    assert "+0.50" in token_html([SAMPLE], "advantage") and "1.50" in token_html([SAMPLE], "ratio")
    assert "A = +0.50" in legend_html([SAMPLE], "advantage")


def test_a_tokens_loss_term_is_the_clip_case_worked_out_by_hand():
    clip = get_preset("grpo", beta=0.0)  # ε = 0.2 on both sides
    # ρ = 1.5 > 1.2 with A = +0.5: min(0.75, 0.6) = 0.6 is the clipped term, constant in θ.
    high = token_term(SAMPLE, 0, clip)
    assert high.loss == pytest.approx(-0.6) and high.weight == 0 and "clipped" in high.case
    assert high.kl is None and r"\beta" not in high.formula
    # ρ = 0.9 with A = −0.5: 0.9 > 0.8, inside the range, so ℓ = −ρA = 0.45
    # and −∂ℓ/∂log π = ρA = −0.45.
    low = token_term(SAMPLE, 1, clip)
    assert low.loss == pytest.approx(0.45) and low.weight == pytest.approx(-0.45) and "unclipped" in low.case
    assert "1.5000" in high.formula and "+0.4500" in low.formula
    # Vanilla: ℓ = −A·log π_θ = −0.5·log 0.6, gradient weight A.
    vanilla = token_term(SAMPLE, 0, get_preset("pg"))
    assert vanilla.weight == pytest.approx(0.5) and vanilla.loss == pytest.approx(-0.5 * math.log(0.6))
    # GSPO: one ratio for the response, the geometric mean of its token ratios.
    gspo = token_term(SAMPLE, 0, get_preset("gspo"))
    assert gspo.ratio == pytest.approx((1.5 * 0.9 * 1.0) ** (1 / 3))


def test_grpos_token_term_shows_its_kl_term_when_beta_is_positive():
    # r = π_ref/π_θ = 0.5/0.6; k3 = r − 1 − log r; its gradient w.r.t. log π_θ is 1 − r.
    r = 0.5 / 0.6
    k3 = r - 1 - math.log(r)
    grpo = token_term(SAMPLE, 0, get_preset("grpo"))  # β = 0.04, k3 in the loss
    assert grpo.kl == pytest.approx(0.04 * k3) and grpo.kl_weight == pytest.approx(-0.04 * (1 - r))
    assert r"\beta\,k_3" in grpo.formula and f"{k3:.4g}" in grpo.formula and f"{0.04 * k3:+.4g}" in grpo.formula
    assert grpo.loss == pytest.approx(-0.6), "the policy term is unchanged"
    # The step's own β (adaptive KL control moves it) replaces the config's.
    assert token_term(SAMPLE, 0, get_preset("grpo"), beta=0.1).kl == pytest.approx(0.1 * k3)
    assert token_term(SAMPLE, 0, get_preset("grpo"), beta=0.0).kl is None


def test_cispos_token_term_is_its_clamped_detached_weight_and_never_silences():
    cispo = get_preset("cispo")  # ε_max = 5: ρ = 1.5 stays the weight
    term = token_term(SAMPLE, 0, cispo)
    assert term.loss == pytest.approx(-1.5 * 0.5 * math.log(0.6)) and term.weight == pytest.approx(1.5 * 0.5)
    assert "never silences" in term.case and "PPO" not in term.case and "unclipped" not in term.case
    assert r"\mathrm{sg}[\min(\rho_t, 5)]" in term.formula
    # ε_max = 1.2: the weight is clamped to 1.2, and the token still gets a gradient (PPO's clip gave it 0).
    capped = token_term(SAMPLE, 0, get_preset("cispo", epsilon_high=1.2))
    assert capped.weight == pytest.approx(1.2 * 0.5) and "clamped" in capped.case
    # verl's two-sided CISPO: ρ = 0.9 with A < 0 clamped to [0.95, 1.05] gives w = 0.95.
    two_sided = token_term(SAMPLE, 1, get_preset("cispo", cispo_two_sided=True, epsilon=0.05, epsilon_high=0.05))
    assert two_sided.weight == pytest.approx(-0.5 * 0.95) and "clamped" in two_sided.case


def test_dros_token_term_is_the_advantage_minus_its_spring():
    """verl's dro with β = 2. Token 0: A = +0.5, log π_θ − log π_old = ln 1.5: ℓ = −[0.5 ln 0.6 − (ln 1.5)²] and
    −∂ℓ/∂log π = 0.5 − 2 ln 1.5 < 0: the spring already outweighs the advantage. Token 2: A = 0 at π_old."""
    dro = get_preset("grpo", policy_loss="dro", dro_beta=2.0)
    up = token_term(SAMPLE, 0, dro)
    assert up.loss == pytest.approx(-(0.5 * math.log(0.6) - math.log(1.5) ** 2))
    assert up.weight == pytest.approx(0.5 - 2 * math.log(1.5))
    assert "= −0.3109," in up.case and "no clip" in up.case  # 0.5 − 2·ln 1.5, its minus written "−"
    still = token_term(SAMPLE, 2, dro)
    assert still.weight == 0 and "no push either way" in still.case


def test_sapos_token_term_is_its_soft_gate():
    sapo = get_preset("sapo")  # τ_pos = 1, τ_neg = 1.05
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    # A = +0.5, ρ = 1.5, τ = 1: g = 4σ(0.5); −∂ℓ/∂log π = A·ρ·4σ(1−σ).
    up = token_term(SAMPLE, 0, sapo)
    s = sigmoid(0.5)
    assert up.loss == pytest.approx(-0.5 * 4 * s) and up.weight == pytest.approx(0.5 * 1.5 * 4 * s * (1 - s))
    assert f"g = {4 * s:.4f}" in up.case and "never cut" in up.case and "τ_pos" in up.case
    # A = −0.5, ρ = 0.9, τ = 1.05: g = (4/1.05)·σ(−0.105).
    down = token_term(SAMPLE, 1, sapo)
    s = sigmoid(1.05 * -0.1)
    assert down.loss == pytest.approx(0.5 * 4 / 1.05 * s)
    assert down.weight == pytest.approx(-0.5 * 0.9 * 4 * s * (1 - s)) and "τ_neg" in down.case
    assert r"g_\tau" in down.formula and "unclipped" not in down.case


def test_dppos_token_term_is_its_probability_band_and_mask():
    dppo = get_preset("dppo", beta=0.0)  # δ = 0.15 on both sides, ratio cap c = 20
    # A > 0 and π rose 0.4 → 0.6: +0.2 > δ, so the mask silences it (ℓ = 0, no gradient).
    masked = token_term(SAMPLE, 0, dppo)
    assert masked.loss == 0 and masked.weight == 0 and "masked (m = 0)" in masked.case and "+0.2000" in masked.case
    # A < 0 and π fell 0.5 → 0.45: −0.05 ≥ −δ, kept; ℓ = −A·ρ·log π_θ, weight A·ρ.
    kept = token_term(SAMPLE, 1, dppo)
    assert kept.loss == pytest.approx(0.5 * 0.9 * math.log(0.45)) and kept.weight == pytest.approx(-0.45)
    assert "kept (m = 1)" in kept.case and "m_t = 1" in kept.formula
    # A rare token 0.01 → 0.05: ρ = 5, which PPO's clip would cut; its probability moved 0.04, inside the band.
    rare = {
        **SAMPLE,
        "advantages": [0.5],
        "log_probs": [math.log(0.05)],
        "old_log_probs": [math.log(0.01)],
        "ref_log_probs": [math.log(0.01)],
    }
    term = token_term(rare, 0, dppo)
    assert term.weight == pytest.approx(0.5 * 5) and "kept" in term.case


class FakeJob:
    def __init__(self, number, **settings):
        self.number, self.settings = number, {"variant": "GRPO", "beta": 0.04, "seed": 0} | settings


def test_run_labels_name_only_what_differs_from_the_first_run():
    runs = [FakeJob(1), FakeJob(2, beta=0.1), FakeJob(3, seed=1, variant="DAPO"), FakeJob(4)]
    assert labels(runs) == {1: "#1 · GRPO", 2: "#2 · beta=0.1", 3: "#3 · DAPO, seed=1", 4: "#4 · GRPO"}


def test_a_run_of_another_variant_is_named_by_it_not_by_the_knobs_its_preset_sets():
    # CISPO, SAPO, DPPO as the Beyond GRPO page trains them: each preset brings its own ε, β and loss; the pills
    # read "#2 · SAPO", not "#2 · variant=SAPO +4 more". A knob changed on a later SAPO run is named against the
    # first SAPO run; the seed, a setting of the run, against the page's first run.
    cispo = dict(variant="CISPO", policy_loss="cispo", epsilon=0.2, epsilon_high=5.0, beta=0.0)
    sapo = dict(variant="SAPO", policy_loss="sapo", epsilon=0.2, epsilon_high=0.28, beta=0.0)
    dppo = dict(variant="DPPO", policy_loss="dppo_tv", epsilon=0.2, epsilon_high=0.2, beta=0.04)
    runs = [FakeJob(1, **cispo), FakeJob(2, **sapo), FakeJob(3, **dppo), FakeJob(4, **(sapo | dict(beta=0.1, seed=2)))]
    assert labels(runs) == {1: "#1 · CISPO", 2: "#2 · SAPO", 3: "#3 · DPPO", 4: "#4 · SAPO, beta=0.1, seed=2"}
    assert [short_label(name) for name in labels(runs).values()] == list(labels(runs).values()), "nothing cut"


class RunJob:
    def __init__(self, number, preset="grpo", seed=0, **overrides):
        self.number = number
        self.run = RunConfig(algo=get_preset(preset, **overrides), task="reverse", seed=seed)


def overlay_notes(jobs: list) -> tuple[list[str], list[str]]:
    """The captions and warnings `ui.runs.differences` draws under the overlay of these runs."""

    def page(jobs):
        from ui.runs import differences

        differences(jobs)

    at = AppTest.from_function(page, args=(jobs,)).run()
    assert not at.exception, at.exception
    return [c.value for c in at.caption], [w.value for w in at.warning]


def test_the_overlay_names_every_knob_in_which_its_runs_differ_and_flags_more_than_one():
    # A replica (another seed) and a one-knob change are captions; DAPO against GRPO is the five knobs of the
    # spec's DAPO preset (β 0, ε_high 0.28, dynamic sampling, token-mean, the overlong penalty), flagged.
    captions, warnings = overlay_notes([RunJob(1), RunJob(2, seed=3), RunJob(3, beta=0.1)])
    assert captions == ["#2: the same settings, another seed as #1  \n#3 against #1: `beta` 0.04 → 0.1"]
    assert warnings == []
    captions, warnings = overlay_notes([RunJob(1), RunJob(2, "dapo")])
    assert captions == [] and len(warnings) == 1
    assert warnings[0].startswith("#2 differs from #1 in 5 knobs: a gap between their curves may come from any")
    for change in (
        "`beta` 0.04 → 0",
        "`epsilon_high` 0.2 → 0.28",
        "`dynamic_sampling` False → True",
        "`loss_agg_mode` seq-mean-token-mean → token-mean",
        "`overlong_punishment` False → True",
    ):
        assert change in warnings[0]


def test_knob_differences_compares_presets_or_runs_and_leaves_the_seed_out():
    assert knob_differences(get_preset("grpo"), get_preset("grpo", beta=0.1)) == {"beta": (0.04, 0.1)}
    grpo = RunConfig(algo=get_preset("grpo"), task="reverse", seed=0, steps=40)
    assert knob_differences(grpo, RunConfig(algo=get_preset("grpo"), task="reverse", seed=5, steps=40)) == {}
    assert knob_differences(grpo, RunConfig(algo=get_preset("grpo"), task="caesar", seed=0, steps=60)) == {
        "task": ("reverse", "caesar"),
        "steps": (40, 60),
    }
    with pytest.raises(ValueError, match="two presets or two runs"):
        knob_differences(grpo, get_preset("grpo"))


VARIANTS = {"GRPO": "grpo", "DAPO": "dapo"}
KNOBS = ("epsilon_high", "beta", "num_generations", "loss_agg_mode", "dynamic_sampling")


def read(params: dict):
    choices = {"loss_agg_mode": ("token-mean", "seq-mean-token-mean")}
    return share.read(params, VARIANTS, KNOBS, share.check_algo, choices)


def test_url_settings_are_read_typed_and_checked_by_the_engine():
    preset, values, refused = read(
        {
            "algo": "dapo",
            "epsilon_high": "0.31",
            "seed": "1",
            "dynamic_sampling": "false",
            "loss_agg_mode": "token-mean",
        }
    )
    assert preset == "dapo" and not refused
    assert values == {"epsilon_high": 0.31, "seed": 1, "dynamic_sampling": False, "loss_agg_mode": "token-mean"}


@pytest.mark.parametrize(
    "params, named",
    [
        ({"epsilon_high": "abc"}, "epsilon_high"),
        ({"epsilon_high": "-1"}, "epsilon_high"),
        ({"num_generations": "1"}, "num_generations"),
        ({"loss_agg_mode": "mean"}, "loss_agg_mode"),
        ({"algo": "ppo"}, "algo"),
        ({"lam": "0.5"}, "lam"),
    ],
)
def test_a_bad_url_value_is_refused_by_name_and_not_applied(params, named):
    preset, values, refused = read(params)
    assert len(refused) == 1 and named in refused[0]
    assert preset is None and values == {}


def test_a_url_value_allowed_only_beside_a_later_one_is_kept():
    # 256 prompts × GRPO's 8 generations = 2048 responses, over the batch's 1024; × 4 = 1024 is allowed.
    heavy = {"prompts_per_step": "256", "num_generations": "4"}
    preset, values, refused = share.read(heavy, VARIANTS, tuple(heavy), share.check_algo, {})
    assert not refused and values == {"prompts_per_step": 256, "num_generations": 4}
    _, values, refused = share.read({"prompts_per_step": "256"}, VARIANTS, tuple(heavy), share.check_algo, {})
    assert values == {} and len(refused) == 1 and "prompts_per_step" in refused[0]


def test_prediction_answers_come_from_the_records():
    records = [{"step": s, "entropy": 1.0 - 0.1 * s, "clip_frac": 0.0, "advantage_mean": 0.2} for s in range(1, 7)]
    assert end_versus_start("entropy", "entropy")(records)[0] == "lower"
    assert end_versus_start("entropy", "entropy")(records[:3]) is None, "too short to tell"
    assert ever_above("clip_frac", "clip fraction", 0.0)(records)[0] == "no"
    assert mean_near_zero("advantage_mean", "advantage", 0.05)(records)[0] == "clearly positive"
    # A mean that rounds to zero reads without a sign: (−0.0003 + 0.0001) / 2 = −0.0001
    tiny = [{"step": 1, "advantage_mean": -0.0003}, {"step": 2, "advantage_mean": 0.0001}]
    assert mean_near_zero("advantage_mean", "advantage", 0.05)(tiny) == (
        "about 0",
        "the advantage averaged 0.000 over 2 steps",
    )


def test_a_series_lying_on_another_stays_visible():
    # On caesar the reward is the success rate: success is dashed over the solid reward.
    lines = {t.name: t.line.dash for t in figure(CHART["Reward and success rate"], [run("grpo")]).data}
    assert lines == {"reward": "solid", "success rate": "dash"}
    # GRPO's k3 is in use (thick): drawn first, so the thin exact KL on top of it is not hidden.
    names = [t.name for t in figure(CHART["KL to the reference"], [run("grpo")]).data]
    assert names[0] == "k3 (in use)" and names.index("exact") > 0


def test_a_kl_spike_of_one_overlaid_run_puts_the_kl_chart_on_a_log_axis_and_says_so():
    kl = CHART["KL to the reference"]
    near = {"kl_exact": 0.01, "kl_k1": -0.002, "kl_k2": 0.01, "kl_k3": 0.01}
    grpo = ChartRun(
        "#1 · grpo",
        [{"step": s, **{k: v * s / 10 for k, v in near.items()}} for s in range(1, 11)],
        get_preset("grpo"),
        tag="#1",
        colour=run_colour(1),
    )
    # DAPO (β = 0) drifts 300 times further: peak 3.0 against GRPO's 0.01
    dapo = ChartRun(
        "#2 · dapo",
        [{"step": s, **{k: 300 * v * s / 10 for k, v in near.items()}} for s in range(1, 11)],
        get_preset("dapo"),
        tag="#2",
        colour=run_colour(2),
    )
    drawn = figure(kl, [grpo, dapo])
    go.Figure(drawn.to_dict())
    assert drawn.layout.yaxis.type == "log"
    # from 100 times below GRPO's peak (0.01 / 100) to 1.5 times DAPO's (4.5), in log10 units
    assert drawn.layout.yaxis.range == pytest.approx((math.log10(1e-4), math.log10(4.5)))
    assert caption(kl, [grpo, dapo]).endswith(
        "Log axis: #2's peak (3) is 300 times #1's (0.01), which a linear axis would flatten to 0. It starts at "
        "0.0001, 100 times below the lower peak: smaller values and those at or below 0 (k1's negative means) are "
        "not drawn."
    )
    # Runs within 10-fold of each other (peaks 0.01 and 0.05), and one run alone, keep the linear axis and the
    # plain caption.
    closer = [{"step": 1, **{k: 5 * v for k, v in near.items()}}]
    for shown in ([grpo], [grpo, ChartRun("#3", closer, get_preset("dapo"), tag="#3")]):
        assert figure(kl, shown).layout.yaxis.type is None
        assert "Log axis" not in caption(kl, shown)
    assert figure(CHART["Token entropy"], [grpo, dapo]).layout.yaxis.type is None, "only where the chart asks"


def test_a_long_run_label_is_cut_to_fit_a_pill_and_kept_whole_for_its_help():
    runs = [
        FakeJob(1),
        FakeJob(2, beta=0.1),
        FakeJob(3, seed=1, epsilon_high=0.28, loss_agg_mode="token-mean", dynamic_sampling=True),
    ]
    names = labels(runs)
    assert names[3] == "#3 · seed=1, epsilon_high=0.28, loss_agg_mode=token-mean, dynamic_sampling=True"
    assert short_label(names[3]) == "#3 · seed=1, epsilon_high=0.28 +2 more"
    assert len(short_label(names[3]).split(" +")[0]) <= SHORT_LABEL
    assert short_label(names[2]) == "#2 · beta=0.1", "a short label stays whole"
    # one setting longer than the pill: cut to 31 characters and "…" (32)
    assert (
        short_label("#4 · loss_agg_mode=seq-mean-token-sum-norm, seed=2") == "#4 · loss_agg_mode=seq-mean-tok… +1 more"
    )
    help_text = full_labels([1, 2, 3], names)
    assert help_text.endswith(f"- {names[3]}") and "#2" not in help_text, "only the cut labels, in full"
    assert full_labels([1, 2], names) == ""


def test_the_token_view_names_a_run_by_its_number_and_variant():
    dppo = FakeJob(3, variant="DPPO (Binary-TV)", epsilon_high=0.2, loss_agg_mode="token-mean", seed=1)
    assert token_label(dppo) == "#3 · DPPO (Binary-TV)"


def test_captions_follow_a_teachers_per_token_signal_and_a_batch_without_groups():
    # opd adds log π_T − log π_θ to every token: its advantages are neither centred per response nor 0 in sum.
    advantages = caption(CHART["Advantages"], [run("opd")])
    assert advantages.startswith(CHART["Advantages"].caption) and "Per token" in advantages
    assert "centred over the responses" not in advantages
    assert "exactly 0" not in caption(CHART["Loss parts"], [run("opd")])
    # One response per prompt (PG): the chart's group series cannot appear, and the caption says so, naming only
    # the runs it applies to when overlaid with a grouped run.
    batch = CHART["Batch composition"]
    assert "no groups" in caption(batch, [run("pg")]) and "no groups" not in caption(batch, [run("grpo")])
    assert "#2: With one response per prompt" in caption(batch, [run("grpo", 1), run("pg", 2)])
    assert "#1:" not in caption(batch, [run("grpo", 1), run("pg", 2)])


def test_a_distillation_runs_reward_is_named_as_measured_not_trained_on():
    """On-policy distillation never trains on the verifier's reward; its chart must not read as if it did."""
    chart = CHART["Reward and success rate"]
    assert [t.name for t in figure(chart, [run("opd")]).data] == ["reward (measured, not trained on)", "success rate"]
    assert [t.name for t in figure(chart, [run("grpo")]).data] == ["reward", "success rate"]


def test_a_short_runs_step_axis_spans_exactly_the_steps_trained():
    """Plotly's own range padded a 10-step run's axis to 0.27–12.5 (its step marker's label pushed it past 10):
    every chart against the step now spans the steps drawn, a tick on each, the label reading inwards at the end."""
    from ui.compare import band_figure
    from ui.live_fit import step_figure

    ten = figure(CHART["Reward and success rate"], [run("grpo")], marked_step=10)
    assert list(ten.layout.xaxis.range) == [1, 10] and ten.layout.xaxis.dtick == 1
    assert ten.layout.annotations[0].xanchor == "right"
    assert figure(CHART["Token entropy"], [run("grpo")], marked_step=2).layout.annotations[0].xanchor == "left"
    assert all(trace.cliponaxis is False for trace in ten.data)  # the end points' markers drawn whole
    assert list(figure(CHART["Token entropy"], [run("grpo", steps=1)]).layout.xaxis.range) == [0.5, 1.5]
    long = figure(CHART["Token entropy"], [run("grpo", steps=300)])
    assert list(long.layout.xaxis.range) == [1, 300] and long.layout.xaxis.dtick is None
    groups = {"grpo": [[{"step": s, "entropy": 1.0} for s in range(1, 11)]] * 2}
    assert list(band_figure("entropy", groups).layout.xaxis.range) == [1, 10]
    # DPO's first record is the evaluation before any step: its axis starts at 0.
    dpo = [{"step": 0, "eval_loss": 0.69}] + [{"step": s, "loss": 0.6, "eval_loss": 0.6} for s in range(1, 6)]
    assert list(step_figure("Loss", dpo, [("loss", "loss"), ("eval_loss", "held-out")]).layout.xaxis.range) == [0, 5]


def test_the_explained_variance_caption_says_why_it_stays_near_zero_where_each_return_is_the_reward():
    """VAPO's critic targets (γ = λ_critic = 1, β = 0) are its response's reward at every token, as the engine's
    estimator gives them; the caption says so, and so what the critic would have to tell apart. PPO's targets
    (λ_critic unset, a KL in the reward) vary along a response: no such sentence."""
    lengths = torch.tensor([3, 5, 2, 4])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).double()
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    token_rewards = torch.zeros(4, 5, dtype=torch.float64)
    token_rewards[torch.arange(4), lengths - 1] = rewards
    values = torch.rand(4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * mask
    vapo = get_preset("vapo")
    _, returns = estimate_advantages(vapo, AdvantageInputs(token_rewards, mask, values, 1))
    torch.testing.assert_close(returns, rewards[:, None] * mask)
    why = "every token's return is its response's final reward"
    assert why in caption(CHART["Explained variance"], [run("vapo")])
    assert why not in caption(CHART["Explained variance"], [run("ppo")])


def test_a_rate_on_compare_is_drawn_on_a_zero_to_one_axis():
    """A success rate flat at 0 got plotly's −1…1 axis; a rate is now read against 0…1, other curves keep theirs."""
    from ui.compare import band_figure

    flat = {"grpo": [[{"step": s, "success_rate": 0.0, "entropy": 0.0} for s in range(1, 6)]] * 2}
    assert list(band_figure("success_rate", flat).layout.yaxis.range) == [-0.02, 1.02]
    assert band_figure("entropy", flat).layout.yaxis.range is None


def test_a_line_flat_at_zero_is_drawn_on_an_axis_from_zero_not_minus_one():
    """Plotly gives a flat line at 0 the axis −1…1: a clip fraction or a success rate of 0 read as if it could be
    negative. Values that are all ≥ 0 keep the axis at or above 0; a negative value keeps plotly's own."""
    from ui.compare import band_figure

    flat = [
        {"step": s, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "reward_mean": 0.0, "success_rate": 0.0}
        for s in range(1, 4)
    ]
    for title in ("Clip fraction (tokens)", "Reward and success rate"):
        assert figure(CHART[title], [ChartRun("#1", flat, get_preset("grpo"))]).layout.yaxis.rangemode == "nonnegative"
    negative = [dict(record, reward_mean=-0.5) for record in flat]
    chart = figure(CHART["Reward and success rate"], [ChartRun("#1", negative, get_preset("grpo"))])
    assert chart.layout.yaxis.rangemode is None
    groups = {"grpo": [[{"step": s, "entropy": 0.0} for s in range(1, 4)]]}
    assert band_figure("entropy", groups).layout.yaxis.rangemode == "nonnegative"


def test_reward_stays_visible_under_a_success_rate_that_lies_on_it():
    """With a 0/1 reward the two lines coincide: the reward is drawn wider, the success rate dashed on top."""
    same = [{"step": s, "reward_mean": 0.5, "success_rate": 0.5} for s in range(1, 4)]
    drawn = {
        t.name: t.line
        for t in figure(CHART["Reward and success rate"], [ChartRun("#1", same, get_preset("grpo"))]).data
    }
    assert drawn["reward"].width > drawn["success rate"].width and drawn["success rate"].dash == "dash"


def test_an_unset_knob_without_a_widget_reads_off_not_none():
    from ui.knobs import KNOBS, difference_text

    assert "reward_clip" not in KNOBS
    assert difference_text("reward_clip", 5.0, None) == "`reward_clip` 5.0 → off"
