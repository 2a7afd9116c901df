"""The token view: a step's sampled responses as text, each token coloured by one per-token quantity."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

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
        Colouring("entropy", "entropies", "Purple: the policy's entropy when it chose this token; deeper = less sure."),
    )
}


def _rgba(rgb: tuple[int, int, int], strength: float) -> str:
    return f"rgba({rgb[0]},{rgb[1]},{rgb[2]},{0.08 + 0.72 * min(max(strength, 0.0), 1.0):.2f})"


def _background(colouring: Colouring, value, scale: float) -> str:
    if colouring.field == "clipped":
        return "rgba(255,179,0,0.75)" if value else "transparent"
    if colouring.field == "advantages":
        return _rgba((46, 160, 67) if value >= 0 else (218, 54, 51), abs(value) / scale)
    if colouring.field == "ratios":
        log_ratio = math.log(max(value, 1e-12))
        return _rgba((31, 119, 180) if log_ratio >= 0 else (255, 127, 14), abs(log_ratio) / scale)
    return _rgba((128, 60, 170), value / scale)


def _scale(colouring: Colouring, samples: list[dict]) -> float:
    """The value that gets the deepest colour: the largest magnitude on display, so colours compare across rows."""
    values = [v for s in samples for v in s[colouring.field]]
    if colouring.field == "ratios":
        values = [math.log(max(v, 1e-12)) for v in values]
    return max((abs(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0) or 1.0


def token_html(samples: list[dict], colour_by: str) -> str:
    """One line per sample: prompt, coloured response tokens, reward and success; hover a token for its numbers."""
    colouring = COLOURINGS[colour_by]
    scale = _scale(colouring, samples)
    rows = []
    for sample in samples:
        spans = []
        for i, token in enumerate(sample["tokens"]):
            value = sample[colouring.field][i]
            tip = (
                f"A={sample['advantages'][i]:+.3f}  ρ={sample['ratios'][i]:.3f}  "
                f"H={sample['entropies'][i]:.3f}{'  clipped' if sample['clipped'][i] else ''}"
            )
            text = "⏎" if token == EOS_TOKEN else html.escape(token)
            spans.append(
                f'<span title="{html.escape(tip)}" style="background:{_background(colouring, value, scale)};'
                f'padding:2px 3px;margin:0 1px;border-radius:3px">{text}</span>'
            )
        verdict = "✓ solved" if sample["success"] else "✗ not solved"
        if sample["truncated"]:
            verdict += ", cut at the length limit"
        rows.append(
            '<div style="font-family:monospace;font-size:1.05rem;margin:4px 0">'
            f'<span style="color:#888">{html.escape(sample["prompt"])}</span> {"".join(spans)} '
            f'<span style="font-family:sans-serif;font-size:0.85rem;color:#666">'
            f'reward {sample["reward"]:+.2f} · {verdict}</span></div>'
        )
    return "".join(rows)
