"""A page's settings in its URL: `/grpo?algo=dapo&epsilon_high=0.31&seed=1` opens the GRPO page with DAPO's
preset, ε_high = 0.31 and seed 1. Keys are the knob names (`AlgoConfig` / `RunConfig` fields), `algo` the preset.

A value the engine refuses (not a number, out of range, a combination `get_preset` or `RunConfig.validate`
rejects) is not applied: the page says which and why, and keeps the default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from rl_core.algorithms import get_preset
from ui import classroom, present, session
from ui.knobs import KNOBS
from ui.navigation import page_address

RUN_PARAMS = ("task", "model", "steps", "seed", "sft_steps", "demo_noise")
# Parameters that say who is asking and how to draw, not what to train: never read as settings, and the
# presenter switch kept in the URL across a page's writes.
NOT_SETTINGS = (session.PARAM, present.PARAM, classroom.INSTRUCTOR_PARAM)


def parse(name: str, text: str, allowed: Sequence | None = None):
    """The value a URL's text stands for, typed like the knob; ValueError says what is allowed."""
    knob = KNOBS.get(name)
    if knob is not None and knob.kind == "choice" and None in knob.options and text.lower() == "none":
        return None  # a name or none (teacher_model): `text` writes None as "none"
    if knob is None or knob.kind == "choice":
        if allowed is not None and text not in allowed:
            raise ValueError(f"{name}={text!r} is not one of: {', '.join(map(str, allowed))}")
        return text
    if knob.kind == "toggle":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{name}={text!r} is not on/off; allowed: true, false")
        return text.lower() in ("true", "1")
    if text == knob.none_label or text.lower() == "none":
        if None not in knob.options:
            raise ValueError(f"{name} cannot be off")
        return None
    numbers = [o for o in knob.options if o is not None]
    try:
        value = int(text) if all(isinstance(o, int) for o in numbers) else float(text)
    except ValueError:
        kind = "an integer" if all(isinstance(o, int) for o in numbers) else "a number"
        raise ValueError(f"{name}={text!r} is not {kind}") from None
    return value


def text(value) -> str:
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def read(
    params: dict[str, str],
    variants: dict[str, str],
    knobs: Sequence[str],
    check: Callable[[str, dict], None],
    choices: dict[str, Sequence[str]],
) -> tuple[str | None, dict, list[str]]:
    """From a URL's parameters: the preset it names (or None), the knob values it sets, and one message per
    value refused. `check(preset, values)` raises ValueError for values the engine refuses.

    A value is checked with the values accepted so far, and one refused is checked again once others are: a value
    may be allowed only beside another that comes later in the URL (`prompts_per_step=256` needs
    `num_generations` ≤ 4 for the batch's limit, whichever comes first)."""
    refused: dict[str, str] = {}
    preset = params.get("algo")
    if preset is not None and preset not in variants.values():
        refused["algo"] = f"algo={preset!r} is not on this page; allowed: {', '.join(variants.values())}"
        preset = None
    parsed: dict = {}
    for name, raw in params.items():
        if name == "algo":
            continue
        if name not in knobs and name not in RUN_PARAMS:
            refused[name] = f"{name} is not a knob of this page"
            continue
        try:
            parsed[name] = parse(name, raw, choices.get(name))
        except ValueError as error:
            refused[name] = str(error)
    values: dict = {}
    accepted_one = True
    while accepted_one:  # until a pass accepts nothing more
        accepted_one = False
        for name, value in parsed.items():
            if name in values:
                continue
            try:
                check(preset or next(iter(variants.values())), values | {name: value})
            except ValueError as error:
                refused[name] = str(error)
                continue
            values[name] = value
            refused.pop(name, None)
            accepted_one = True
    return (
        preset,
        {name: values[name] for name in parsed if name in values},
        [refused[n] for n in params if n in refused],
    )


def check_algo(preset: str, values: dict) -> None:
    """ValueError (naming the knob) if the preset refuses these values; run-level knobs are checked elsewhere."""
    get_preset(preset, **{k: v for k, v in values.items() if k not in RUN_PARAMS})


def settings_params() -> dict[str, str]:
    """The URL's query parameters that are settings (all but NOT_SETTINGS)."""
    return {name: value for name, value in st.query_params.items() if name not in NOT_SETTINGS}


def write(preset: str, values: dict, defaults: dict) -> dict[str, str]:
    """Mirror the page's settings in the URL: the preset, the seed, and every value that differs from its default
    (and the presenter switch while it is on). Returns the settings written, for `link`."""
    settings = {"algo": preset, "seed": text(values["seed"])} | {
        name: text(value) for name, value in values.items() if name != "seed" and value != defaults.get(name)
    }
    wanted = settings | ({present.PARAM: "1"} if present.presenting() else {})
    if dict(st.query_params) != wanted:
        st.query_params.from_dict(wanted)
    return settings


def link(params: dict[str, str]) -> str:
    """The page's address with these settings (`write`'s, the values the widgets hold in this run: not the
    browser's query string, which lags behind fast changes), for the learner to copy."""
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"{page_address()}?{query}"
