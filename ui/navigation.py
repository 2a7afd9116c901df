"""The app's pages, by section of the top navigation: each one's file under app_pages/ (its name is the page's URL
path and the key its runs and answers are stored under), its title and its icon. app.py builds the navigation from
this table, and the instructor's page names pages by the same titles."""

from __future__ import annotations

import streamlit as st

SECTIONS: dict[str, tuple[tuple[str, str, str], ...]] = {  # section → (file stem, title, icon), in order
    "Walk-through": (
        ("overview", "Overview", ":material/map:"),
        ("policy_gradient", "Policy Gradient", ":material/looks_one:"),
        ("ppo", "PPO", ":material/looks_two:"),
        ("grpo", "GRPO · DAPO · Dr. GRPO", ":material/looks_3:"),
        ("gspo", "GSPO", ":material/looks_4:"),
        ("rloo", "RLOO", ":material/looks_5:"),
        ("reinforce_pp", "REINFORCE++", ":material/looks_6:"),
        ("vapo", "VAPO / VC-PPO", ":material/filter_7:"),
        ("beyond_grpo", "Beyond GRPO (2025–26)", ":material/filter_8:"),
        ("distillation", "On-policy distillation", ":material/school:"),
        ("reward_model", "Reward model", ":material/thumbs_up_down:"),
        ("dpo", "DPO · IPO", ":material/how_to_vote:"),
    ),
    "Labs": (
        ("labs_clip", "Clip lab", ":material/content_cut:"),
        ("labs_gae", "GAE lab", ":material/timeline:"),
        ("labs_kl", "KL lab", ":material/straighten:"),
        ("labs_advantages", "Advantage lab", ":material/balance:"),
        ("labs_aggregation", "Aggregation lab", ":material/functions:"),
    ),
    "Compare": (("compare", "Compare and ablate", ":material/compare_arrows:"),),
}
DEFAULT_PAGE = "overview"
PAGE_TITLES = {stem: title for pages in SECTIONS.values() for stem, title, _ in pages}
# What Streamlit's trimming leaves of a page's path where another page's path ends it ("/beyond_" of beyond_grpo,
# trimmed by grpo): see `mended_address`.
TRIM_LEFTOVERS = tuple(
    "/" + longer.removesuffix(shorter)
    for longer in PAGE_TITLES
    for shorter in PAGE_TITLES
    if longer != shorter and longer.endswith(shorter)
)


def page_title(stem: str) -> str:
    """How the navigation names the page stored under `stem`; the stem itself for one it does not list."""
    return PAGE_TITLES.get(stem, stem)


def navigation() -> dict[str, list[st.Page]]:
    """The sections of `st.navigation`, one `st.Page` per entry of SECTIONS."""
    return {
        section: [
            st.Page(f"app_pages/{stem}.py", title=title, icon=icon, default=stem == DEFAULT_PAGE)
            for stem, title, icon in pages
        ]
        for section, pages in SECTIONS.items()
    }


def mended_address(url: str) -> str:
    """`st.context.url` without its query, mended: Streamlit trims the address a session opened with by the first
    page path that ends it, so where one page's path ends another's (`grpo`, `beyond_grpo`) a session opened on
    /beyond_grpo gets `…/beyond_/<page>` (or `…/beyond_` on the default page); the leftover `/beyond_` is cut."""
    url = url.split("?")[0]
    head, slash, page = url.rpartition("/")
    for leftover in TRIM_LEFTOVERS:
        if url.endswith(leftover):
            return url.removesuffix(leftover)
        if head.endswith(leftover):
            return head.removesuffix(leftover) + slash + page
    return url


def page_address() -> str:
    """This page's address in the browser, without its query ("" without a browser, as under AppTest)."""
    return mended_address(st.context.url or "")
