"""The reward-model page under Streamlit's AppTest: it renders before any fit, Train fits a Bradley-Terry model
from the page's controls (records, charts, held-out numbers), and the ranking table scores the policy-like
responses with the fitted model, best first, beside the gold judge."""

import json
from pathlib import Path

import torch
from streamlit.testing.v1 import AppTest

from rl_core.reward_model import reward_scores

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def open_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("app_pages/reward_model.py").run()
    assert not at.exception, at.exception
    return at


def test_the_page_asks_for_a_fit_before_drawing_one():
    at = open_page()
    assert at.title[0].value.startswith("The reward model")
    assert any("Press **Train**" in info.value for info in at.info)
    assert not at.dataframe  # no ranking without a model
    assert at.button(key="reward_model:train") is not None
    assert "Over-optimising the reward model" in [h.value for h in at.subheader]


def test_train_fits_from_the_controls_and_ranks_with_the_fitted_model():
    at = open_page()
    at.select_slider(key="reward_model:max_steps").set_value(20).run()
    at.select_slider(key="reward_model:n_pairs").set_value(200).run()
    at.select_slider(key="reward_model:seed").set_value(3).run()
    at.button(key="reward_model:train").click().run()
    assert not at.exception, at.exception
    fit = at.session_state["reward_model:fit"]
    assert fit["status"] == "finished" and fit["held_out"] == 40  # a fifth of 200 pairs
    assert fit["settings"]["seed"] == 3 and fit["settings"]["max_steps"] == 20
    assert [r["step"] for r in fit["records"]] == list(range(1, 21))
    assert [r["step"] for r in fit["records"] if "heldout_accuracy" in r] == [10, 20]
    titles = {json.loads(chart.proto.spec)["layout"]["title"]["text"] for chart in at.get("plotly_chart")}
    assert {"Bradley-Terry loss", "Pairwise accuracy", "Reward margin r(y_w) − r(y_l)"} <= titles
    last = fit["records"][-1]
    assert any(f"accuracy {last['heldout_accuracy']:.2f}" in c.value for c in at.caption)

    table = at.dataframe[0].value
    scores = table["reward model score"].tolist()
    assert scores == sorted(scores, reverse=True) and table["rank"].tolist() == list(range(1, len(table) + 1))
    # The scores are the fitted model's own, recomputed outside the page.
    with torch.no_grad():
        again = reward_scores(fit["model"], fit["tokenizer"], ["max>"] * len(table), table["response"].tolist())
    assert [round(s, 3) for s in again.tolist()] == scores
    assert table.set_index("response").loc["Max!!", "gold quality"] == 6
