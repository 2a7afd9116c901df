"""The app's table of pages (ui/navigation.py): every page file is in it, and a page's address is mended where
Streamlit trims one page's path by another's that ends it."""

from pathlib import Path

import pytest

from ui.navigation import PAGE_TITLES, mended_address, page_title

ROOT = Path(__file__).resolve().parents[1]


def test_every_page_file_but_the_instructors_is_in_the_table_with_a_title():
    files = {path.stem for path in (ROOT / "app_pages").glob("*.py")}
    assert set(PAGE_TITLES) == files - {"instructor"}
    assert page_title("policy_gradient") == "Policy Gradient" and page_title("nowhere") == "nowhere"


@pytest.mark.parametrize(
    "given, expected",
    [
        # What st.context.url gave a session opened on /beyond_grpo: "grpo" trimmed off, then the page's path added.
        ("http://host:8501/beyond_/beyond_grpo", "http://host:8501/beyond_grpo"),
        ("http://host:8501/beyond_/ppo", "http://host:8501/ppo"),
        ("http://host:8501/beyond_", "http://host:8501"),  # the default page adds no path
        ("http://host:8501/lab/beyond_/grpo", "http://host:8501/lab/grpo"),  # under a base path
        # Addresses Streamlit got right are left as they are, query cut.
        ("http://host:8501/beyond_grpo", "http://host:8501/beyond_grpo"),
        ("http://host:8501/grpo?beta=0.1", "http://host:8501/grpo"),
        ("http://host:8501", "http://host:8501"),
        ("", ""),
    ],
)
def test_an_address_trimmed_by_another_pages_path_is_mended(given, expected):
    assert mended_address(given) == expected
