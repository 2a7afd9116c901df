"""The symbols of the formulas, explained on hover: under each formula, the symbols it uses, each with its
meaning as a tooltip (an HTML `abbr`), so a learner never has to scroll back to find what ρ or Â was."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Symbol:
    shown: str  # as the tooltip's anchor shows it
    pattern: str  # a regular expression that finds it in a formula's LaTeX
    meaning: str


GLOSSARY = (
    Symbol(
        "ρ",
        r"\\rho(?![A-Za-z])",
        "ρ, the importance ratio π_θ(token) / π_old(token): how much more (or less) likely the "
        "policy being updated makes a token than the policy that sampled it. 1 on the first update.",
    ),
    Symbol(
        "Â",
        r"\\hat\s*\{?\s*A",
        "Â, the advantage: how much better this response (or token) did than expected. "
        "Positive pushes its probability up, negative down.",
    ),
    Symbol(
        "k1 · k2 · k3",
        r"k_?\{?[123]\b|k_\{?\\?text\{?[123]",
        "k1, k2, k3: three estimates of the KL from samples. k1 = log π_θ − log π_ref (unbiased, can be negative), "
        "k2 = ½(log ratio)² (biased, always ≥ 0), k3 = ratio − 1 − log ratio with ratio = π_ref/π_θ (unbiased and "
        "always ≥ 0: Schulman's estimator).",
    ),
    Symbol(
        "ε_low · ε_high",
        r"\\(?:var)?epsilon_\{?\s*(?:\\text\{)?(?:low|high|max)|1\s*[-+]\s*\\(?:var)?epsilon",
        "ε_low, ε_high: the clip range. The ratio ρ may move to 1 − ε_low (for Â < 0) or 1 + ε_high (for Â > 0) "
        "before the clip stops the gradient; DAPO's clip-higher sets ε_high > ε_low. CISPO's ε_max is its "
        "ε_high: the cap of its detached weight.",
    ),
    # G as the group size only: a return is written G_t, which this leaves out.
    Symbol(
        "G",
        r"\{G\}|(?<![A-Za-z\\])G\s*-\s*1|R_G|\\frac1G",
        "G, the group size (num_generations): how many responses are sampled for each prompt. Group methods "
        "(GRPO, RLOO, …) compare a response with the other G − 1.",
    ),
    Symbol(
        "λ",
        r"\\lambda(?![A-Za-z])",
        "λ, GAE's trade-off: 0 uses one step of the critic (low variance, biased by the "
        "critic), 1 the whole return (unbiased, high variance).",
    ),
    Symbol(
        "β", r"\\beta(?![A-Za-z])", "β, the KL coefficient: how hard the policy is pulled back towards the reference."
    ),
    Symbol(
        "μ",
        r"\\mu\s*\(",
        "μ, the behaviour policy: the one that actually sampled the batch (an older policy, or "
        "a sampler with other kernels), when it differs from π_old. (GRPO's paper also "
        "writes μ for the updates per batch: ppo_epochs × num_minibatches here.)",
    ),
)


def symbols_in(latex: str) -> list[Symbol]:
    """The glossary's symbols that appear in this LaTeX, in the glossary's order."""
    return [symbol for symbol in GLOSSARY if re.search(symbol.pattern, latex)]


def glossary_html(latex: str) -> str:
    """A line of the formula's symbols, each with its meaning as a tooltip; empty when it uses none."""
    symbols = symbols_in(latex)
    if not symbols:
        return ""
    items = " · ".join(
        f'<abbr title="{html.escape(s.meaning, quote=True)}" style="cursor:help">{html.escape(s.shown)}</abbr>'
        for s in symbols
    )
    return f'<div style="font-size:0.8rem;opacity:0.75">Symbols (hover): {items}</div>'
