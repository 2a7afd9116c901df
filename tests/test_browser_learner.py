"""What a new learner reads and clicks, in Chromium at 1366 × 768, on one server: the token view follows the
newest run of three algorithms and explains that run's loss; a page without groups lists its responses without
group headings, the picker first; the numbers there write "−"; the steps slider stops at 40; a See it happen
claim opens in plain words; Compare after a reload describes the sweep it shows; the toolbar is a viewer's; the
instructor's token leaves the address bar; and presenter mode survives the pinned banner's link.

Screenshots (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one): learner-tokens-dppo.png,
learner-tokens-pg.png, learner-compare-reloaded.png, learner-banner-present.png.
"""

import re

import pytest
from test_browser import LAPTOP, POINT_OF_CHART, finished, screenshots

from app_driver import CHROMIUM, LAUNCH_FLAGS, NO_CHROMIUM, PAGES, open_page, press_train, screenshot, serve_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

TOKEN = "learner-walk-instructor-token"
QUICK = "seed=0&steps=2&sft_steps=20"
# The text of the token view's rows ("1. prompt tokens … reward"), and where the first one is on the page.
TOKEN_ROWS = """() => Array.from(document.querySelectorAll('[data-testid="stMarkdownContainer"] div'))
    .filter(d => d.style.fontFamily === 'monospace')
    .map(d => ({text: d.innerText, top: d.getBoundingClientRect().top}))"""
PRESENTING = "() => getComputedStyle(document.documentElement).fontSize === '22px'"
RUN_BUTTON = "Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Run')"


def tokens_tab(page) -> None:
    page.get_by_role("tab", name="Tokens").click()
    page.get_by_text("samples of run").first.wait_for(timeout=30_000)


def pick_first_token(page) -> None:
    page.get_by_test_id("stButtonGroup").filter(has_text="(0)").get_by_role("radio").first.click()
    page.get_by_text("Gradient weight on log π").wait_for(timeout=30_000)


def train_variant(page, variant: str) -> None:
    page.get_by_test_id("stRadio").filter(has_text="Variant").get_by_text(variant, exact=True).click()
    page.wait_for_timeout(1500)  # the variant's preset reaches the knobs
    press_train(page)
    page.get_by_text(re.compile(r"Finished 2 steps")).first.wait_for(timeout=300_000)


def test_what_a_new_learner_reads_and_clicks(tmp_path):
    from playwright.sync_api import sync_playwright

    env = {"RLHF_LAB_INSTRUCTOR_TOKEN": TOKEN, "RLHF_LAB_DB": str(tmp_path / "runs.sqlite")}
    folder = screenshots()
    with sync_playwright() as playwright, serve_app(tmp_path / "streamlit.log", env) as (url, _):
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        page = browser.new_context(viewport=LAPTOP).new_page()

        # 7. A viewer's toolbar: no Deploy button, no developer's Rerun or Clear cache in its menu.
        open_page(page, f"{url}/beyond_grpo?algo=cispo&{QUICK}", PAGES["beyond_grpo"])
        assert page.get_by_test_id("stAppDeployButton").count() == 0
        page.get_by_test_id("stMainMenu").click()
        page.get_by_test_id("stMainMenuList").wait_for(timeout=10_000)
        menu = page.get_by_test_id("stMainMenuList").inner_text()
        assert "Rerun" not in menu and "Clear cache" not in menu, menu
        page.keyboard.press("Escape")

        # 1. Three runs of three algorithms, a chart point of the first clicked after it: the Tokens tab shows the third
        # (the run trained last), says so, and its picker lists the rows below it.
        press_train(page)
        finished(page)
        page.wait_for_function(POINT_OF_CHART, arg=["Token entropy", 1], timeout=30_000)
        page.wait_for_timeout(500)  # scrolled into view
        point = page.evaluate(POINT_OF_CHART, ["Token entropy", 1])
        page.mouse.click(point["x"], point["y"])  # run #1's point: its samples in the Tokens tab
        page.get_by_text("samples of run #1 · CISPO").first.wait_for(timeout=30_000)
        train_variant(page, "SAPO")
        train_variant(page, "DPPO")
        tokens_tab(page)
        page.get_by_text("samples of run #3 · DPPO").first.wait_for(timeout=30_000)
        assert page.get_by_text("(the newest run)").count() == 1
        rows = page.evaluate(TOKEN_ROWS)
        picker = page.get_by_test_id("stSelectbox").filter(has_text="response")
        shown = picker.inner_text().strip().split("\n")[-1]
        if shown == "response":  # the value in the combobox's input
            shown = picker.locator("input").input_value()
        assert shown and rows[0]["text"].strip().startswith(shown.strip()), (shown, rows[0]["text"])
        pick_first_token(page)
        case = page.get_by_text("Gradient weight on log π").inner_text()
        assert "p − p_old" in case, "DPPO's own term: its probability band"
        # 6. One number format: a minus is "−", never a hyphen before a digit; KaTeX gets no "e−05".
        assert not re.search(r"(?<![A-Za-z])-\d", case), case
        assert not re.search(r"\de[−-]?\d", page.locator(".katex-mathml").first.inner_text())
        screenshot(page, folder / "learner-tokens-dppo.png", LAPTOP)

        # 5. The policy gradient samples no groups: no group headings or picker, and the response picker above
        # the list.
        open_page(page, f"{url}/policy_gradient?{QUICK}", PAGES["policy_gradient"])
        press_train(page)
        finished(page)
        tokens_tab(page)
        assert page.get_by_text(re.compile(r"^group 1 ·")).count() == 0
        assert page.get_by_test_id("stSelectbox").filter(has_text="group").count() == 0
        rows = page.evaluate(TOKEN_ROWS)
        picker = page.get_by_test_id("stSelectbox").filter(has_text="response").bounding_box()
        assert len(rows) > 1 and picker["y"] < rows[0]["top"], "the picker above the responses"
        screenshot(page, folder / "learner-tokens-pg.png", LAPTOP)

        # 7. The steps slider stops at 40, the run length the pages name.
        page.get_by_role("button", name="All knobs").click()
        slider = page.get_by_test_id("stSlider").filter(has_text="training steps")
        slider.get_by_role("slider").press("End")
        for _ in range(8):
            slider.get_by_role("slider").press("ArrowLeft")
        slider.get_by_test_id("stSliderThumbValue").get_by_text("40", exact=True).wait_for(timeout=10_000)
        page.keyboard.press("Escape")

        # 4. A claim opens in plain words; its seed sets and intervals wait behind "How sure are we?".
        open_page(page, f"{url}/reinforce_pp", PAGES["reinforce_pp"])
        claim = page.get_by_text(re.compile(r"^Claim\. With the batch mean as baseline"))
        claim.first.wait_for(timeout=30_000)
        assert not page.get_by_text("share of Σ|Â|").first.is_visible()
        page.get_by_text("How sure are we?").first.click()
        page.get_by_text(re.compile("share of Σ\\|Â\\|")).first.wait_for(state="visible", timeout=10_000)

        # 2. Compare: a sweep of two presets, then a reload: the controls describe the sweep the charts show.
        open_page(page, f"{url}/compare", PAGES["compare"])
        presets = page.get_by_test_id("stMultiSelect").filter(has_text="presets")
        presets.get_by_role("button", name=re.compile("grpo", re.I)).first.click()
        page.wait_for_timeout(1000)
        page.get_by_label("seeds", exact=True).fill("1")
        page.get_by_label("steps", exact=True).fill("2")
        page.get_by_label("steps", exact=True).press("Enter")
        page.get_by_text("More settings").click()
        page.get_by_role("spinbutton", name="SFT steps").fill("20")
        page.get_by_role("spinbutton", name="SFT steps").press("Enter")
        page.get_by_text("2 runs: 2 groups × 1 seeds").wait_for(timeout=30_000)
        page.get_by_role("button", name="Run", exact=True).click()
        page.wait_for_function(f"() => {RUN_BUTTON}.disabled", timeout=30_000)
        page.wait_for_function(f"() => !{RUN_BUTTON}.disabled", timeout=300_000)  # the sweep has ended
        open_page(page, f"{url}/compare", PAGES["compare"])
        page.get_by_text("2 runs: 2 groups × 1 seeds").wait_for(timeout=30_000)
        chips = page.get_by_test_id("stMultiSelect").filter(has_text="presets").inner_text()
        assert "grpo:" not in chips and "rloo" in chips and "reinforce_pp" in chips, chips
        assert page.get_by_text(re.compile("differs from grpo")).count() == 0
        screenshot(page, folder / "learner-compare-reloaded.png", LAPTOP)

        # 7. The instructor's token leaves the address bar once the session holds it; the page stays open.
        instructor = browser.new_context(viewport=LAPTOP).new_page()
        open_page(instructor, f"{url}/instructor?instructor={TOKEN}", "Instructor")
        instructor.wait_for_function("() => !location.search.includes('instructor=')", timeout=30_000)
        instructor.get_by_role("textbox", name="Settings (as in a share link)").fill("algo=dapo&seed=0")
        instructor.get_by_role("button", name="Pin", exact=True).click()
        instructor.get_by_text("Now open: DAPO").first.wait_for(timeout=30_000)

        # 3. Presenter mode survives the pinned banner's link.
        open_page(page, f"{url}/?present=1", PAGES[""])
        page.wait_for_function(PRESENTING, timeout=30_000)
        page.get_by_text("Now open: DAPO").first.click()
        page.wait_for_function("() => location.pathname.endsWith('/grpo')", timeout=30_000)
        page.get_by_text(PAGES["grpo"], exact=True).first.wait_for(timeout=60_000)
        assert "present=1" in page.evaluate("() => location.search")
        page.wait_for_function(PRESENTING, timeout=30_000)  # its text still 22 px, not 14
        screenshot(page, folder / "learner-banner-present.png", LAPTOP, full=False)
        browser.close()
