"""The token view: a step's sampled responses as text, each token coloured by one per-token quantity with its
number under it, and one token's term of the policy loss worked out by the engine's own loss function."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import torch

from rl_core.config import AlgoConfig
from rl_core.losses import clipped_surrogate_loss, gspo_loss, gspo_token_loss, vanilla_pg_loss

EOS_TOKEN = "<eos>"


@dataclass(frozen=True)
class Colouring:
    label: str
    field: str  # the per-token list in a sample view
    legend: str


COLOURINGS: dict[str, Colouring] = {
    c.label: c
    for c in (
        Colouring(
            "advantage",
            "advantages",
            "green: A > 0 (this token's probability is pushed up), red: A < 0 (pushed down); deeper = larger |A|.",
        ),
        Colouring(
            "ratio",
            "ratios",
            "π_θ / π_old after this step's updates. Blue: the token became likelier, orange: less likely; "
            "deeper = further from 1 on a log scale.",
        ),
        Colouring(
            "clipped",
            "clipped",
            "Amber: the clip was active on this token after the updates (ρ beyond the range on the side the "
            "advantage pushes), so it gave no gradient on its last minibatch.",
        ),
        Colouring(
            "silenced",
            "silenced",
            "Crimson: the run's own loss gave this token no gradient although A ≠ 0 (PPO's active clip, DPPO's "
            "probability mask, a sample MIS dropped). CISPO and SAPO never silence a token: set 'clipped' beside "
            "it to see the tokens PPO's rule would have cut that they still move.",
        ),
        Colouring("entropy", "entropies", "Purple: the policy's entropy when it chose this token; deeper = less sure."),
    )
}


# Yes/no views: the colour of a marked token and the word written under it.
FLAGS = {"clipped": ("rgba(255,179,0,0.75)", "clip"), "silenced": ("rgba(200,30,90,0.65)", "0·∇")}


def _rgba(rgb: tuple[int, int, int], strength: float) -> str:
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.72 * min(max(strength, 0.0), 1.0):.2f})"


def _background(colouring: Colouring, value, scale: float) -> str:
    if colouring.field in FLAGS:
        return FLAGS[colouring.field][0] if value else "transparent"
    if colouring.field == "advantages":
        return _rgba((46, 160, 67) if value >= 0 else (218, 54, 51), abs(value) / scale)
    if colouring.field == "ratios":
        log_ratio = math.log(max(value, 1e-12))
        return _rgba((31, 119, 180) if log_ratio >= 0 else (255, 127, 14), abs(log_ratio) / scale)
    return _rgba((128, 60, 170), value / scale)


def _scale(colouring: Colouring, samples: list[dict]) -> float:
    """The value that gets the deepest colour: the largest magnitude on display, so colours compare across rows."""
    values = [v for s in samples for v in s.get(colouring.field, ())]
    if colouring.field == "ratios":
        values = [math.log(max(v, 1e-12)) for v in values]
    return max((abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0) or 1.0


def _number(colouring: Colouring, value) -> str:
    if colouring.field in FLAGS:
        return FLAGS[colouring.field][1] if value else "·"
    return f"{value:+.2f}" if colouring.field == "advantages" else f"{value:.2f}"


def legend_html(samples: list[dict], colour_by: str) -> str:
    """The colour scale of this view with its end values."""
    colouring = COLOURINGS[colour_by]
    scale = _scale(colouring, samples)
    if colouring.field in FLAGS:
        colour, mark = FLAGS[colouring.field]
        ends = [(colour, f"{mark}: {colouring.label}"), ("transparent", f"not {colouring.label}")]
    elif colouring.field == "advantages":
        ends = [(_background(colouring, -scale, scale), f"A = {-scale:+.2f}"),
                (_background(colouring, 0.0, scale), "A = 0"),
                (_background(colouring, scale, scale), f"A = {scale:+.2f}")]
    elif colouring.field == "ratios":
        ends = [(_background(colouring, math.exp(-scale), scale), f"ρ = {math.exp(-scale):.2f}"),
                (_background(colouring, 1.0, scale), "ρ = 1"), (_background(colouring, math.exp(scale), scale),
                                                               f"ρ = {math.exp(scale):.2f}")]
    else:
        ends = [(_background(colouring, 0.0, scale), "H = 0"),
                (_background(colouring, scale, scale), f"H = {scale:.2f}")]
    swatches = "".join(
        f'<span style="background:{colour};border:1px solid #ccc;padding:1px 8px;margin-right:4px;'
        f'border-radius:3px">{html.escape(label)}</span>'
        for colour, label in ends
    )
    return f'<div style="font-size:0.85rem;margin:2px 0 6px">{swatches}</div>'


def token_html(samples: list[dict], colour_by: str) -> str:
    """One line per sample: prompt, coloured response tokens with their number underneath, reward and
    success; hover a token for all its numbers."""
    colouring = COLOURINGS[colour_by]
    scale = _scale(colouring, samples)
    rows = []
    for row, sample in enumerate(samples, start=1):
        spans = []
        for i, token in enumerate(sample["tokens"]):
            value = sample.get(colouring.field, [False] * len(sample["tokens"]))[i]
            silenced = sample.get("silenced", [False] * len(sample["tokens"]))[i]
            tip = (
                f"token {i}: A={sample['advantages'][i]:+.3f}  ρ={sample['ratios'][i]:.3f}  "
                f"H={sample['entropies'][i]:.3f}{'  clipped' if sample['clipped'][i] else ''}"
                f"{'  no gradient' if silenced else ''}"
            )
            text = "⏎" if token == EOS_TOKEN else html.escape(token)
            spans.append(
                f'<span title="{html.escape(tip)}" style="display:inline-block;text-align:center;'
                f'background:{_background(colouring, value, scale)};padding:1px 3px;margin:0 1px;border-radius:3px">'
                f'{text}<br><span style="font-family:sans-serif;font-size:0.62rem;color:#444">'
                f"{_number(colouring, value)}</span></span>"
            )
        verdict = "✓ solved" if sample["success"] else "✗ not solved"
        if sample["truncated"]:
            verdict += ", cut at the length limit"
        rows.append(
            '<div style="font-family:monospace;font-size:1.0rem;margin:3px 0">'
            f'<span style="color:#888">{row}. {html.escape(sample["prompt"])}</span> {"".join(spans)} '
            f'<span style="font-family:sans-serif;font-size:0.85rem;color:#666">'
            f'reward {sample["reward"]:+.2f} · {verdict}</span></div>'
        )
    return "".join(rows)


@dataclass(frozen=True)
class TokenTerm:
    """One token's share of the policy loss, as the engine's loss function computes it."""

    ratio: float  # ρ_t = π_θ / π_old after the step's updates (GSPO: the response's sequence ratio s)
    advantage: float
    case: str  # which clip case holds, in words
    loss: float  # the token's term ℓ_t of the per-token policy loss
    weight: float  # −∂ℓ_t/∂log π_θ(a_t): how hard this token's log-probability is pushed up (negative: down)


def token_term(sample: dict, index: int, algo: AlgoConfig) -> TokenTerm:
    """Token `index` of `sample` put through the run's policy loss (rl_core.losses) with log π_old = 0 and
    log π_θ = log ρ, so its loss and its gradient weight are the ones the last update saw."""
    log_ratio = torch.tensor([[math.log(max(r, 1e-12)) for r in sample["ratios"]]], dtype=torch.float64,
                             requires_grad=True)
    old = torch.zeros_like(log_ratio)
    token_adv = torch.tensor([sample["advantages"]], dtype=torch.float64)
    mask = torch.ones_like(old)
    sequence = algo.policy_loss in ("gspo", "gspo_token")
    if algo.policy_loss == "vanilla":
        loss = vanilla_pg_loss(log_ratio, token_adv)
    elif sequence:
        function = gspo_loss if algo.policy_loss == "gspo" else gspo_token_loss
        loss = function(log_ratio, old, token_adv.mean(-1), mask, algo.epsilon, algo.epsilon_high)
    else:
        loss = clipped_surrogate_loss(log_ratio, old, token_adv, algo.epsilon, algo.epsilon_high, algo.dual_clip)
    (grad,) = torch.autograd.grad(loss[0, index], log_ratio)
    ratio = math.exp(log_ratio.detach().mean().item()) if sequence else sample["ratios"][index]
    advantage = token_adv.mean().item() if sequence else sample["advantages"][index]
    return TokenTerm(ratio, advantage, clip_case(ratio, advantage, algo), loss[0, index].item(),
                     -grad[0, index].item())


def clip_case(ratio: float, advantage: float, algo: AlgoConfig) -> str:
    if algo.policy_loss == "vanilla":
        return "no clip: vanilla policy gradient, every token keeps its gradient −A"
    low, high = 1 - algo.epsilon, 1 + algo.epsilon_high
    side = "A > 0" if advantage > 0 else "A < 0" if advantage < 0 else "A = 0"
    if advantage == 0:
        return "A = 0: no push either way"
    if advantage > 0 and ratio > high:
        return f"{side}, ρ > 1+ε_high = {high:.4g}: clipped, no gradient (already pushed up far enough)"
    if advantage < 0 and ratio < low:
        return f"{side}, ρ < 1−ε_low = {low:.4g}: clipped, no gradient (already pushed down far enough)"
    if advantage < 0 and algo.dual_clip is not None and ratio > algo.dual_clip:
        return f"{side}, ρ > c = {algo.dual_clip:g}: dual clip caps the loss, no gradient"
    return f"{side}, ρ inside the range that binds for this sign: unclipped, full gradient"
