"""The DPO page under Streamlit's AppTest: it renders before any fit, Train runs DPO or IPO from the page's knobs
(records on schedule, the six charts, the summary of the held-out pairs), and a β the engine refuses is named in
a message, with nothing trained; after a fit, its policy and reference answer a prompt and its probe is animated."""

import json

import pytest
from streamlit.testing.v1 import AppTest

from app_driver import app_test_on
from toy_tasks.preference import gold_success
from ui.dpo import EVAL_EVERY, summary


def open_page() -> AppTest:
    return app_test_on("dpo", timeout=180)  # the first Train of a process also builds the warm start


def test_the_page_asks_for_a_fit_before_drawing_one():
    at = open_page()
    assert at.title[0].value.startswith("DPO and IPO")
    assert any("Press **Train**" in info.value for info in at.info)
    assert not at.get("plotly_chart")
    assert at.button(key="dpo:train") is not None and at.number_input(key="dpo:beta").value == pytest.approx(0.1)
    assert at.radio(key="dpo:loss_type").value == "sigmoid"
    assert "The surprise: both log-probabilities fall" in [h.value for h in at.subheader]


def test_train_runs_the_chosen_loss_from_the_knobs_and_draws_every_chart():
    at = open_page()
    at.radio(key="dpo:loss_type").set_value("ipo").run()
    at.number_input(key="dpo:beta").set_value(0.25).run()
    at.select_slider(key="dpo:max_steps").set_value(20).run()
    at.select_slider(key="dpo:seed").set_value(1).run()
    at.button(key="dpo:train").click().run()
    assert not at.exception, at.exception
    fit = at.session_state["dpo:fit"]
    assert fit["status"] == "finished" and fit["held_out"] == 200  # a fifth of the 1000 pairs
    assert fit["settings"] | {"beta": round(fit["settings"]["beta"], 6)} == {
        "loss_type": "ipo",
        "beta": 0.25,
        "learning_rate": 5e-4,
        "max_steps": 20,
        "seed": 1,
    }
    records = fit["records"]
    assert [r["step"] for r in records] == list(range(21))
    assert [r["step"] for r in records if "eval_loss" in r] == list(range(0, 21, EVAL_EVERY))
    # IPO with β = 0.25 costs (0 − 1/(2β))² = 4 before the first step, where the policy is its reference.
    assert records[0]["eval_loss"] == pytest.approx(4.0)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    # The fit's charts, drawn against the step (the chat's, after the fit, are drawn against tokens).
    charts = {
        spec["layout"]["title"]["text"]: spec
        for spec in specs
        if spec["layout"].get("xaxis", {}).get("title", {}).get("text") == "step"
    }
    assert set(charts) == {
        "Loss",
        "Implicit rewards, held out",
        "log π_θ(y|x), held out",
        "Reward accuracy",
        "Gold success of samples",
        "KL to π_ref, k3 per token",
    }
    assert all(len(title) <= 27 for title in charts), "a title fits a third of a 1024-pixel screen"
    logps = charts["log π_θ(y|x), held out"]["data"]
    assert logps[0]["x"] == list(range(0, 21, EVAL_EVERY))
    assert logps[1]["y"] == pytest.approx([r["eval_logps/rejected"] for r in records if "eval_loss" in r])
    assert charts["Loss"]["data"][0]["x"] == list(range(1, 21))  # the minibatch loss: one point per step
    # A line for the every-step minibatch series; the held-out evaluations every EVAL_EVERY steps are marked.
    assert [trace["mode"] for trace in charts["Loss"]["data"]] == ["lines", "lines+markers"]
    assert any(c.value == summary(records[0], records[-1]) for c in at.caption)
    assert any(
        "ipo (IPO) with β = 0.25 on 1000 pairs (200 held out), 20 steps: finished." in c.value for c in at.caption
    )


@pytest.mark.parametrize(
    "beta, message",
    [
        (0.0, "beta=0.0 is out of range; allowed: 0 < beta ≤ 10"),
        (12.0, "beta=12.0 is out of range; allowed: 0 < beta ≤ 10"),
    ],
)
def test_a_refused_beta_is_named_and_nothing_trains(beta, message):
    at = open_page()
    at.number_input(key="dpo:beta").set_value(beta).run()
    at.button(key="dpo:train").click().run()
    assert not at.exception, at.exception
    assert any(message in error.value for error in at.error)
    assert "dpo:fit" not in at.session_state


def test_after_a_fit_the_page_answers_a_prompt_before_and_after_and_animates_the_probe():
    at = open_page()
    assert "Talk to this fit" not in [h.value for h in at.subheader]  # nothing to talk to before a fit
    at.select_slider(key="dpo:max_steps").set_value(20).run()
    at.select_slider(key="dpo:seed").set_value(1).run()
    at.button(key="dpo:train").click().run()
    assert not at.exception, at.exception
    assert "Talk to this fit" in [h.value for h in at.subheader]
    fit = at.session_state["dpo:fit"]
    models, probe, history = fit["chat"], fit["probe"], fit["probe_history"]
    # The probe before the first step is the reference's (π_θ = π_ref there), after the last the trained policy's.
    assert [step for step, _ in history] == list(range(21))
    assert history[0][1] == pytest.approx(probe.probabilities(models.reference), abs=1e-6)
    assert history[-1][1] == pytest.approx(probe.probabilities(models.policy), abs=1e-6)
    assert history[-1][1] != pytest.approx(history[0][1], abs=1e-4)  # 20 steps of DPO moved it
    specs = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    animation = next(spec for spec in specs if spec.get("frames"))
    assert [frame["name"] for frame in animation["frames"]] == [str(step) for step in range(21)]
    prompt = at.text_input(key="dpo:chat_prompt").value
    titles = [spec["layout"]["title"]["text"] for spec in specs if spec["data"][0]["type"] == "heatmap"]
    # Each side's greedy answer, recomputed from the fit's own models, marked by the gold judge.
    for title, heading, said in zip(
        titles, ("Before: the reference (SFT)", "After the sigmoid (DPO) fit: the policy"), models.answers(prompt)
    ):
        mark = "✓" if said.ended and gold_success(prompt, said.text) else "✗"
        assert title.startswith(f"{heading} answers <b>{said.text or '(nothing)'}</b> {mark}")
    at.text_input(key="dpo:chat_prompt").set_value("m4x").run()
    assert any(
        e.value.startswith(
            "prompt 'm4x' cannot be asked: task preference's prompts never hold the "
            "character '4'; allowed: characters from"
        )
        for e in at.error
    )
    at.text_input(key="dpo:chat_prompt").set_value("ivy").run()
    assert not at.error and not at.exception
