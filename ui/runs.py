"""A page's runs: their labels (what differs from the first run), which of them the charts overlay, every knob in
which the overlaid runs differ, the CSV."""

from __future__ import annotations

import html

import pandas as pd
import streamlit as st

from rl_core.config import KNOB_NAMES, knob_differences
from ui.charts import run_colour
from ui.jobs import Job
from ui.knobs import difference_text, knob_text


def labels(runs: list[Job]) -> dict[int, str]:
    """`#n` and what run n is, in the page's words: its variant where it is not the first run's, then the settings
    in which it differs, e.g. `#2 · beta=0.1`, `#3 · DAPO, seed=1`, `#4 · DAPO, beta=0.1`. An algorithm knob is
    compared with the page's first run of the same variant (a variant's preset sets many knobs at once: they come
    with its name, they are no choice of the learner's), the run's own settings (seed, steps, task, …) with the
    page's first run. The first run (and any run identical to it) is labelled with its variant alone."""
    if not runs:
        return {}
    first = runs[0].settings
    result = {}
    for job in runs:
        variant = job.settings.get("variant")
        same_variant = next(other.settings for other in runs if other.settings.get("variant") == variant)
        changed = [
            k
            for k in job.settings
            if k != "variant" and job.settings[k] != (same_variant if k in KNOB_NAMES else first).get(k)
        ]
        shown = [str(variant)] if variant != first.get("variant") else []
        shown += [f"{k}={knob_text(k, job.settings[k])}" for k in changed]
        result[job.number] = f"#{job.number} · " + (", ".join(shown) or str(first.get("variant", "first run")))
    return result


def token_label(job: Job) -> str:
    """A run as the token view names it: its number and its preset or variant ("#3 · DPPO (Binary-TV)"), the knobs
    in which it differs left to the run picker's labels."""
    return f"#{job.number} · {job.settings.get('variant') or job.run.algo.name}"


SHORT_LABEL = 32  # characters: what a pill or a select box in a third of a laptop screen shows uncut


def short_label(name: str, limit: int = SHORT_LABEL) -> str:
    """A run label (`labels`) that fits a pill: `#n` and as many of its settings as fit, then how many are left
    ("#3 · DAPO, seed=1, beta=0.1 +2 more"); the full label goes in the widget's help."""
    if len(name) <= limit:
        return name
    number, _, settings = name.partition(" · ")
    parts = settings.split(", ")
    kept = [parts[0]]
    while len(kept) < len(parts) and len(f"{number} · {', '.join(kept + parts[len(kept) : len(kept) + 1])}") <= limit:
        kept.append(parts[len(kept)])
    left = len(parts) - len(kept)
    head = f"{number} · {', '.join(kept)}"
    if len(head) > limit:  # one setting too long by itself
        head = head[: limit - 1] + "…"
    return head + (f" +{left} more" if left else "")


def full_labels(numbers: list[int], names: dict[int, str]) -> str:
    """The runs' labels in full, one a line, for a widget's help where its options are cut (`short_label`)."""
    cut = [n for n in numbers if short_label(names[n]) != names[n]]
    return "" if not cut else "\n\nIn full:\n" + "\n".join(f"- {names[n]}" for n in cut)


def picker(page: str, runs: list[Job], names: dict[int, str]) -> list[Job]:
    """The runs to draw, chosen by the learner (the latest run and every finished one by default), with a
    swatch of each run's colour as the charts use it."""
    if len(runs) < 2:
        return runs
    key = f"{page}:overlay"
    numbers = [job.number for job in runs]
    chosen = [n for n in st.session_state.get(key, numbers) if n in numbers]
    if runs[-1].number not in st.session_state.get(f"{page}:overlay_offered", ()):
        chosen.append(runs[-1].number)  # a new run is always shown at first
    st.session_state[f"{page}:overlay_offered"] = numbers
    st.session_state[key] = list(dict.fromkeys(chosen))
    selected = st.pills(
        "Runs on the charts",
        numbers,
        selection_mode="multi",
        key=key,
        format_func=lambda n: short_label(names[n]),
        help="Choose the runs to overlay. Labels name what differs from the page's first run."
        + full_labels(numbers, names),
    )
    swatches = " ".join(
        f'<span style="color:{run_colour(n)};font-weight:700">━ {html.escape(names[n].split(" · ")[0])}</span>'
        for n in selected
    )
    if swatches:
        st.markdown(f'<div style="font-size:0.8rem;margin-top:-8px">colours: {swatches}</div>', unsafe_allow_html=True)
    return [job for job in runs if job.number in selected]


def differences(shown: list[Job]) -> None:
    """Every knob (the full configuration, not only this page's knobs) in which each overlaid run differs from
    the first one overlaid; a run that differs in more than one knob is flagged, since a gap between its curves
    and the first run's may come from any of them."""
    if len(shown) < 2:
        return
    base = shown[0]
    first = f"#{base.number}"
    lines, confounded = [], []
    for job in shown[1:]:
        changed = knob_differences(base.run, job.run)
        number = f"#{job.number}"
        if not changed:
            same = "the same settings, another seed" if job.run.seed != base.run.seed else "the same settings"
            lines.append(f"{number}: {same} as {first}")
            continue
        lines.append(f"{number} against {first}: " + ", ".join(difference_text(k, *v) for k, v in changed.items()))
        if len(changed) > 1:
            confounded.append(f"{number} differs from {first} in {len(changed)} knobs")
    text = "  \n".join(lines)
    if confounded:
        st.warning(
            f"{'; '.join(confounded)}: a gap between their curves may come from any of them. To see one knob's "
            f"effect, train {first}'s settings again with only that knob changed (or compare one knob's values on "
            "the Compare page).  \n" + text,
            icon=":material/compare_arrows:",
        )
    else:
        st.caption(text)


def download(page: str, shown: list[Job], names: dict[int, str]) -> None:
    rows = [
        {"run": names[job.number], **{f"knob:{k}": v for k, v in job.settings.items()}, **record}
        for job in shown
        for record in job.snapshot().records
    ]
    if rows:
        st.download_button(
            "Download metrics (CSV)",
            pd.DataFrame(rows).to_csv(index=False),
            file_name=f"{page}-metrics.csv",
            mime="text/csv",
            key=f"{page}:download",
            help="Every step's metrics of the runs on the charts.",
        )
