"""The Labs' tables and figures against hand-computed values of the formulas they picture."""

import math

import numpy as np
import plotly.graph_objects as go
import pytest
import torch

from ui.labs import advantages, aggregation, clip, gae, kl
from ui.labs.figures import log_ticks

# --- Clip lab -----------------------------------------------------------------------------------------------


def test_surrogate_curves_match_the_clipped_objective_and_its_slope():
    curves = clip.surrogate_curves(0.2, 0.28)
    for sign, a in clip.ADVANTAGE_SIGNS.items():
        curve = curves[curves["sign"] == sign]
        rho = curve["ratio"].to_numpy()
        expected = np.minimum(rho * a, np.clip(rho, 0.8, 1.28) * a)
        np.testing.assert_allclose(curve["objective"], expected, atol=1e-12)
        np.testing.assert_allclose(curve["unclipped"], rho * a, atol=1e-12)
        # Away from the kinks the slope is A where the unclipped term is the minimum, 0 where the clip is.
        unclipped_wins = (rho * a < np.clip(rho, 0.8, 1.28) * a - 1e-9) | ((rho > 0.8 + 1e-9) & (rho < 1.28 - 1e-9))
        clipped_wins = np.clip(rho, 0.8, 1.28) * a < rho * a - 1e-9
        np.testing.assert_allclose(curve["gradient"][unclipped_wins], a)
        np.testing.assert_allclose(curve["gradient"][clipped_wins], 0.0)


def test_zero_gradient_region_is_above_one_plus_eps_high_for_positive_and_below_one_minus_eps_low_for_negative():
    curves = clip.surrogate_curves(0.2, 0.28)
    step = curves["ratio"].diff().abs().dropna().max()
    intervals = clip.zero_gradient_intervals(curves).set_index("sign")
    assert len(intervals) == 2
    assert 1.28 < intervals.loc["A > 0", "start"] <= 1.28 + step
    assert intervals.loc["A > 0", "end"] == pytest.approx(curves["ratio"].max())
    assert intervals.loc["A < 0", "start"] == pytest.approx(curves["ratio"].min())
    assert 0.8 - step <= intervals.loc["A < 0", "end"] < 0.8


def test_dual_clip_adds_a_flat_region_beyond_c_for_negative_advantages_only():
    curves = clip.surrogate_curves(0.2, 0.2, dual_clip=3.0)
    step = curves["ratio"].diff().abs().dropna().max()
    negative = clip.zero_gradient_intervals(curves).query("sign == 'A < 0'")
    assert len(negative) == 2
    assert 3.0 < negative["start"].iloc[1] <= 3.0 + step
    beyond_c = curves[(curves["sign"] == "A < 0") & (curves["ratio"] > 3.0)]
    np.testing.assert_allclose(beyond_c["objective"], -3.0)  # −L = c·A with A = −1


def test_clip_cases_are_the_six_cases_and_the_dual_clip_a_seventh():
    cases = clip.clip_cases(0.2, 0.28)
    assert list(cases["case"]) == [1, 2, 3, 4, 5, 6]
    assert list(cases["∂(−L)/∂ρ"]) == pytest.approx([1, 1, 0, 0, -1, -1])
    assert list(cases["gradient"] == "zero (clipped)") == [False, False, True, True, False, False]
    # The clipped cases sit at the bound: (1 + ε_high)·A and (1 − ε_low)·A.
    assert cases.loc[2, "objective −L"] == pytest.approx(1.28)
    assert cases.loc[3, "objective −L"] == pytest.approx(-0.8)
    dual = clip.clip_cases(0.2, 0.28, dual_clip=3.0)
    assert len(dual) == 7
    assert dual.loc[6, "∂(−L)/∂ρ"] == 0 and dual.loc[6, "objective −L"] == pytest.approx(-3.0)
    assert dual.loc[5, "∂(−L)/∂ρ"] == pytest.approx(-1)  # between 1 + ε_high and c the min still pushes


def test_surrogate_figure_shades_each_zero_gradient_run_on_both_rows():
    curves, cases = clip.surrogate_curves(0.2, 0.28), clip.clip_cases(0.2, 0.28)
    fig = clip.surrogate_figure(curves, cases, 0.2, 0.28, None)
    bands = [shape for shape in fig.layout.shapes if shape.type == "rect"]
    intervals = clip.zero_gradient_intervals(curves)
    assert [(band.x0, band.x1) for band in bands] == list(zip(intervals["start"], intervals["end"]))
    assert [trace.y.tolist() for trace in fig.data[2::3]] == [
        curves.loc[curves["sign"] == sign, "gradient"].tolist() for sign in clip.ADVANTAGE_SIGNS
    ]
    assert len([note for note in fig.layout.annotations if note.text.startswith("<b>")]) == 6


@pytest.mark.parametrize("sign", ["A > 0", "A < 0"])
def test_gspo_sequence_ratio_is_the_geometric_mean_and_clips_only_on_the_side_of_the_advantage(sign):
    log_ratios = list(clip.EXAMPLE_LOG_RATIOS)
    advantage = clip.ADVANTAGE_SIGNS[sign]
    table, s = clip.gspo_token_table(log_ratios, advantage, 0.2, 0.28, 3e-4, 4e-4)
    ratios = np.exp(log_ratios)
    assert s == pytest.approx(np.prod(ratios) ** (1 / len(ratios)))
    expected_token_clip = ratios > 1.28 if advantage > 0 else ratios < 0.8
    assert table["token clip: clipped"].tolist() == expected_token_clip.tolist()
    sequence_clipped = s > 1 + 4e-4 if advantage > 0 else s < 1 - 3e-4
    assert table["sequence clip: clipped"].tolist() == [sequence_clipped] * len(ratios)
    assert f"{int(expected_token_clip.sum())} of {len(ratios)} tokens" in clip.gspo_summary(table, s, 3e-4, 4e-4)


def test_random_log_ratios_are_seeded():
    assert clip.random_log_ratios(6, 0.3, seed=4) == clip.random_log_ratios(6, 0.3, seed=4)
    assert clip.random_log_ratios(6, 0.3, seed=4) != clip.random_log_ratios(6, 0.3, seed=5)


# --- GAE lab ------------------------------------------------------------------------------------------------

REWARD_AT_END = [0.0, 0.0, 0.0, 1.0]
RM_CRITIC = gae.CRITICS[2]


def test_gae_with_lambda_one_gives_returns_minus_values():
    table = gae.gae_table([0.5, 0.0, -1.0, 2.0], RM_CRITIC, gamma=1.0, lam_actor=1.0, lam_critic=1.0)
    returns = np.array([1.5, 1.0, 1.0, 2.0])  # Σ_{t' ≥ t} r_t'
    values = np.array([0.375, 0.75, 1.125, 1.5])  # t/T · Σ r
    np.testing.assert_allclose(table["value V(s_t)"], values)
    np.testing.assert_allclose(table["advantage A_t (λ_actor)"], returns - values)
    np.testing.assert_allclose(table["critic target (λ_critic)"], returns)


def test_reward_model_critic_makes_every_early_td_error_positive_and_token_one_the_most_favoured():
    table = gae.gae_table(REWARD_AT_END, RM_CRITIC, gamma=1.0, lam_actor=0.9, lam_critic=1.0)
    np.testing.assert_allclose(table["TD error δ_t"], [0.25, 0.25, 0.25, 0.0])
    # A_t = Σ_l λ^l δ_{t+l}: 0.25·(1 + 0.9 + 0.81), 0.25·(1 + 0.9), 0.25, 0.
    np.testing.assert_allclose(table["advantage A_t (λ_actor)"], [0.6775, 0.475, 0.25, 0.0])
    summary = gae.gae_summary(table, 1.0, 0.9)
    assert summary.startswith("Token 1 gets the largest advantage (A = 0.677")
    assert "Every δ_t before the last token is positive" in summary and "grows towards the start" in summary


def test_the_gae_summary_claims_the_advantage_grows_towards_the_start_only_where_it_does():
    # λ = 0: A_t = δ_t = 0.25 on tokens 1–3, nothing piles up.
    flat = gae.gae_table(REWARD_AT_END, RM_CRITIC, gamma=1.0, lam_actor=0.0, lam_critic=1.0)
    np.testing.assert_allclose(flat["advantage A_t (λ_actor)"], [0.25, 0.25, 0.25, 0.0])
    summary = gae.gae_summary(flat, 1.0, 0.0)
    assert summary.startswith("Tokens 1–3 share the largest advantage (A = 0.250)")
    assert "γλ = 0" in summary and "grows towards the start" not in summary
    # γ = 0 does the same whatever λ.
    assert "grows towards the start" not in gae.gae_summary(
        gae.gae_table(REWARD_AT_END, RM_CRITIC, gamma=0.0, lam_actor=0.9, lam_critic=1.0), 0.0, 0.9
    )
    # A zero critic makes δ_t = r_t; rewards 0.1, 0.1, 1 then 0 with γλ = 0.5: A = 0.4, 0.6, 1, 0, every early δ
    # positive yet the advantage grows towards the end.
    late = gae.gae_table([0.1, 0.1, 1.0, 0.0], gae.CRITICS[0], gamma=1.0, lam_actor=0.5, lam_critic=1.0)
    np.testing.assert_allclose(late["advantage A_t (λ_actor)"], [0.4, 0.6, 1.0, 0.0])
    summary = gae.gae_summary(late, 1.0, 0.5)
    assert summary.startswith("Token 3 gets") and "does not grow steadily towards the start" in summary


def test_perfect_critic_leaves_nothing_to_learn():
    table = gae.gae_table(REWARD_AT_END, gae.CRITICS[1], gamma=0.9, lam_actor=0.95, lam_critic=1.0)
    np.testing.assert_allclose(table["value V(s_t)"], [0.729, 0.81, 0.9, 1.0])
    np.testing.assert_allclose(table["advantage A_t (λ_actor)"], 0.0, atol=1e-12)
    assert gae.gae_summary(table, 0.9, 0.95).startswith("Every advantage is 0")


def test_decay_columns_are_gamma_lambda_to_the_distance_from_the_end():
    table = gae.gae_table(REWARD_AT_END, gae.CRITICS[0], gamma=0.9, lam_actor=0.5, lam_critic=1.0)
    np.testing.assert_allclose(table["weight of r_T (λ_actor)"], [0.45**3, 0.45**2, 0.45, 1.0])
    np.testing.assert_allclose(table["weight of r_T (λ_critic)"], [0.9**3, 0.9**2, 0.9, 1.0])
    # With a zero critic and one reward at the end, the advantage is exactly that decay.
    np.testing.assert_allclose(table["advantage A_t (λ_actor)"], table["weight of r_T (λ_actor)"])
    assert "receives 0.0911 of the final reward" in gae.decay_summary(table, 0.5, 1.0)


def test_length_adaptive_lambda_table():
    table = gae.length_adaptive_table(0.5, lengths=(8, 40))
    np.testing.assert_allclose(table["λ_actor = 1 − 1/(α|y|)"], [0.75, 0.95])
    np.testing.assert_allclose(table["α·|y| = 1/(1 − λ)"], [4.0, 20.0])
    np.testing.assert_allclose(table["weight of r_T at token 1 (adaptive λ)"], [0.75**7, 0.95**39])
    np.testing.assert_allclose(table["weight of r_T at token 1 (λ = 0.95)"], [0.95**7, 0.95**39])
    assert "0.133 of the final reward at 8 tokens" in gae.length_adaptive_summary(table)


def test_the_length_adaptive_figure_labels_its_log_axis_in_full():
    axis = gae.length_adaptive_figure(0.5).layout.xaxis
    assert axis.type == "log" and list(axis.ticktext) == ["1", "10", "100", "1,000", "10,000"]


def test_gae_figure_draws_the_table():
    table = gae.gae_table(REWARD_AT_END, RM_CRITIC, gamma=1.0, lam_actor=0.9, lam_critic=1.0)
    fig = gae.gae_figure(table)
    by_name = {trace.name: list(trace.y) for trace in fig.data}
    for column in ("TD error δ_t", "advantage A_t (λ_actor)", "critic target (λ_critic)", "value V(s_t)"):
        assert by_name[column] == pytest.approx(table[column].tolist())
    # Every series is in the reward's units, and the y axis says so.
    assert fig.layout.yaxis.title.text == "δ, A, target, V (reward units)"


# --- KL lab -------------------------------------------------------------------------------------------------


def test_exact_kl_of_two_known_distributions():
    p = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
    q = torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64)
    # 0.5·ln 2 + 0.25·ln 1 + 0.25·ln ½ = ¼ ln 2
    assert kl.exact_kl(p.log(), q.log()) == pytest.approx(0.25 * math.log(2))


def test_shaped_logits_apply_temperature_then_boost():
    logits = kl.shaped_logits(0.5, boost=2.0, favourite="dog")
    expected = torch.tensor([2.4, 1.6, 0.6, 2.0, -0.8, -1.8], dtype=torch.float64)
    torch.testing.assert_close(logits, expected)


def test_kl_samples_evaluate_each_estimator_on_the_drawn_token():
    logits, ref_logits = kl.shaped_logits(1.5, 2.5, "ran"), kl.shaped_logits(1.0)
    samples = kl.kl_samples(logits, ref_logits, n=50, seed=3)
    logp = torch.log_softmax(logits, -1).numpy()
    ref_logp = torch.log_softmax(ref_logits, -1).numpy()
    index = [kl.VOCABULARY.index(token) for token in samples["token"]]
    log_r = ref_logp[index] - logp[index]
    np.testing.assert_allclose(samples["k1"], -log_r)
    np.testing.assert_allclose(samples["k2"], 0.5 * log_r**2)
    np.testing.assert_allclose(samples["k3"], np.exp(log_r) - 1 - log_r)
    assert samples.equals(kl.kl_samples(logits, ref_logits, n=50, seed=3))


def test_bias_and_variance_table_shows_k1_k3_unbiased_k2_biased_and_variance_falling_as_one_over_n():
    logits, ref_logits = kl.shaped_logits(1.5, 2.5, "ran"), kl.shaped_logits(1.0)
    table = kl.estimator_bias_variance(logits, ref_logits, sample_sizes=(10, 1000), distances=(1.0,))
    p = torch.softmax(logits, -1).numpy()
    log_r = (torch.log_softmax(ref_logits, -1) - torch.log_softmax(logits, -1)).numpy()
    exact = float(np.sum(p * -log_r))
    assert table["exact KL"].iloc[0] == pytest.approx(exact)
    large_n = table[table["N"] == 1000].iloc[0]
    for name in ("k1", "k3"):
        standard_error = math.sqrt(large_n[f"{name} variance"] / 200)
        assert abs(large_n[f"{name} bias"]) < 4 * standard_error
    assert large_n["k2 bias"] == pytest.approx(float(np.sum(p * 0.5 * log_r**2)) - exact, rel=0.05)
    small_n = table[table["N"] == 10].iloc[0]
    for name in ("k1", "k2", "k3"):
        assert 50 < small_n[f"{name} variance"] / large_n[f"{name} variance"] < 200


def test_kl_summary_reports_where_k3_stops_being_steadier_than_k1():
    logits, ref_logits = kl.shaped_logits(1.5, 2.5, "ran"), kl.shaped_logits(1.0)
    table = kl.estimator_bias_variance(logits, ref_logits)
    summary = kl.kl_summary(kl.kl_samples(logits, ref_logits, 100, 0), kl.exact_kl(logits, ref_logits), table)
    largest_n = table[table["N"] == 1000]
    steadier = largest_n.loc[largest_n["k3 variance"] < largest_n["k1 variance"], "distance κ"].tolist()
    assert steadier == [0.5, 1.0]
    assert "below k1's at κ = 0.5, 1 but above it at κ = 2" in summary


def test_kl_histograms_mark_the_exact_value_on_every_panel():
    logits, ref_logits = kl.shaped_logits(1.5, 2.5, "ran"), kl.shaped_logits(1.0)
    samples = kl.kl_samples(logits, ref_logits, 100, 0)
    fig = kl.kl_histograms(samples, 0.123)
    solid = [shape.x0 for shape in fig.layout.shapes if shape.line.dash is None]
    assert solid == [0.123] * 3
    assert [list(trace.x) for trace in fig.data] == [samples[name].tolist() for name in ("k1", "k2", "k3")]
    # Both lines are named once in the legend; every panel says what its axes count.
    assert [(shape.name, shape.showlegend) for shape in fig.layout.shapes[:2]] == [
        ("exact KL", True),
        ("mean of the samples", True),
    ]
    assert not any(shape.showlegend for shape in fig.layout.shapes[2:]) and fig.layout.showlegend
    assert [fig.layout[f"xaxis{k}"].title.text for k in ("", "2", "3")] == [
        "k1 of one sampled token",
        "k2 of one sampled token",
        "k3 of one sampled token",
    ]
    assert fig.layout.yaxis.title.text == "samples"
    go.Figure(fig.to_dict())  # valid with plotly's validation on


# --- Advantage lab ------------------------------------------------------------------------------------------


def test_group_advantages_for_one_success_in_four():
    table = advantages.group_advantages([[1, 0, 0, 0]])
    # mean ¼, Bessel std ½ → GRPO (R − ¼)/½; RLOO baseline is the mean of the other three.
    np.testing.assert_allclose(table["GRPO"], [1.5, -0.5, -0.5, -0.5], atol=1e-5)
    np.testing.assert_allclose(table["Dr. GRPO"], [0.75, -0.25, -0.25, -0.25])
    np.testing.assert_allclose(table["RLOO"], [1.0, -1 / 3, -1 / 3, -1 / 3])
    # Whitened with the population std √(3/16) over the four responses.
    np.testing.assert_allclose(table["REINFORCE++-baseline"], np.array([0.75, -0.25, -0.25, -0.25]) / math.sqrt(3 / 16))
    assert "RLOO / Dr. GRPO = 1.333" in advantages.advantage_summary(table)


def test_equal_rewards_give_zero_advantage_and_a_message_saying_so():
    table = advantages.group_advantages([[1, 0, 0, 0], [1, 1, 1, 1]])
    dead = table[table["group"] == 2]
    assert (dead[list(advantages.GROUP_ESTIMATORS)] == 0).all().all()
    messages = advantages.zero_advantage_messages(table)
    assert messages[0].startswith("Group 2: every response scored 1")
    assert messages[1].startswith("50%")
    assert advantages.zero_advantage_messages(advantages.group_advantages([[1, 0], [0, 1]])) == []


def test_reinforce_pp_baseline_whitens_over_the_whole_batch_not_per_group():
    table = advantages.group_advantages([[1, 0], [3, 0]])
    centred = np.array([0.5, -0.5, 1.5, -1.5])
    np.testing.assert_allclose(table["REINFORCE++-baseline"], centred / centred.std(), rtol=1e-6)
    np.testing.assert_allclose(table["GRPO"], [1 / math.sqrt(2), -1 / math.sqrt(2)] * 2, rtol=1e-5)


def test_groups_must_have_one_size():
    with pytest.raises(ValueError):
        advantages.group_advantages([[1, 0, 0], [1, 0]])


# --- Aggregation lab ----------------------------------------------------------------------------------------


def test_token_weights_short_correct_and_long_wrong():
    table = aggregation.aggregation_table([10, 1000], [1.0, -1.0]).set_index(["mode", "length"])
    weight = table["weight per token"]
    assert weight["token-mean", 10] == pytest.approx(1 / 1010)
    assert weight["token-mean", 1000] == pytest.approx(1 / 1010)
    assert weight["seq-mean-token-mean", 10] == pytest.approx(1 / (2 * 10))
    assert weight["seq-mean-token-mean", 1000] == pytest.approx(1 / (2 * 1000))
    # T_max is the generation limit, 2000, not the longest response (1000): B · T_max = 4000.
    assert weight["seq-mean-token-sum-norm", 10] == pytest.approx(1 / 4000)
    assert weight["seq-mean-token-sum-norm", 1000] == pytest.approx(1 / 4000)
    push = table["total push on log π"]
    assert push["seq-mean-token-sum-norm", 1000] == pytest.approx(-1000 / 4000)
    assert push["token-mean", 1000] == pytest.approx(-1000 / 1010)
    assert push["seq-mean-token-mean", 1000] == pytest.approx(-0.5)
    assert push["seq-mean-token-mean", 10] == pytest.approx(0.5)
    if "seq-mean-token-sum" in weight.index.get_level_values(0):
        assert weight["seq-mean-token-sum", 10] == pytest.approx(1 / 2)
        assert push["seq-mean-token-sum", 1000] == pytest.approx(-500)


def test_the_aggregation_bars_clear_the_top_and_bottom_of_their_log_axes():
    """Lengths 10 and 1000 with A = ±1: a token weighs from 1/4000 (seq-mean-token-sum-norm, 1/(B · T_max)) to 1/2
    (seq-mean-token-sum, 1/B), and the total push runs from 10 · 1/4000 = 0.0025 (seq-mean-token-sum-norm, the short
    one) to 1000 · 1/2 = 500 (seq-mean-token-sum, the long one). Each axis reaches a factor of 2 past both ends, so
    the tallest bar stays under the top of the plot and the shortest still rises above its bottom."""
    fig = aggregation.aggregation_figure(aggregation.aggregation_table([10, 1000], [1.0, -1.0]))
    assert fig.layout.yaxis.range == pytest.approx((math.log10(1 / 8000), math.log10(1.0)))
    assert fig.layout.yaxis2.range == pytest.approx((math.log10(0.00125), math.log10(1000)))


def test_dr_grpo_divides_by_the_generation_limit_whatever_the_batch_holds():
    # A longer first response leaves the second response's push as it was: T_max does not follow the batch.
    before = aggregation.aggregation_table([10, 1000], [1.0, -1.0]).set_index(["mode", "length"])
    after = aggregation.aggregation_table([2000, 1000], [1.0, -1.0]).set_index(["mode", "length"])
    push = "total push on log π"
    assert after.loc[("seq-mean-token-sum-norm", 1000), push] == before.loc[("seq-mean-token-sum-norm", 1000), push]
    assert after.loc[("seq-mean-token-sum-norm", 2000), push] == pytest.approx(2000 / 4000)
    # token-mean's normaliser is the batch's token count, so there the same change does move it: 1000/1010 → 1000/3000.
    assert after.loc[("token-mean", 1000), push] == pytest.approx(-1000 / 3000)


def test_token_weights_are_constant_within_a_response_and_zero_on_padding():
    weights, push, mask = aggregation.token_weights([3, 5], [1.0, -2.0], "seq-mean-token-mean")
    torch.testing.assert_close(weights, torch.tensor([[1 / 6] * 3 + [0] * 2, [1 / 10] * 5], dtype=torch.float64))
    torch.testing.assert_close(push, weights * torch.tensor([[1.0], [-2.0]], dtype=torch.float64))
    assert mask.sum().item() == 8


def test_aggregation_summary_and_figure():
    table = aggregation.aggregation_table([10, 1000], [1.0, -1.0])
    summary = aggregation.aggregation_summary(table)
    assert "seq-mean-token-mean: one token of y1 (10 tokens) weighs 100× one of y2 (1000 tokens)" in summary
    # Named as the sliders number them, also once the first response is the longer one.
    swapped = aggregation.aggregation_summary(aggregation.aggregation_table([2000, 1000], [1.0, -1.0]))
    # seq-mean-token-mean: a token weighs 1/(B·|y|), so y2's 1/2000 is 2× y1's 1/4000, and y1's push is 2000/4000.
    assert (
        "seq-mean-token-mean: one token of y2 (1000 tokens) weighs 2× one of y1 (2000 tokens), whose tokens get "
        "a total push of +0.500"
    ) in swapped
    fig = aggregation.aggregation_figure(table)
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    # Weights 1/4000 to 1/2, over three decades: the powers of ten alone, labelled in full.
    assert list(fig.layout.yaxis.ticktext) == ["0.0001", "0.001", "0.01", "0.1", "1"]
    # Within three decades 1, 2 and 5 times each power, never plotly's bare "5, 2".
    assert log_ticks([0.125, 6])["ticktext"] == ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50"]
    short = aggregation.aggregation_figure(aggregation.aggregation_table([3, 12], [1.0, -1.0]))
    for axis in (fig.layout.yaxis, fig.layout.yaxis2, short.layout.yaxis, short.layout.yaxis2):
        assert [float(text.replace(",", "")) for text in axis.ticktext] == pytest.approx(list(axis.tickvals))
    long_push = [trace for trace in fig.data if trace.name.startswith("y2") and trace.xaxis == "x2"][0]
    assert list(long_push.y) == pytest.approx(table.loc[table["length"] == 1000, "total push on log π"].abs().tolist())


def test_the_labs_write_their_numbers_with_the_labs_formatter():
    """A lab's sentences and labels write a minus as "−" (rl_core.numbers.number), never as a hyphen; no lab
    formats a number itself in an f-string."""
    import re
    from pathlib import Path

    table = aggregation.aggregation_table([3, 9], [1.0, -1.0])
    assert "y2: 9 tokens, A = −1" in set(table["response"])
    own_format = re.compile(r"\{[^{}]+:[+,]?[.0-9]*[fgde%]\}")
    for path in sorted((Path(__file__).resolve().parents[1] / "ui" / "labs").glob("*.py")):
        assert not own_format.search(path.read_text()), path.name


def test_a_labs_table_shows_its_numbers_with_the_labs_formatter_and_keeps_the_values():
    import pandas as pd

    from ui.labs.figures import readable

    table = pd.DataFrame({"name": ["a", "b"], "k1 bias": [-0.00263, 0.5]})
    html = readable(table, ".2e").to_html()
    assert "−2.63×10⁻³" in html and "5.00×10⁻¹" in html and "-2.63" not in html
    assert readable(table).data["k1 bias"].tolist() == [-0.00263, 0.5], "the values underneath stay numbers"
    assert ">0.5<" in readable(pd.DataFrame({"κ": [0.5], "k1 bias": [-0.00263]}), ".3g", ["k1 bias"]).to_html(), (
        "the other float columns: four significant digits, not pandas' six decimals"
    )
