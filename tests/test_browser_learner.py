"""What a new learner reads and clicks, in Chromium at 1366 × 768, on one server: the token view follows the
newest run of three algorithms and explains that run's loss; numbers write their minus as "−" in chart hover
text, the token view and its derivations, and their powers of ten without "e-05" in formulas; a page without
groups lists its responses without group headings, the picker first; the steps slider stops at 40; a See it happen
claim opens in plain words; Compare after a reload describes the sweep it shows; the toolbar is a viewer's; the
instructor's token leaves the address bar; and presenter mode survives the pinned banner's link.

Screenshots (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one): learner-tokens-dppo.png,
learner-tokens-pg.png, learner-compare-reloaded.png, learner-banner-present.png.
"""

import re

import pytest
from test_browser import LAPTOP, finished, screenshots

from app_driver import CHROMIUM, LAUNCH_FLAGS, NO_CHROMIUM, PAGES, open_page, press_train, screenshot, serve_app
from ui.compare import CURVES

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
# The token view's line naming the run it shows.
SHOWN_RUN = re.compile(r"samples of run #\d")
# A hyphen used as a minus: before a digit, not inside a word ("p_old-2" is no number).
HYPHEN_MINUS = re.compile(r"(?<![A-Za-z_])-\d")
# Where plotly draws the first negative point of a chart's series (scrolled into view first), or null.
NEGATIVE_POINT = """([title, name]) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd._fullLayout && gd.layout.title
              && gd.layout.title.text.replace(/<[^>]+>/g, '') === title);
    const trace = gd && gd.data.find(t => t.name === name);
    const index = trace ? trace.y.findIndex(v => v !== null && v < 0) : -1;
    if (index < 0) return null;
    gd.scrollIntoView({block: 'center'});
    const layout = gd._fullLayout, box = gd.getBoundingClientRect();
    return {x: box.left + layout._size.l + layout.xaxis.l2p(trace.x[index]),
            y: box.top + layout._size.t + layout.yaxis.l2p(trace.y[index])};
}"""
# Where a chart's y axis starts, as plotly drew it.
AXIS_START = """(title) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd._fullLayout && gd.layout.title
              && gd.layout.title.text.replace(/<[^>]+>/g, '') === title);
    return gd ? gd._fullLayout.yaxis.range[0] : null;
}"""
HOVER_TEXT = "() => Array.from(document.querySelectorAll('.hoverlayer')).map(h => h.textContent).join(' ')"
# Each token's tooltip in the token view ("token 3: A=−0.912  ρ=1.002  H=0.511").
TOKEN_TIPS = """() => Array.from(document.querySelectorAll('[data-testid="stMarkdownContainer"] span[title]'))
    .map(s => s.title).filter(t => t.startsWith('token '))"""
# The TeX source of the formulas in the open tab (the token's term of the loss), as KaTeX keeps it.
TOKEN_FORMULA = '[role="tabpanel"] .katex-mathml annotation'
FORMULA_CHANGED = f"""(before) => {{
    const formula = document.querySelector('{TOKEN_FORMULA}');
    return formula !== null && formula.textContent !== before;
}}"""


def token_rows(page) -> list[dict]:
    """The token view's response rows (`TOKEN_ROWS`), read once they are drawn: they come after the line naming the
    run, which `tokens_tab` waits for."""
    page.wait_for_function(f"() => ({TOKEN_ROWS})().length > 0", timeout=30_000)
    return page.evaluate(TOKEN_ROWS)


def tokens_tab(page) -> None:
    page.get_by_role("tab", name="Tokens").click()
    page.get_by_text("samples of run").first.wait_for(timeout=30_000)


def pick_first_token(page) -> None:
    """Pick the response's first token and wait for its term. A rerun that draws the picker anew just as the click
    lands (the page's redraws as a run ends) can drop the pick, as it would a learner's, who then clicks again; a
    pill already shown picked is not clicked again, which would unpick it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    explained = page.get_by_text("Gradient weight on log π")
    for _ in range(3):
        pill = page.get_by_test_id("stButtonGroup").filter(has_text="(0)").get_by_role("radio").first
        if pill.get_attribute("aria-checked") != "true":
            pill.click()
        try:
            explained.wait_for(timeout=15_000)
            return
        except PlaywrightTimeout:
            continue
    explained.wait_for(timeout=15_000)


def train_variant(page, variant: str, number: int) -> None:
    """Train run `number` of this variant and wait for its end. With the Tokens tab open there are no charts for
    `press_train` to watch: the new run's pill, drawn with its first point, says the page shows it."""
    page.get_by_test_id("stRadio").filter(has_text="Variant").get_by_text(variant, exact=True).click()
    page.wait_for_timeout(1500)  # the variant's preset reaches the knobs
    press_train(page)
    page.get_by_test_id("stButtonGroup").get_by_text(re.compile(rf"^#{number} ·")).first.wait_for(timeout=300_000)
    finished(page)


def hover_over(page, point: dict) -> None:
    """Rest the mouse on a chart point until plotly shows its hover label: plotly draws it on a mouse move over
    the plot, and a redraw of the chart (the page's reruns after a run ends) takes it away."""
    for offset in range(20):
        page.mouse.move(point["x"] + offset % 2, point["y"], steps=2)
        page.wait_for_timeout(500)
        if page.evaluate(HOVER_TEXT).strip():
            return


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """`(url, browser)`: one server for the module's tests (its instructor token set), and Chromium."""
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("learner")
    env = {"RLHF_LAB_INSTRUCTOR_TOKEN": TOKEN, "RLHF_LAB_DB": str(folder / "runs.sqlite")}
    log_path = folder / "streamlit.log"
    try:
        with sync_playwright() as playwright, serve_app(log_path, env) as (url, _):
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
            yield url, browser
            browser.close()
    finally:
        print("---- streamlit log (tail) ----\n" + log_path.read_text()[-4000:])  # pytest shows it on failure


def shown_run(page) -> str:
    """The token view's line naming the run it shows ("━ samples of run #3 · DPPO (the newest run)")."""
    line = page.get_by_test_id("stMarkdownContainer").filter(has_text=SHOWN_RUN).first
    line.wait_for(timeout=30_000)
    return line.inner_text()


def test_the_token_view_follows_the_newest_of_three_runs(app):
    """Item 1: CISPO (#1), SAPO (#2), #1 chosen in the Tokens tab, then DPPO (#3): the Tokens tab shows #3, the
    run trained last, not #1, the run chosen before it; it names #3 as the newest run, its response picker starts
    where the list does, and a token is explained by DPPO's own term (its probability band), not CISPO's."""
    url, browser = app
    page = browser.new_context(viewport=LAPTOP).new_page()
    open_page(page, f"{url}/beyond_grpo?algo=cispo&{QUICK}", PAGES["beyond_grpo"])
    press_train(page)
    finished(page)
    train_variant(page, "SAPO", 2)
    tokens_tab(page)
    page.get_by_test_id("stSelectbox").filter(has_text="samples of run").click()
    page.get_by_role("option", name=re.compile(r"^#1 ·")).click()
    page.get_by_test_id("stMarkdownContainer").filter(has_text=re.compile(r"samples of run #1\b")).first.wait_for(
        timeout=30_000
    )
    train_variant(page, "DPPO", 3)
    tokens_tab(page)
    line = shown_run(page)
    assert "#3 · DPPO" in line and "(the newest run)" in line, line
    rows = token_rows(page)
    picker = page.get_by_test_id("stSelectbox").filter(has_text="response")
    shown = picker.inner_text().strip().split("\n")[-1]
    if shown == "response":  # the value in the combobox's input
        shown = picker.locator("input").input_value()
    assert shown and rows[0]["text"].strip().startswith(shown.strip()), (shown, rows[0]["text"])
    pick_first_token(page)
    case = page.get_by_text("Gradient weight on log π").inner_text()
    assert "p − p_old" in case, f"DPPO's own term, its probability band, not: {case}"
    # The run pills above the tabs name each run as the token view does, not by the knobs its preset sets.
    pills = page.get_by_test_id("stElementContainer").filter(has_text="Runs on the charts").first.inner_text()
    assert "#2 · SAPO" in pills and "#3 · DPPO" in pills and "variant=" not in pills, pills
    screenshot(page, screenshots() / "learner-tokens-dppo.png", LAPTOP)


def test_numbers_are_written_one_way(app):
    """Item 6: a minus is "−", never a hyphen before a digit: in a chart's hover text, the token view's colour
    scale and its tokens' tooltips, and a token's derivation; a formula writes a power of ten as \\times 10^{n},
    never "e-05", which KaTeX sets as a product of e and −05. GRPO on the coin-flip task: a fair coin's rewards
    split every group, so advantages are negative from the first step; with β = 0.001 a token's KL term β·k3 is
    below 10⁻⁴, where Python's "g" format turns to e-notation."""
    url, browser = app
    page = browser.new_context(viewport=LAPTOP).new_page()
    open_page(page, f"{url}/grpo?algo=grpo&task=coin_flip&beta=0.001&{QUICK}", PAGES["grpo"])
    press_train(page)
    finished(page)
    page.wait_for_function(NEGATIVE_POINT, arg=["Advantages", "min"], timeout=30_000)
    page.wait_for_timeout(500)  # scrolled into view
    point = page.evaluate(NEGATIVE_POINT, ["Advantages", "min"])
    hover_over(page, point)
    hover = page.evaluate(HOVER_TEXT)

    tokens_tab(page)
    scale = page.get_by_test_id("stMarkdownContainer").filter(has_text="A = 0").first.inner_text()
    # The tokens draw after the colour scale above them: read their tooltips once they are there (on a busy machine
    # a read right after the scale found none).
    page.wait_for_function(f"() => ({TOKEN_TIPS})().length > 0", timeout=30_000)
    tips = page.evaluate(TOKEN_TIPS)
    # The first response's first tokens, one by one: each derivation in words and in TeX.
    tokens = page.get_by_test_id("stButtonGroup").filter(has_text="(0)").get_by_role("radio")
    cases, formulas = [], []
    for index in range(min(tokens.count(), 3)):
        tokens.nth(index).click()
        page.wait_for_function(FORMULA_CHANGED, arg=formulas[-1] if formulas else None, timeout=30_000)
        formulas.append(page.locator(TOKEN_FORMULA).first.text_content())
        cases.append(page.get_by_text("Gradient weight on log π").inner_text())

    written = {"chart hover": [hover], "colour scale": [scale], "token tooltips": tips, "derivations": cases}
    wrong = {
        f"a hyphen for a minus in {place}": [t for t in texts if HYPHEN_MINUS.search(t)]
        for place, texts in written.items()
    }
    wrong["e-notation in a formula"] = [f for f in formulas if re.search(r"\de[-+]?\d", f)]
    assert not any(wrong.values()), {what: texts[:2] for what, texts in wrong.items() if texts}
    assert "min: −" in hover and "A = −" in scale and any("A=−" in tip for tip in tips), (hover, scale, tips)
    assert any("\\times 10^{" in f for f in formulas), f"no KL term below 10⁻⁴: {formulas}"


def test_what_a_new_learner_reads_and_clicks(app):
    """Items 2, 3, 4, 5 and 7."""
    url, browser = app
    folder = screenshots()
    page = browser.new_context(viewport=LAPTOP).new_page()

    # 7. A viewer's toolbar: no Deploy button, no developer's Rerun or Clear cache in its menu.
    open_page(page, f"{url}/policy_gradient?{QUICK}", PAGES["policy_gradient"])
    assert page.get_by_test_id("stAppDeployButton").count() == 0
    page.get_by_test_id("stMainMenu").click()
    page.get_by_test_id("stMainMenuList").wait_for(timeout=10_000)
    menu = page.get_by_test_id("stMainMenuList").inner_text()
    assert "Rerun" not in menu and "Clear cache" not in menu, menu
    page.keyboard.press("Escape")

    # 5. The policy gradient samples no groups: no group headings or picker, and the response picker above
    # the list.
    press_train(page)
    finished(page)
    tokens_tab(page)
    rows = token_rows(page)  # the view drawn: what it lacks is not merely still to come
    assert page.get_by_text(re.compile(r"^group 1 ·")).count() == 0
    assert page.get_by_test_id("stSelectbox").filter(has_text="group").count() == 0
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
    # A KL is never negative: its axis starts at 0, though round-off leaves a first step's exact KL a hair below.
    low = page.evaluate(AXIS_START, CURVES["kl_exact"])
    assert low is not None and low >= 0, low
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
