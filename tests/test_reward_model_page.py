"""The reward-model page under Streamlit's AppTest: it renders before any fit, Train fits a Bradley-Terry model
from the page's controls (records, charts, held-out numbers), and the ranking table scores the policy-like
responses with the fitted model, best first, beside the gold judge; a finished over-optimisation experiment is
drawn against √KL from its records."""

import json
import math

import pytest
import torch
from streamlit.testing.v1 import AppTest

from app_driver import app_test_on
from rl_core.engine.reward_model import reward_scores
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import records_file
from rl_core.runs.records import read_jsonl
from ui.experiment_jobs import ExperimentJob
from ui.jobs import TrainingSlots


def open_page() -> AppTest:
    return app_test_on("reward_model", timeout=120)


def test_the_page_asks_for_a_fit_before_drawing_one():
    at = open_page()
    assert at.title[0].value.startswith("The reward model")
    assert any("Press **Train**" in info.value for info in at.info)
    assert not at.dataframe  # no ranking without a model
    assert at.button(key="reward_model:train") is not None
    assert at.button(key="reward_model:stop").disabled, "nothing to stop before a fit"
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
    assert at.button(key="reward_model:stop").disabled, "nothing to stop once the fit has finished"
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
    # The sentence under the table counts, in the model's order, what comes before the judge's favourite.
    favourite = table["response"].tolist().index("Max!!!")  # gold quality 7, the judge's best
    zeros = sum(q == 0 for q in table["gold quality"].tolist()[:favourite])
    assert any(
        f"ranks {favourite} response(s) above the gold judge's favourite (Max!!!), {zeros} of them" in c.value
        for c in at.caption
    )


@pytest.mark.slow  # trains the experiment's two arms for real (two steps each, one seed): about a minute
def test_a_finished_overoptimisation_experiment_is_drawn_against_sqrt_kl(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_LAB_DB", str(tmp_path / "runs.sqlite"))
    experiment = get_experiment("overoptimisation")
    job = ExperimentJob(experiment, TrainingSlots(2), workers=2, seeds=[0], steps=2, sft_steps=5).start()
    assert job.join(600) and job.snapshot().status == "finished", job.snapshot().error
    at = AppTest.from_string(
        "from ui.reward_model import overoptimisation_curves\noveroptimisation_curves('reward_model')\n",
        default_timeout=120,
    )
    at.session_state["experiment:overoptimisation"] = job
    at.run()
    assert not at.exception, at.exception
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    assert [c["layout"]["title"]["text"] for c in charts] == [
        "Proxy reward (the learned model)",
        "Gold success (the hidden judge)",
    ]
    for chart, key in zip(charts, ("reward_mean", "success_rate")):
        assert [trace["name"] for trace in chart["data"]] == [arm.label for arm in experiment.arms]
        for trace, arm in zip(chart["data"], experiment.arms):
            records = read_jsonl(job.out / records_file(arm, 0))  # one seed: the curve is its own records
            assert trace["x"] == pytest.approx([math.sqrt(max(r["kl_exact"], 0.0)) for r in records])
            assert trace["y"] == pytest.approx([r[key] for r in records])
    # Before the experiment has run, the page draws nothing here.
    empty = AppTest.from_string(
        "from ui.reward_model import overoptimisation_curves\noveroptimisation_curves('reward_model')\n",
        default_timeout=120,
    ).run()
    assert not empty.exception and not empty.get("plotly_chart")
