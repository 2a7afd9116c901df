"""Building blocks of a page's story: a formula beside the code that computes it, and the teaching notes
that several algorithms share."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import streamlit as st

from ui.glossary import glossary_html


def formula(title: str, latex: str | list[str], implementation: Callable, explanation: str = "") -> None:
    """The formula (st.latex) with what it means on the left, the rl_core function that runs it on the right,
    folded: a listing beside a two-line formula would leave a gap as tall as the listing."""
    st.markdown(f"##### {title}")
    left, right = st.columns([6, 5], gap="medium")
    with left:
        lines = [latex] if isinstance(latex, str) else latex
        for line in lines:
            st.latex(line)
        if symbols := glossary_html(" ".join(lines)):
            st.markdown(symbols, unsafe_allow_html=True)
        if explanation:
            st.markdown(explanation)
    with right.expander(f"Code: `{implementation.__module__}.{implementation.__qualname__}`", icon=":material/code:"):
        st.caption("The function the lab runs.")
        st.code(inspect.getsource(implementation), language="python", wrap_lines=True)


def ratio_is_one() -> None:
    """The trap every clip-based page must point out."""
    st.info(
        "**The ratio is exactly 1 on the first update.** The batch was sampled by the very policy being "
        "updated, so before its first optimiser step π_θ = π_old on every token: the clip cannot fire, the "
        "ε sliders change nothing and the clip-fraction chart stays at 0. Only from the second minibatch or "
        "epoch on has the policy moved away from the one that sampled the data. That is why this preset "
        "reuses each batch (epochs × minibatches > 1); set both to 1 in the lab and watch the clip fraction "
        "drop to zero.",
        icon=":material/warning:",
    )
