"""Each Labs page renders, and moving one of its sliders re-renders it with different numbers."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

PAGES = Path(__file__).resolve().parents[1] / "app_pages"
# The first run of a fresh script imports torch and plotly; later reruns are fast.
TIMEOUT = 120


def run_page(name: str) -> AppTest:
    at = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def notices(at: AppTest) -> list[str]:
    """The "What to notice" captions, in page order."""
    return [caption.value for caption in at.caption if caption.value.startswith("What to notice")]


def shown_text(at: AppTest) -> list[str]:
    """Every caption and metric value: where each page prints its computed numbers."""
    return [caption.value for caption in at.caption] + [metric.value for metric in at.metric]


@pytest.mark.parametrize(
    ("page", "slider", "value", "expected"),
    [
        ("labs_clip", "clip_eps_high", 0.4, "for A > 0 on ρ ∈ [1.40, 2.00]"),
        ("labs_gae", "gae_lam_actor", 0.5, "Token 1 gets the largest advantage (A = 0.167)"),
        ("labs_kl", "kl_boost", 0.0, "0.0230"),
        ("labs_advantages", "adv_groups", 3, "67% of this batch's groups"),
        ("labs_aggregation", "agg_length_2", 100, "weighs 10× one of y2 (100 tokens)"),
    ],
)
def test_page_renders_and_a_slider_changes_a_displayed_number(page, slider, value, expected):
    at = run_page(page)
    assert at.title
    before = shown_text(at) + [warning.value for warning in at.warning]
    at.slider(key=slider).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    after = shown_text(at) + [warning.value for warning in at.warning]
    assert after != before
    assert any(expected in text for text in after), after


def test_clip_page_dual_clip_adds_the_seventh_case_and_hand_edited_log_ratios_render():
    at = run_page("labs_clip")
    assert len(at.table[0].value) == 6
    at.toggle(key="clip_dual").set_value(True).run()
    assert len(at.table[0].value) == 7
    at.radio(key="gspo_source").set_value("edit by hand").run()
    assert not at.exception
    assert "1 of 8 tokens get no gradient" in notices(at)[-1]


def test_gae_page_reward_model_critic_is_the_default_and_a_perfect_critic_zeroes_the_advantages():
    at = run_page("labs_gae")
    assert notices(at)[0].startswith("What to notice: Token 1 gets the largest advantage")
    at.radio(key="gae_critic").set_value("perfect (values = true returns)").run()
    assert notices(at)[0].startswith("What to notice: Every advantage is 0")


def test_advantage_page_starts_with_grpo_numbers_for_one_success_in_four():
    at = run_page("labs_advantages")
    table = next(frame.value for frame in at.dataframe if "GRPO" in frame.value.columns)  # not the editor
    assert table["GRPO"].round(4).tolist() == [1.5, -0.5, -0.5, -0.5]
    assert not at.warning
    at.slider(key="adv_groups").set_value(2).run()
    assert at.warning[0].value.startswith("Group 2: every response scored 1")


def test_the_router_lists_every_lab():
    at = AppTest.from_file(str(PAGES.parent / "app.py"), default_timeout=TIMEOUT).run()
    for page in ("labs_clip", "labs_gae", "labs_kl", "labs_advantages", "labs_aggregation"):
        at.switch_page(f"app_pages/{page}.py").run()
        assert not at.exception, (page, [e.value for e in at.exception])
        assert at.title[0].value.split(":")[0].endswith("lab")
