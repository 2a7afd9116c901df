"""A class in real browsers: three learners (three Chromium contexts, three cookies) answer the GRPO page's question
and train, the instructor's page shows the three of them, their answers before and after and their runs
overlaid; a pinned banner reaches a learner's page and opens its link there; ?present=1 enlarges the page; and
after a restart of the server a learner's runs are on the page again.

Screenshots (folder: env RLHF_LAB_SCREENSHOTS, else a temporary one): class-instructor.png,
class-learner-banner.png, class-present.png, class-instructor-present.png.
"""

import pytest
from test_browser import LAPTOP, finished, screenshots

from app_driver import CHROMIUM, LAUNCH_FLAGS, NO_CHROMIUM, PAGES, open_page, press_train, screenshot, serve_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

TOKEN = "class-instructor-token"
QUICK = "algo=grpo&seed={seed}&steps=6&sft_steps=50"
QUESTION = "Will token entropy end higher or lower than it starts?"
ANSWERS = ("higher", "lower", "lower")
CHART = """(title) => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd.layout && gd.layout.title && gd.layout.title.text.includes(title));
    return gd ? {traces: gd.data.map(t => ({name: t.name, x: t.x, y: t.y})), height: gd._fullLayout.height} : null;
}"""
ROOT_FONT = "() => getComputedStyle(document.documentElement).fontSize"


def test_a_class_of_three_learners_and_their_instructor(tmp_path):
    from playwright.sync_api import sync_playwright

    env = {"RLHF_LAB_INSTRUCTOR_TOKEN": TOKEN, "RLHF_LAB_DB": str(tmp_path / "runs.sqlite")}
    folder = screenshots()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_FLAGS)
        learners = [browser.new_context(viewport=LAPTOP).new_page() for _ in ANSWERS]
        with serve_app(tmp_path / "streamlit.log", env) as (url, _):
            for seed, (learner, answer) in enumerate(zip(learners, ANSWERS)):
                open_page(learner, f"{url}/grpo?{QUICK.format(seed=seed)}", PAGES["grpo"])
                learner.get_by_test_id("stRadio").filter(has_text=QUESTION).get_by_text(answer, exact=True).click()
                learner.wait_for_timeout(1000)  # the answer reaches the server
                press_train(learner)
            for learner in learners:
                finished(learner)

            instructor = browser.new_context(viewport=LAPTOP).new_page()
            open_page(instructor, f"{url}/instructor?instructor={TOKEN}", "Instructor")
            assert instructor.get_by_test_id("stMetricValue").first.inner_text().strip() == "3"
            instructor.wait_for_function(CHART, arg=QUESTION, timeout=30_000)
            bars = {
                trace["name"].split(" ")[0]: dict(zip(trace["x"], trace["y"]))
                for trace in instructor.evaluate(CHART, QUESTION)["traces"]
            }
            assert bars["before"] == {"higher": 1, "lower": 2}, bars
            assert sum(bars["after"].values()) == 3, "each learner's run answered"
            runs = instructor.evaluate(CHART, "3 runs of 3 learners")
            assert runs is not None and {t["name"] for t in runs["traces"] if t["name"]} == {
                "learner 1 · #1",
                "learner 2 · #1",
                "learner 3 · #1",
            }, runs
            instructor.get_by_role("textbox", name="Settings (as in a share link)").fill("algo=grpo&epsilon_high=0.28")
            instructor.get_by_role("button", name="Pin", exact=True).click()
            instructor.get_by_text("Now open: GRPO, ε_high 0.28").first.wait_for(timeout=30_000)
            instructor.wait_for_timeout(1000)
            screenshot(instructor, folder / "class-instructor.png", LAPTOP)

            learner = learners[0]
            open_page(learner, f"{url}/grpo", PAGES["grpo"])
            banner = learner.get_by_text("Now open: GRPO, ε_high 0.28")
            banner.wait_for(timeout=30_000)
            learner.wait_for_timeout(1000)
            screenshot(learner, folder / "class-learner-banner.png", LAPTOP, full=False)
            banner.click()  # the banner's link opens the page with its settings
            learner.wait_for_function("() => location.search.includes('epsilon_high=0.28')", timeout=30_000)
            learner.get_by_test_id("stSlider").filter(has_text="ε_high").get_by_test_id(
                "stSliderThumbValue"
            ).get_by_text("0.28", exact=True).wait_for(timeout=30_000)

            normal = learners[1].evaluate(CHART, "Token entropy")["height"]
            open_page(learners[1], f"{url}/grpo?present=1", PAGES["grpo"])
            learners[1].wait_for_function(CHART, arg="Token entropy", timeout=30_000)
            assert learners[1].evaluate(ROOT_FONT) == "22px"
            assert learners[1].evaluate(CHART, "Token entropy")["height"] == round(normal * 1.5)
            learners[1].wait_for_timeout(1000)
            screenshot(learners[1], folder / "class-present.png", LAPTOP, full=False)
            open_page(instructor, f"{url}/instructor?instructor={TOKEN}&present=1", "Instructor")
            instructor.wait_for_function(CHART, arg=QUESTION, timeout=30_000)
            screenshot(instructor, folder / "class-instructor-present.png", LAPTOP, full=False)

        # A restart of the server: the learner's run is drawn on the page again, from the run store.
        with serve_app(tmp_path / "streamlit-restarted.log", env) as (url, _):
            learner = learners[2]
            open_page(learner, f"{url}/grpo", PAGES["grpo"])
            learner.get_by_text("Finished 6 steps").wait_for(timeout=60_000)
            learner.wait_for_function(CHART, arg="Token entropy", timeout=30_000)
        browser.close()
