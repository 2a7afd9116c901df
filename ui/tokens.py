"""The token view: a step's sampled responses as text, each token coloured by one per-token quantity with its
number under it, and one token's term of the run's own loss (its policy loss, and its KL term where one acts) worked
out by the engine's own loss functions."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from rl_core.config import AlgoConfig
from rl_core.formulas import kl as kl_estimators
from rl_core.formulas.estimators import policy_loss
from rl_core.formulas.loss_terms import KL_IN_LOSS, LossInputs
from rl_core.formulas.losses import dppo_tv_mask, gspo_sequence_ratio, sapo_gate
from rl_core.numbers import number, tex

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
    return number(value, "+.2f" if colouring.field == "advantages" else ".2f")


def legend_html(samples: list[dict], colour_by: str) -> str:
    """The colour scale of this view with its end values."""
    colouring = COLOURINGS[colour_by]
    scale = _scale(colouring, samples)
    if colouring.field in FLAGS:
        colour, mark = FLAGS[colouring.field]
        ends = [(colour, f"{mark}: {colouring.label}"), ("transparent", f"not {colouring.label}")]
    elif colouring.field == "advantages":
        ends = [
            (_background(colouring, -scale, scale), f"A = {number(-scale, '+.2f')}"),
            (_background(colouring, 0.0, scale), "A = 0"),
            (_background(colouring, scale, scale), f"A = {number(scale, '+.2f')}"),
        ]
    elif colouring.field == "ratios":
        ends = [
            (_background(colouring, math.exp(-scale), scale), f"ρ = {number(math.exp(-scale), '.2f')}"),
            (_background(colouring, 1.0, scale), "ρ = 1"),
            (_background(colouring, math.exp(scale), scale), f"ρ = {number(math.exp(scale), '.2f')}"),
        ]
    else:
        ends = [
            (_background(colouring, 0.0, scale), "H = 0"),
            (_background(colouring, scale, scale), f"H = {number(scale, '.2f')}"),
        ]
    swatches = "".join(
        f'<span style="background:{colour};border:1px solid #ccc;padding:1px 8px;margin-right:4px;'
        f'border-radius:3px">{html.escape(label)}</span>'
        for colour, label in ends
    )
    return f'<div style="font-size:0.85rem;margin:2px 0 6px">{swatches}</div>'


def token_html(samples: list[dict], colour_by: str, headings: Mapping[int, str] | None = None) -> str:
    """One line per sample: prompt, coloured response tokens with their number underneath, reward and
    success; hover a token for all its numbers. `headings[i]` is a line drawn above sample i (a group's summary);
    one colour scale spans every sample."""
    colouring = COLOURINGS[colour_by]
    scale = _scale(colouring, samples)
    # Every row's "n. prompt" takes the width of the widest (in characters of the monospace font), so the
    # tiles start in one column: "10." is a character wider than "9.", and prompts can differ in length.
    digits = len(str(len(samples)))
    lead = max((digits + 2 + len(sample["prompt"]) for sample in samples), default=0)
    rows = []
    for row, sample in enumerate(samples, start=1):
        if headings and row - 1 in headings:
            rows.append(
                '<div style="font-family:sans-serif;font-size:0.85rem;color:#444;margin:8px 0 2px;'
                f'border-top:1px solid #ddd;padding-top:4px">{html.escape(headings[row - 1])}</div>'
            )
        spans = []
        for i, token in enumerate(sample["tokens"]):
            value = sample.get(colouring.field, [False] * len(sample["tokens"]))[i]
            silenced = sample.get("silenced", [False] * len(sample["tokens"]))[i]
            tip = (
                f"token {i}: A={number(sample['advantages'][i], '+.3f')}  ρ={number(sample['ratios'][i], '.3f')}  "
                f"H={number(sample['entropies'][i], '.3f')}{'  clipped' if sample['clipped'][i] else ''}"
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
            f'<span style="color:#888;display:inline-block;min-width:{lead}ch;white-space:pre">'
            f"{row:>{digits}}. {html.escape(sample['prompt'])}</span> {''.join(spans)} "
            f'<span style="font-family:sans-serif;font-size:0.85rem;color:#666">'
            f"reward {number(sample['reward'], '+.2f')} · {verdict}</span></div>"
        )
    return "".join(rows)


def groups(samples: list[dict], num_generations: int) -> list[list[dict]]:
    """A step's recorded responses by group: the trainer records the batch's first rows, and rows i·G to
    i·G + G − 1 answer the same prompt (`rl_core.engine.rollout.sample`). The last group may be partial."""
    return [samples[start : start + num_generations] for start in range(0, len(samples), num_generations)]


def group_summary(index: int, group: list[dict]) -> str:
    """One group in words: its number, prompt, how many solved it, and whether it teaches anything (A ≠ 0)."""
    solved = sum(sample["success"] for sample in group)
    advantages = [a for sample in group for a in sample["advantages"]]
    signal = (
        "A = 0 on every token: no gradient"
        if not any(advantages)
        else f"A from {number(min(advantages), '+.2f')} to {number(max(advantages), '+.2f')}"
    )
    return f"group {index + 1} · {group[0]['prompt']} · {solved} of {len(group)} solved · {signal}"


@dataclass(frozen=True)
class TokenTerm:
    """One token's share of the loss, as the engine's loss functions compute it."""

    ratio: float  # ρ_t = π_θ / π_old after the step's updates (GSPO: the response's sequence ratio s)
    advantage: float
    case: str  # what the run's loss does with this token, in words
    loss: float  # the token's term ℓ_t of the per-token policy loss
    weight: float  # −∂ℓ_t/∂log π_θ(a_t): how hard this token's log-probability is pushed up (negative: down)
    formula: str  # LaTeX: the run's own per-token loss with this token's numbers filled in
    kl: float | None = None  # β·k_t, the token's KL term of the loss (None where no KL term acts)
    kl_weight: float = 0.0  # −∂(β·k_t)/∂log π_θ(a_t)


def token_term(sample: dict, index: int, algo: AlgoConfig, beta: float | None = None) -> TokenTerm:
    """Token `index` of `sample` put through the run's policy loss (`rl_core.formulas.estimators.policy_loss`, the
    functions of rl_core.formulas.losses) at the log-probabilities the sample recorded after the step's updates, so its
    loss and its gradient weight are the ones the last update saw; with a KL term in the loss (β > 0, `beta` the
    step's coefficient, else the config's), its β·k_t as `rl_core.formulas.loss_terms` builds it."""
    logp = torch.tensor([sample["log_probs"]], dtype=torch.float64, requires_grad=True)
    old = torch.tensor([sample["old_log_probs"]], dtype=torch.float64)
    ref = torch.tensor([sample["ref_log_probs"]], dtype=torch.float64)
    token_adv = torch.tensor([sample["advantages"]], dtype=torch.float64)
    mask = torch.ones_like(old)
    loss = policy_loss(algo, logp, old, token_adv, mask)
    (grad,) = torch.autograd.grad(loss[0, index], logp)
    sequence = algo.policy_loss in ("gspo", "gspo_token")
    ratio = (
        gspo_sequence_ratio(logp.detach(), old, mask).item()
        if sequence
        else math.exp(sample["log_probs"][index] - sample["old_log_probs"][index])
    )
    advantage = token_adv.mean().item() if sequence else sample["advantages"][index]
    value = loss[0, index].item()
    case, formula = _LOSS_VIEWS.get(algo.policy_loss, _clip_view)(
        algo, ratio, advantage, sample["log_probs"][index], sample["old_log_probs"][index], value
    )
    beta = algo.beta if beta is None else beta
    if algo.kl_in != "loss" or beta <= 0:
        return TokenTerm(ratio, advantage, case, value, -grad[0, index].item(), _lines(formula))
    inputs = LossInputs(algo, None, logp, old, ref, token_adv, mask, beta, len(sample["log_probs"]))
    kl = kl_estimators.clamped_kl(KL_IN_LOSS[algo.kl_gradient](inputs), logp, ref)[0, index]
    (kl_grad,) = torch.autograd.grad(beta * kl, logp)
    formula += (
        rf" \\ \text{{KL term: }} +\,\beta\,{_KL_SYMBOL[algo.kl_gradient](algo)} = {tex(beta, 'g')} \cdot "
        rf"{tex(kl.item(), '.4g')} = {tex(beta * kl.item(), '+.4g')}"
    )  # significant digits: β·k is tiny
    return TokenTerm(
        ratio,
        advantage,
        case,
        value,
        -grad[0, index].item(),
        _lines(formula),
        beta * kl.item(),
        -kl_grad[0, index].item(),
    )


def _lines(formula: str) -> str:
    """The formula's lines (split by \\\\: the loss, then its numbers, then the KL term) centred one under another,
    so that no line runs off the page."""
    return rf"\begin{{gathered}} {formula} \end{{gathered}}"


_KL_SYMBOL = {
    "plain": lambda algo: f"k_{algo.kl_estimator[1]}",
    "is_corrected": lambda algo: r"\rho_t k_3",
    "k2_grad": lambda algo: r"k_3^{+}",
}


def _side(advantage: float) -> str:
    return "A > 0" if advantage > 0 else "A < 0" if advantage < 0 else "A = 0"


def _vanilla_view(algo, ratio, advantage, logp, old_logp, loss):
    return (
        "no clip: vanilla policy gradient, every token keeps its gradient A",
        rf"\ell_t = -A_t \log\pi_\theta(a_t) = -({tex(advantage, '+.4f')})({logp:.4f}) = {tex(loss, '+.4f')}",
    )


def _clip_view(algo, ratio, advantage, logp, old_logp, loss):
    rho = "s" if algo.policy_loss in ("gspo", "gspo_token") else r"\rho_t"
    low, high = tex(algo.epsilon, "g"), tex(algo.epsilon_high, "g")
    surrogate = rf"-\min\big({rho} A,\ \mathrm{{clip}}({rho}, 1-{low}, 1+{high})\,A\big)"
    if algo.dual_clip is not None and advantage < 0:  # the dual clip caps a negative token's loss at −c·A
        surrogate = rf"\min\big({surrogate},\ -{tex(algo.dual_clip, 'g')}A\big)"
    return (
        clip_case(ratio, advantage, algo),
        rf"\ell_t = {surrogate} \\ {rho} = {ratio:.4f},\ A = {tex(advantage, '+.4f')} \;\Rightarrow\; "
        rf"\ell_t = {tex(loss, '+.4f')}",
    )


def _cispo_view(algo, ratio, advantage, logp, old_logp, loss):
    if algo.cispo_two_sided:
        low, high = 1 - algo.epsilon, 1 + algo.epsilon_high
        weight = min(max(ratio, low), high)
        bound = rf"\mathrm{{clip}}(\rho_t, {tex(low, 'g')}, {tex(high, 'g')})"
        clamped = ratio < low or ratio > high
    else:
        weight = min(ratio, algo.epsilon_high)
        bound = rf"\min(\rho_t, {tex(algo.epsilon_high, 'g')})"
        clamped = ratio > algo.epsilon_high
    how = (
        f"ρ = {number(ratio, '.4g')} clamped to the weight w = {number(weight, '.4g')}"
        if clamped
        else f"weight w = ρ = {number(ratio, '.4g')}"
    )
    push = "no push either way" if advantage == 0 else "the gradient flows: CISPO never silences a token"
    return (
        f"{_side(advantage)}, {how} (detached): {push}",
        rf"\ell_t = -\mathrm{{sg}}[{bound}]\,A\log\pi_\theta(a_t) \\ \rho_t = {ratio:.4f},\ "
        rf"w = {weight:.4f},\ A = {tex(advantage, '+.4f')},\ \log\pi_\theta = {logp:.4f} \;\Rightarrow\; "
        rf"\ell_t = {tex(loss, '+.4f')}",
    )


def _sapo_view(algo, ratio, advantage, logp, old_logp, loss):
    tau = algo.sapo_tau_pos if advantage > 0 else algo.sapo_tau_neg
    gate = sapo_gate(torch.tensor(ratio, dtype=torch.float64), tau).item()
    sigma = torch.sigmoid(torch.tensor(tau * (ratio - 1), dtype=torch.float64)).item()
    slope = 4 * sigma * (1 - sigma)  # dg/dρ: the gate's scale on the plain gradient ρ·A
    which = "τ_pos" if advantage > 0 else "τ_neg"
    push = (
        "no push either way"
        if advantage == 0
        else f"the gradient ρA is scaled by the gate's slope 4σ(1−σ) = {number(slope, '.4f')}, softly, never cut to 0"
    )
    return (
        f"{_side(advantage)}, soft gate g = {number(gate, '.4f')} at ρ = {number(ratio, '.4g')} "
        f"({which} = {number(tau, 'g')}): {push}",
        rf"\ell_t = -A\,g_\tau(\rho_t) = -A\,\tfrac{{4}}{{\tau}}\,\sigma\big(\tau(\rho_t-1)\big) \\ "
        rf"\rho_t = {ratio:.4f},\ \tau = {tex(tau, 'g')},\ g = {gate:.4f},\ "
        rf"A = {tex(advantage, '+.4f')} \;\Rightarrow\; "
        rf"\ell_t = {tex(loss, '+.4f')}",
    )


def _dppo_view(algo, ratio, advantage, logp, old_logp, loss):
    p, p_old = math.exp(logp), math.exp(old_logp)
    kept = bool(
        dppo_tv_mask(
            torch.tensor(p), torch.tensor(p_old), torch.tensor(advantage), algo.dppo_delta_low, algo.dppo_delta_high
        )
    )
    change = p - p_old
    if advantage > 0:
        band = (
            f"p − p_old = {number(change, '+.4f')} {'≤' if kept else '>'} δ_high = {number(algo.dppo_delta_high, 'g')}"
        )
    else:  # A = 0 is checked as A ≤ 0, as in verl
        band = (
            f"p − p_old = {number(change, '+.4f')} {'≥' if kept else '<'} −δ_low = {number(-algo.dppo_delta_low, 'g')}"
        )
    if advantage == 0:
        verdict = f"{'kept' if kept else 'masked'}, and A = 0: no push either way"
    elif kept:
        verdict = (
            f"inside the band, kept (m = 1): gradient with weight min(ρ, c) = "
            f"{number(min(ratio, algo.dppo_ratio_cap), '.4g')}"
        )
    else:
        verdict = (
            "masked (m = 0), no gradient: its probability already moved more than δ in the direction "
            "its advantage pushes"
        )
    return (
        f"{_side(advantage)}, {band}: {verdict}",
        rf"\ell_t = -m_t\,A\,\mathrm{{sg}}[\min(\rho_t, {tex(algo.dppo_ratio_cap, 'g')})]\log\pi_\theta(a_t) \\ "
        rf"p = {p:.4f},\ p_{{old}} = {p_old:.4f},\ m_t = {int(kept)},\ \rho_t = {ratio:.4f},\ "
        rf"A = {tex(advantage, '+.4f')} \;\Rightarrow\; \ell_t = {tex(loss, '+.4f')}",
    )


def _dro_view(algo, ratio, advantage, logp, old_logp, loss):
    log_ratio = logp - old_logp
    push = advantage - algo.dro_beta * log_ratio  # −∂ℓ/∂log π_θ: the advantage minus the spring's pull
    if push == 0 and advantage == 0:
        verdict = "A = 0 and the token has not moved: no push either way"
    elif push == 0:
        verdict = "the spring cancels the advantage: this token moves no further"
    elif advantage == 0:
        verdict = f"A = 0, yet the spring pulls it back towards π_old with {number(push, '+.4g')}"
    else:
        verdict = f"no clip: the gradient A − β·log(π_θ/π_old) = {number(push, '+.4g')}, smaller the further it moved"
    return (
        f"{_side(advantage)}, log π_θ − log π_old = {number(log_ratio, '+.4g')}: {verdict}",
        rf"\ell_t = -\big[A\log\pi_\theta(a_t) - \tfrac{{\beta}}{{2}}(\log\pi_\theta - \log\pi_{{old}})^2\big] \\ "
        rf"A = {tex(advantage, '+.4f')},\ \log\pi_\theta = {logp:.4f},\ \log\pi_{{old}} = {old_logp:.4f},\ "
        rf"\beta = {tex(algo.dro_beta, 'g')} \;\Rightarrow\; \ell_t = {tex(loss, '+.4f')}",
    )


# How each policy loss reads for one token: (the case in words, the formula with its numbers). The clip family
# (PPO's clip, GSPO, GSPO-token) is the default.
_LOSS_VIEWS = {
    "vanilla": _vanilla_view,
    "cispo": _cispo_view,
    "sapo": _sapo_view,
    "dppo_tv": _dppo_view,
    "dro": _dro_view,
}


def clip_case(ratio: float, advantage: float, algo: AlgoConfig) -> str:
    low, high = 1 - algo.epsilon, 1 + algo.epsilon_high
    side = _side(advantage)
    if advantage == 0:
        return "A = 0: no push either way"
    if advantage > 0 and ratio > high:
        return f"{side}, ρ > 1+ε_high = {number(high, '.4g')}: clipped, no gradient (already pushed up far enough)"
    if advantage < 0 and ratio < low:
        return f"{side}, ρ < 1−ε_low = {number(low, '.4g')}: clipped, no gradient (already pushed down far enough)"
    if advantage < 0 and algo.dual_clip is not None and ratio > algo.dual_clip:
        return f"{side}, ρ > c = {number(algo.dual_clip, 'g')}: dual clip caps the loss, no gradient"
    return f"{side}, ρ inside the range that binds for this sign: unclipped, full gradient"
