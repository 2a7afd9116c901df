"""Talk to this run in the real app (`streamlit run app.py`, Chromium through Playwright): after a short GRPO run a
prompt the task never shows is refused by name, a typed prompt gets both answers and the right one, and the probe's
animation plays from step 0 back to the last step, with its legend, bars and slider telling one step at every
frame."""

import re

import pytest

from app_driver import CHROMIUM, NO_CHROMIUM, PAGES, browser_page, open_page, serve_app

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM),
]

QUICK = "algo=grpo&seed=0&steps=10&sft_steps=50"
ANIMATION = """() => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd._transitionData && gd._transitionData._frames.length);
    return gd ? {frames: gd._transitionData._frames.map(f => f.name), active: gd._fullLayout.sliders[0].active} : null;
}"""
# Press ▶ and read the chart at every animation frame of the browser until the last step is shown: the step the
# slider names and where its grip is, the steps the legend names, and the policy's bars (labels and heights in
# pixels) beside that step's tick and frame's probabilities.
PLAY_AND_WATCH = """() => new Promise(resolve => {
    const gd = Array.from(document.querySelectorAll('.js-plotly-plot'))
        .find(gd => gd._transitionData && gd._transitionData._frames.length);
    const frames = gd._transitionData._frames, last = frames[frames.length - 1].name, seen = [];
    const watch = () => {
        // The slider's current value reads "step 7"; its tick labels are the bare numbers.
        const current = Array.from(gd.querySelectorAll('.slider-container text'))
            .map(t => t.textContent).find(text => text.startsWith('step '));
        const step = current ? current.slice('step '.length) : null;
        const frame = frames.find(f => f.name === step);
        const policy = gd.querySelectorAll('.barlayer .trace')[1], y = gd._fullLayout.yaxis;
        const centre = el => { const r = el.getBoundingClientRect(); return (r.left + r.right) / 2; };
        const ticks = Array.from(gd.querySelectorAll('.slider-tick-rect')).map(centre);
        seen.push({step, legend: Array.from(gd.querySelectorAll('.legendtext')).map(t => t.textContent),
                   bars: Array.from(policy.querySelectorAll('text')).map(t => t.textContent),
                   expected: frame ? frame.data[1].y.map(p => p.toFixed(2)) : null,
                   heights: Array.from(policy.querySelectorAll('path')).map(bar => bar.getBBox().height),
                   expected_heights: frame ? frame.data[1].y.map(p => y.l2p(0) - y.l2p(p)) : null,
                   grip: centre(gd.querySelector('.slider-grip-rect')),
                   tick: frame ? ticks[frames.indexOf(frame)] : null});
        if (seen.length > 5 && step === last) resolve(seen); else requestAnimationFrame(watch);
    };
    gd.querySelector('.updatemenu-button').dispatchEvent(new MouseEvent('click', {bubbles: true}));
    requestAnimationFrame(watch);
})"""


def test_talk_to_a_run_answers_refuses_by_name_and_animates_the_probe(tmp_path):
    from playwright.sync_api import expect  # imported here, as app_driver does: collecting the file needs no Playwright

    with serve_app(tmp_path / "streamlit.log") as (url, _), browser_page() as page:
        open_page(page, f"{url}/grpo?{QUICK}", PAGES["grpo"])
        page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True).click()
        page.get_by_text(re.compile(r"Finished \d+ steps")).first.wait_for(timeout=300_000)
        page.get_by_text("Talk to this run", exact=True).wait_for(timeout=60_000)
        prompt = page.get_by_label("prompt", exact=True)
        expect(prompt).to_have_value("ggd>", timeout=30_000)  # the task's first example prompt

        prompt.fill("abz")
        prompt.press("Enter")
        page.get_by_text("prompt 'abz' cannot be asked: task caesar's prompts never hold the character 'z'").wait_for(
            timeout=30_000
        )

        prompt.fill("abc")
        prompt.press("Enter")
        page.get_by_text("The right answer to").filter(has_text="bcd").wait_for(timeout=30_000)
        page.get_by_text("Before RL: the reference (SFT) answers").wait_for(timeout=30_000)
        page.get_by_text("After RL: run #1 answers").wait_for(timeout=30_000)

        page.wait_for_function(f"() => ({ANIMATION})() !== null", timeout=30_000)
        animation = page.evaluate(ANIMATION)
        assert animation["frames"] == [str(step) for step in range(11)] and animation["active"] == 10
        seen = page.evaluate(PLAY_AND_WATCH)  # ▶ plays from step 0 to the last step
        assert len({frame["step"] for frame in seen}) > 1 and seen[-1]["step"] == "10", "it played to the end"
        for frame in seen:
            # The reference is step 0 whatever the slider says; any other step the legend names is the slider's.
            named = {
                step
                for name in frame["legend"]
                if not name.startswith("reference")
                for step in re.findall(r"step (\d+)", name)
            }
            assert named <= {frame["step"]}, frame
            assert frame["bars"] == frame["expected"], frame
            # Drawn at the slider's step, not on the way to it from the previous one.
            assert frame["heights"] == pytest.approx(frame["expected_heights"], abs=1.0), frame
            assert frame["grip"] == pytest.approx(frame["tick"], abs=1.0), frame  # the grip on the named step
