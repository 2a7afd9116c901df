"""The on-policy distillation page under Streamlit's AppTest: its lesson knobs, formulas with their code and the
experiment panel render; Train runs the opd preset from the page's knobs and draws the KL to the teacher; a
refused combination names the knob and disables Train."""

import time

import pytest

from app_driver import app_test_on
from ui import share

TIMEOUT = 300  # seconds: the first Train of a process also trains the warm start and the teacher


def open_page():
    return app_test_on("distillation", timeout=120)


def test_the_page_shows_its_knobs_formulas_and_experiment():
    at = open_page()
    assert at.title[0].value.startswith("On-policy distillation")
    assert at.selectbox(key="distillation:teacher_model").value == "tiny"
    assert at.toggle(key="distillation:use_policy_gradient").value is True
    assert at.selectbox(key="distillation:distillation_loss_mode").value == "k1"
    assert len(at.latex) >= 2 and any("def reverse_kl_advantages" in code.value for code in at.code)
    assert "See it happen" in [h.value for h in at.header]


@pytest.mark.timeout(TIMEOUT + 120)
def test_train_distils_from_the_teacher_and_draws_its_kl():
    at = open_page()
    at.select_slider(key="distillation:steps").set_value(2).run()
    at.select_slider(key="distillation:sft_steps").set_value(50).run()
    at.select_slider(key="distillation:teacher_sft_steps").set_value(50).run()
    at.button(key="distillation:train").click().run()
    job = at.session_state["distillation:runs"][-1]
    deadline = time.monotonic() + TIMEOUT
    while job.active:
        assert time.monotonic() < deadline, job.snapshot().status
        time.sleep(1)
        at.run()
    at.run()
    assert not at.exception, at.exception
    snap = job.snapshot()
    assert snap.status == "finished", snap.error
    assert {"teacher_kl", "teacher_kl_exact", "success_rate"} <= set(snap.records[-1])
    titles = [chart.proto.spec for chart in at.get("plotly_chart")]
    assert any('"KL to the teacher"' in spec for spec in titles)


def test_no_teacher_and_no_task_reward_is_refused_by_name():
    at = open_page()
    at.selectbox(key="distillation:teacher_model").set_value(None).run()
    assert not at.exception, at.exception
    assert any("use_task_rewards" in error.value for error in at.error)
    assert at.button(key="distillation:train").disabled


def test_a_link_sets_the_teacher_by_name_or_to_none():
    assert share.parse("teacher_model", share.text(None)) is None
    assert share.parse("teacher_model", "small") == "small"
