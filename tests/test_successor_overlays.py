"""The Clip and KL labs' 2025–26 overlays: every number checked against a hand computation."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from ui import successor_overlays as overlays
from ui.labs.kl import shaped_logits

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def _at(table, sign, ratio, column):
    rows = table[table["sign"] == sign]
    return float(np.interp(ratio, rows["ratio"], rows[column]))


def test_cispo_keeps_a_weight_where_ppo_gives_none():
    table = overlays.cispo_weights(0.2, 0.28, cispo_cap=5.0)
    assert _at(table, "A > 0", 1.0, "PPO") == pytest.approx(1.0, abs=1e-3)  # inside the range: weight ρ
    assert _at(table, "A > 0", 2.0, "PPO") == 0.0  # ρ > 1 + ε_high with A > 0: clipped
    assert _at(table, "A > 0", 2.0, "CISPO") == pytest.approx(2.0, abs=1e-2)  # min(ρ, 5)
    assert _at(table, "A > 0", 5.4, "CISPO") == pytest.approx(5.0)  # capped at ε_max
    assert _at(table, "A < 0", 0.5, "PPO") == 0.0 and _at(table, "A < 0", 0.5, "CISPO") == pytest.approx(0.5, abs=1e-2)
    assert (table["CISPO"] > 0).all()
    two_sided = overlays.cispo_weights(0.2, 0.28, cispo_cap=5.0, two_sided=True)
    assert _at(two_sided, "A > 0", 2.0, "CISPO") == pytest.approx(1.28)
    assert _at(two_sided, "A < 0", 0.5, "CISPO") == pytest.approx(0.8)
    assert "CISPO's weight is never zero" in overlays.cispo_summary(table)


def test_sapo_weight_is_one_on_policy_and_follows_the_gate_slope():
    table = overlays.sapo_curves(0.2, 0.28, tau_pos=1.0, tau_neg=4.0)
    for sign in ("A > 0", "A < 0"):
        assert _at(table, sign, 1.0, "SAPO") == pytest.approx(1.0, abs=1e-3)
    sigma = 1 / (1 + math.exp(-1.0))  # τ = 1, ρ = 2: weight ρ·4σ(1 − σ)
    assert _at(table, "A > 0", 2.0, "SAPO") == pytest.approx(2 * 4 * sigma * (1 - sigma), rel=1e-3)
    sigma = 1 / (1 + math.exp(-4.0 * (0.5 - 1)))  # τ = 4, ρ = 0.5
    assert _at(table, "A < 0", 0.5, "SAPO") == pytest.approx(0.5 * 4 * sigma * (1 - sigma), rel=1e-3)
    assert _at(table, "A > 0", 2.0, "gate") == pytest.approx(4 / 1.0 / (1 + math.exp(-1.0)), rel=1e-3)


def test_trust_regions_follow_the_ratio_and_probability_bands():
    eps_low, eps_high, d_low, d_high = 0.2, 0.28, 0.1, 0.15
    table = overlays.trust_regions(eps_low, eps_high, d_low, d_high, points=61)
    ratio = table["p_new"] / table["p_old"]
    change = table["p_new"] - table["p_old"]
    positive = table["sign"] == "A > 0"
    ppo = np.where(positive, ratio <= 1 + eps_high, ratio >= 1 - eps_low)
    dppo = np.where(positive, change <= d_high, change >= -d_low)
    # Away from the boundaries (where float rounding decides), the categories are the hand-written rules.
    clear = np.where(positive, (ratio - 1 - eps_high).abs() > 1e-9, (ratio - 1 + eps_low).abs() > 1e-9)
    clear &= np.where(positive, (change - d_high).abs() > 1e-9, (change + d_low).abs() > 1e-9)
    assert (table["PPO keeps"].to_numpy() == ppo)[clear].all()
    assert (table["DPPO keeps"].to_numpy() == dppo)[clear].all()
    text = overlays.trust_region_summary(table, eps_high, d_high)
    assert "stops once p passes 0.0256" in text and "only past 0.17" in text


def test_kl_gradients_against_the_analytic_gradient_of_the_kl():
    logits, ref = shaped_logits(1.5, 2.5, "ran"), shaped_logits(1.0)
    on_policy = overlays.kl_gradients(logits, ref, logits).set_index("term")
    p, q = torch.softmax(logits, -1), torch.softmax(ref, -1)
    kl = (p * (p.log() - q.log())).sum()
    analytic = p * (p.log() - q.log() - kl)  # ∂KL(softmax θ ‖ q)/∂θ_v
    columns = [c for c in on_policy.columns if c.startswith("∂/∂logit")]
    assert on_policy.loc["true KL(π_θ‖π_ref)", columns].to_numpy() == pytest.approx(analytic.numpy(), abs=1e-12)
    assert on_policy.loc["k3 (plain)", "expected value"] == pytest.approx(kl.item())  # unbiased value on-policy
    assert on_policy.loc["k3 (plain)", "gradient error"] > 0.01  # but not the KL's gradient
    assert on_policy.loc["ρ·k3 (importance-corrected)", "gradient error"] < 1e-9
    assert on_policy.loc["k3 value, k2 gradient (k3+)", "gradient error"] < 1e-9
    lagging_table = overlays.kl_gradients(logits, ref, logits - 0.5 * (logits - ref))
    lagging = lagging_table.set_index("term")
    assert lagging.loc["ρ·k3 (importance-corrected)", "expected value"] == pytest.approx(kl.item())
    assert lagging.loc["ρ·k3 (importance-corrected)", "gradient error"] < 1e-9
    assert lagging.loc["k3 value, k2 gradient (k3+)", "gradient error"] > 0.01  # k3+ needs on-policy samples
    assert "Exactly the true gradient: ρ·k3 (importance-corrected)." in overlays.kl_gradient_summary(lagging_table)


@pytest.mark.parametrize("page, charts", [("labs_clip", 5), ("labs_kl", 3)])
def test_the_labs_draw_the_overlays(page, charts):
    """The Clip lab's surrogate and GSPO charts plus CISPO, SAPO and DPPO; the KL lab's two plus the gradients."""
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == charts


def test_the_beyond_grpo_page_renders_and_its_variants_load_their_presets():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/beyond_grpo.py").run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Beyond GRPO (2025–26)"
    at.radio(key="beyond_grpo:variant").set_value("CISPO").run()
    assert at.session_state["beyond_grpo:values"]["policy_loss"] == "cispo"
    assert at.session_state["beyond_grpo:values"]["epsilon_high"] == 5.0
    assert not at.exception, at.exception


@pytest.mark.slow
def test_the_beyond_grpo_page_trains_cispo_and_exports_it():
    from test_app_pages import quick_settings, train

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/beyond_grpo.py").run()
    at.radio(key="beyond_grpo:variant").set_value("CISPO").run()
    quick_settings(at, "beyond_grpo")
    try:
        snap = train(at, "beyond_grpo")
        assert snap.status == "finished" and len(snap.records) == 2
        assert any("loss_type='cispo',  # policy_loss=cispo" in c.value for c in at.get("code"))
    finally:
        for job in at.session_state["beyond_grpo:runs"]:
            job.stop()
            job.join(5)


def test_the_sapo_caption_reads_ppo_at_its_ratios_and_names_a_clip_edge_there():
    # ε_low = 0.5 puts PPO's lower edge at ρ = 0.5 for A < 0: no gradient below it, weight ρ = 0.5 above it.
    summary = overlays.sapo_summary(overlays.sapo_curves(0.5, 0.28, tau_pos=1.0, tau_neg=1.05))
    assert "ρ = 0.5 → SAPO 0.47 / PPO 0.00 below, 0.50 above (an edge of the clip)" in summary
    assert "−0.00" not in summary and "-0.00" not in summary
    # Away from an edge one number: PPO's weight ρ for A < 0 inside and above the range (no dual clip).
    assert "ρ = 2.5 → SAPO 1.42 / PPO 2.50" in summary


def test_the_successor_panels_clip_ppo_as_the_lab_does_dual_clip_included():
    # Dual clip c = 2: for A < 0 the loss is capped at −c·A once ρ > 2, so PPO's weight there is 0, not ρ.
    summary = overlays.sapo_summary(overlays.sapo_curves(0.2, 0.28, tau_pos=1.0, tau_neg=1.05, dual_clip=2.0))
    assert "ρ = 2.5 → SAPO 1.42 / PPO 0.00" in summary and "ρ = 1.5 → SAPO 1.40 / PPO 1.50" in summary
    # CISPO's panel: PPO silent for A < 0 below 1 − ε_low = 0.8 and again above c = 2, two separate spans.
    table = overlays.cispo_weights(0.2, 0.28, cispo_cap=5.0, dual_clip=2.0)
    (low, high), (low2, high2) = overlays.silenced_spans(table[table["sign"] == "A < 0"])
    step = float(overlays._ratio_grid(ratio_max=5.5)[1] - overlays._ratio_grid(ratio_max=5.5)[0])
    assert low == pytest.approx(0.05) and high == pytest.approx(0.8, abs=step)
    assert low2 == pytest.approx(2.0, abs=step) and high2 == pytest.approx(5.5)
    assert "[0.05, 0.80] and [2.0" in overlays.cispo_summary(table)
