"""The presenter switch: `?present=1` enlarges text and charts for a projector, `?present=0` turns it off.

The switch is kept by the session and written back into the URL on every page (a page switch clears the query),
so a reload, or the address copied from the projector's browser, keeps it; a link that loads a page anew (the pinned
banner) carries it (`keep_presenting`). A page's share link leaves it out:
a learner who opens that link gets the page at their own screen's size."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import streamlit as st

PARAM = "present"
KEY = "lab:present"
FONT_PX = 22  # the page's base text (Streamlit's is 16 px): legible from the back of a room
CHART_SCALE = 1.5  # chart heights and their text, against the laptop layout


def presenting() -> bool:
    """Whether this session is in presenter mode."""
    return bool(st.session_state.get(KEY, False))


def presenter_switch() -> None:
    """Read `?present=` (1 on, 0 off), keep it in the URL while on, and enlarge the page's text."""
    value = st.query_params.get(PARAM)
    if value in ("0", "1"):
        st.session_state[KEY] = value == "1"
    if not presenting():
        if value is not None:
            del st.query_params[PARAM]
        return
    if value != "1":
        st.query_params[PARAM] = "1"
    # Streamlit sizes its text in rem: a larger root font enlarges every label, button and caption at once.
    st.html(f"<style>html{{font-size:{FONT_PX}px}}h1{{font-size:2.4rem !important}}</style>")


def keep_presenting(link: str) -> str:
    """An in-app link that opens a page as a new load (an `<a href>`, as the pinned banner is), with `present=1`
    added while this session presents: the new load has only its address to go on."""
    if not presenting() or PARAM in parse_qs(urlsplit(link).query):
        return link
    return f"{link}{'&' if '?' in link else '?'}{PARAM}=1"


def chart_layout(layout: dict) -> dict:
    """A figure's layout, taller and with larger text in presenter mode (as it is otherwise): every vertical
    size (the figure, its top and bottom margins) and every font grows by CHART_SCALE, so a legend placed under
    the plot area stays there."""
    if not presenting():
        return layout
    margin = layout.get("margin", {})
    return layout | {
        "height": round(layout["height"] * CHART_SCALE),
        "margin": margin | {side: round(margin[side] * CHART_SCALE) for side in ("t", "b") if side in margin},
        "font": {"size": round(12 * CHART_SCALE)},
        **(
            {"title": layout["title"] | {"font": {"size": round(layout["title"]["font"]["size"] * CHART_SCALE)}}}
            if "font" in layout.get("title", {})
            else {}
        ),
        "legend": layout.get("legend", {}) | {"font": {"size": round(11 * CHART_SCALE)}},
    }
