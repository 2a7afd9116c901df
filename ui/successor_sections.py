"""The 2025–26 sections of the Clip and KL labs: controls, figures and what to notice, one call per lab.
The figures and numbers come from `ui.successor_overlays`."""

from __future__ import annotations

import streamlit as st
import torch

from rl_core.formulas.kl import kl_k3_is_corrected, kl_k3_with_k2_grad
from rl_core.formulas.losses import cispo_loss, dppo_tv_mask, sapo_loss
from ui import successor_overlays as overlays
from ui.story import formula


def clip_lab_overlays(epsilon_low: float, epsilon_high: float, dual_clip: float | None) -> None:
    """CISPO, SAPO and DPPO next to the clip set by the page's ε sliders and dual-clip switch."""
    st.header("2025–26: keep the gradient, bound the step differently")
    st.markdown(
        "PPO's clip bounds the step by switching the gradient off. Three successors keep it on and bound the step "
        "another way: CISPO clips the *weight* of a token and keeps its gradient, SAPO replaces the hard cut by a "
        "smooth gate, DPPO measures the step in probability instead of ratio."
    )
    formula(
        "CISPO: a clipped, detached weight",
        r"L_t = -\,\mathrm{sg}\big[\min(\rho_t, \varepsilon_{max})\big]\, A_t \log\pi_\theta(a_t)",
        cispo_loss,
    )
    cap_column, sided_column = st.columns(2)
    cap = cap_column.select_slider("CISPO ε_max", [1.5, 2.0, 3.0, 5.0, 8.0], 5.0, key="clip_cispo_cap")
    two_sided = sided_column.toggle("two-sided clamp [1 − ε_low, 1 + ε_high] (verl)", key="clip_cispo_two_sided")
    table = overlays.cispo_weights(epsilon_low, epsilon_high, cap, two_sided, dual_clip)
    st.plotly_chart(overlays.cispo_figure(table), key="clip_cispo_chart")
    st.caption("What to notice: " + overlays.cispo_summary(table) + " Shaded: PPO silent, CISPO not.")

    formula(
        "SAPO: a soft gate instead of the clip",
        [
            r"L_t = -A_t\, g_\tau(\rho_t),\qquad g_\tau(\rho) = \tfrac{4}{\tau}\,\sigma\big(\tau(\rho - 1)\big)",
            r"\partial L_t / \partial \log\pi_\theta = -A_t\,\rho_t\, 4\sigma(1-\sigma)",
        ],
        sapo_loss,
    )
    pos_column, neg_column = st.columns(2)
    tau_pos = pos_column.select_slider("τ_pos (A > 0)", [0.5, 1.0, 2.0, 4.0, 8.0], 1.0, key="clip_sapo_tau_pos")
    tau_neg = neg_column.select_slider("τ_neg (A < 0)", [0.5, 1.05, 2.0, 4.0, 8.0], 1.05, key="clip_sapo_tau_neg")
    table = overlays.sapo_curves(epsilon_low, epsilon_high, tau_pos, tau_neg, dual_clip)
    st.plotly_chart(overlays.sapo_figure(table), key="clip_sapo_chart")
    st.caption("What to notice: " + overlays.sapo_summary(table))

    formula(
        "DPPO-Binary-TV: a trust region in probability",
        r"m_t = \begin{cases} \mathbb{1}[p - p_{old} \le \delta_{high}] & A_t > 0 \\ "
        r"\mathbb{1}[p - p_{old} \ge -\delta_{low}] & A_t \le 0 \end{cases}",
        dppo_tv_mask,
    )
    low_column, high_column = st.columns(2)
    delta_low = low_column.select_slider("δ_low", [0.05, 0.1, 0.15, 0.2, 0.3], 0.15, key="clip_dppo_low")
    delta_high = high_column.select_slider("δ_high", [0.05, 0.1, 0.15, 0.2, 0.3], 0.15, key="clip_dppo_high")
    table = overlays.trust_regions(epsilon_low, epsilon_high, delta_low, delta_high)
    st.plotly_chart(
        overlays.trust_region_figure(table, epsilon_low, epsilon_high, delta_low, delta_high), key="clip_dppo_chart"
    )
    st.caption("What to notice: " + overlays.trust_region_summary(table, epsilon_high, delta_high))


def kl_gradient_view(logits: torch.Tensor, ref_logits: torch.Tensor) -> None:
    """The expected gradient of each KL term against the true gradient, for a sampler that may lag π_θ."""
    st.header("The gradient of the KL term")
    st.markdown(
        "In the loss, what matters is not the estimate's value but its **gradient**. Differentiating k3 sample by "
        "sample does not give the gradient of KL(π_θ‖π_ref); weighting it by the ratio ρ = π_θ/π_old, or keeping "
        "k3's value with k2's gradient, does — and when the tokens come from a sampler π_old that lags behind π_θ, "
        "only the importance-weighted term stays right. The bars are exact expectations over the six tokens."
    )
    formula(
        "Importance-corrected k3",
        r"\rho_t\, k_{3,t},\qquad \rho_t = \pi_\theta(a_t)/\pi_{old}(a_t)",
        kl_k3_is_corrected,
    )
    formula("k3's value with k2's gradient (verl k3+)", r"k_3 + k_2 - \mathrm{sg}[k_2]", kl_k3_with_k2_grad)
    lag = st.slider(
        "sampler lag: π_old lies this far back from π_θ towards π_ref", 0.0, 1.0, 0.0, 0.05, key="kl_sampler_lag"
    )
    old_logits = logits - lag * (logits - ref_logits)
    table = overlays.kl_gradients(logits, ref_logits, old_logits)
    st.plotly_chart(overlays.kl_gradient_figure(table), key="kl_gradient_chart")
    st.dataframe(
        table,
        hide_index=True,
        key="kl_gradient_table",
        column_config={
            c: st.column_config.NumberColumn(format="%.2e" if c == "gradient error" else "%.4f")
            for c in table.columns
            if c != "term"
        },
    )
    st.caption("What to notice: " + overlays.kl_gradient_summary(table))
