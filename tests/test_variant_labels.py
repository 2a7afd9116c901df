"""A run's label names the policy loss that trained it: a variant's own loss by the variant's title (CISPO), any
other loss chosen on the page or in a shared link by name (`policy_loss=dro` on the GRPO variant)."""

import pytest

from app_driver import app_test_on
from rl_core.algorithms import get_preset
from ui.lab import variant_title
from ui.runs import labels


def test_a_variant_is_named_by_its_title_and_another_loss_by_its_name():
    assert variant_title("grpo", get_preset("grpo")) == "GRPO"
    assert variant_title("cispo", get_preset("cispo")) == "CISPO"
    assert variant_title("grpo", get_preset("grpo", policy_loss="dro")) == "GRPO with policy_loss=dro"
    assert variant_title("sapo", get_preset("sapo", policy_loss="clip")) == "SAPO with policy_loss=clip"


@pytest.mark.timeout(600)
def test_a_run_opened_from_a_link_with_policy_loss_dro_is_labelled_dro():
    at = app_test_on("beyond_grpo", policy_loss="dro", steps="2", sft_steps="50")
    assert at.radio(key="beyond_grpo:variant").value == "GRPO"
    at.button(key="beyond_grpo:train").click().run()
    runs = at.session_state["beyond_grpo:runs"]
    job = runs[-1]
    try:
        assert job.run.algo.policy_loss == "dro"
        assert labels(runs) == {job.number: f"#{job.number} · GRPO with policy_loss=dro"}
        assert job.label == f"GRPO with policy_loss=dro · beyond_grpo page #{job.number}"  # the run store's name
    finally:
        job.stop()
        job.join(120)
