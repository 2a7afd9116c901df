"""Talking to a reward model: a pair's scores are the value head's reading at the final EOS of each response alone,
the preference is Bradley-Terry's σ(r_w − r_l), a policy's samples are counted and ranked, a response is held to what
the tokenizer reads and the task's length limit; and on the reward-model page the section appears after a fit and
answers what is typed or picked."""

import math

import pytest
import torch
from test_chat import EOS, TOKENIZER, A, B, constant_model

from app_driver import app_test_on
from rl_core.engine.models import build_value_model
from rl_core.engine.reward_chat import (
    PairJudgement,
    check_response,
    judge_pair,
    preference_probability,
    rank_policy_samples,
    score_responses,
)
from toy_tasks.preference import gold_quality, gold_success
from ui.reward_chat import pair_verdict


def reward_model() -> torch.nn.Module:
    """A tiny value model with every weight drawn at random (the head included), so distinct texts score apart."""
    torch.manual_seed(0)
    model = build_value_model("tiny", TOKENIZER)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.2)
    return model.train()  # scoring must switch dropout off itself, and give the mode back


def alone(model, prompt: str, response: str) -> float:
    """The value at the last position of `bos + prompt + response + eos`, one unpadded row: the independent route."""
    ids = [TOKENIZER.bos_token_id, *TOKENIZER.encode(prompt + response), EOS]
    with torch.no_grad():
        model.eval()
        value = model(torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))[0, -1].item()
        model.train()
    return value


def test_preference_probability_is_bradley_terry():
    assert preference_probability(2.0, 0.0) == pytest.approx(1 / (1 + math.exp(-2)))  # 0.8808
    assert preference_probability(0.3, 0.3) == 0.5
    assert preference_probability(-1.0, 1.0) == pytest.approx(0.1192, abs=1e-4)


def test_a_pair_is_scored_as_each_response_alone_and_the_higher_one_preferred():
    model = reward_model()
    judgement = judge_pair(model, TOKENIZER, "max>", "Max!!", "mx")  # different lengths: one is left padded
    expected = (alone(model, "max>", "Max!!"), alone(model, "max>", "mx"))
    assert judgement.scores == pytest.approx(expected, abs=1e-5) and expected[0] != expected[1]
    assert model.training  # the caller's mode is given back
    winner = 0 if expected[0] > expected[1] else 1
    assert judgement.preferred == winner
    assert judgement.margin == pytest.approx(abs(expected[0] - expected[1]), abs=1e-5)
    assert judgement.probability == pytest.approx(1 / (1 + math.exp(-abs(expected[0] - expected[1]))), abs=1e-5)
    swapped = judge_pair(model, TOKENIZER, "max>", "mx", "Max!!")
    assert swapped.preferred == 1 - winner and swapped.probability == pytest.approx(judgement.probability)


def test_a_tie_prefers_neither_at_one_half():
    tie = PairJudgement("max>", ("Max!", "Max?"), (1.5, 1.5))
    assert tie.preferred is None and tie.margin == 0 and tie.probability == 0.5
    assert "a coin toss, σ(0) = 0.5" in pair_verdict(tie)
    # "Max!" (gold 5) against "Max?" (gold 0: the name is "Max?"): the judge prefers A.
    assert pair_verdict(tie).endswith("The gold judge prefers A (quality 5 against 0): the model disagrees.")


def test_the_verdict_says_whether_the_gold_judge_agrees():
    prefers_b = PairJudgement("ivy>", ("Ivy!!", "Ivy!!!!"), (0.5, 2.5))  # B shouts: gold 0 against 6
    text = pair_verdict(prefers_b)
    assert text.startswith(
        "The reward model prefers B: r_B − r_A = 2.000, so under Bradley-Terry P(B ≻ A) = σ(2.000) = 0.881."
    )
    assert text.endswith("The gold judge prefers A (quality 6 against 0): the model disagrees.")


def test_a_policy_s_samples_are_counted_scored_and_ranked():
    model = reward_model()
    # A policy that ends at once: all eight samples are the empty response.
    ranked = rank_policy_samples(model, constant_model({EOS: 1.0}), TOKENIZER, "max>", 4, seed=0)
    assert [(r.response, r.count, r.truncated) for r in ranked] == [("", 8, False)]
    assert ranked[0].score == pytest.approx(alone(model, "max>", ""), abs=1e-5)
    # One that never ends: every sample is cut at the length limit.
    ranked = rank_policy_samples(model, constant_model({A: 1.0}), TOKENIZER, "max>", 4, seed=0, n=3)
    assert [(r.response, r.count, r.truncated) for r in ranked] == [("aaaa", 3, True)]
    # A mixed one: the distinct responses, their counts summing to n, scored each alone, best first.
    ranked = rank_policy_samples(model, constant_model({A: 0.4, B: 0.3, EOS: 0.3}), TOKENIZER, "max>", 3, seed=1, n=16)
    assert sum(r.count for r in ranked) == 16 and len({r.response for r in ranked}) == len(ranked) > 2
    assert [r.score for r in ranked] == sorted((r.score for r in ranked), reverse=True)
    for r in ranked:
        assert r.score == pytest.approx(alone(model, "max>", r.response), abs=1e-5)
        assert set(r.response) <= {"a", "b"} and r.truncated == (len(r.response) == 3)
    assert [r.score for r in ranked] == pytest.approx(
        score_responses(model, TOKENIZER, "max>", [r.response for r in ranked])
    )


def test_a_response_is_held_to_the_tokenizer_and_the_length_limit():
    allowed = (
        "allowed: printable ASCII characters (letters, digits, punctuation, space), at most 12 of them "
        "(task preference's length limit), e.g. "
    )
    assert check_response("preference", "Max!!") == "Max!!"
    assert check_response("preference", "") == ""  # EOS alone: an answer a policy can give
    assert check_response("preference", "M" * 12) == "M" * 12
    with pytest.raises(ValueError, match="is 13 characters long; allowed") as error:
        check_response("preference", "M" * 13)
    assert allowed in str(error.value)
    with pytest.raises(
        ValueError, match="response 'Max€é' cannot be scored: the tokenizer reads no characters 'é', '€'; allowed"
    ):
        check_response("preference", "Max€é")


def test_the_page_talks_to_the_fitted_reward_model():
    at = app_test_on("reward_model", timeout=300)
    assert "Talk to this reward model" not in [h.value for h in at.subheader]  # nothing to talk to before a fit
    at.select_slider(key="reward_model:max_steps").set_value(20).run()
    at.select_slider(key="reward_model:n_pairs").set_value(200).run()
    at.select_slider(key="reward_model:seed").set_value(1).run()
    at.button(key="reward_model:train").click().run()
    assert not at.exception, at.exception
    assert "Talk to this reward model" in [h.value for h in at.subheader]
    fit = at.session_state["reward_model:fit"]
    first = fit["pairs"][0]  # the boxes start with the first held-out pair, chosen as A
    assert [at.text_input(key=f"reward_model:chat_{k}").value for k in ("prompt", "response_A", "response_B")] == [
        first.prompt,
        first.chosen,
        first.rejected,
    ]
    table = at.dataframe[1].value  # after the ranking of policy-like responses
    expected = [alone(fit["model"], first.prompt, r) for r in (first.chosen, first.rejected)]
    assert table["reward model score r"].tolist() == pytest.approx(expected, abs=1e-3)
    assert table["gold quality"].tolist() == [gold_quality(first.prompt, r) for r in (first.chosen, first.rejected)]
    assert any(c.value.startswith("The labeller chose A in the data") for c in at.caption)
    # Typed: a shouting cheer against a plain one, then bad input named with what is allowed.
    at.text_input(key="reward_model:chat_prompt").set_value("max").run()
    at.text_input(key="reward_model:chat_response_A").set_value("Max!!").run()
    at.text_input(key="reward_model:chat_response_B").set_value("Max!!!!!!").run()
    scores = [alone(fit["model"], "max>", r) for r in ("Max!!", "Max!!!!!!")]
    winner = "A" if scores[0] > scores[1] else "B"
    assert any(
        c.value.startswith(f"The reward model prefers {winner}: ")
        and c.value.endswith(
            "The gold judge prefers A (quality 6 against 0): the model "
            + ("agrees." if winner == "A" else "disagrees.")
        )
        for c in at.caption
    )
    assert not any(c.value.startswith("The labeller chose") for c in at.caption)
    at.text_input(key="reward_model:chat_response_B").set_value("Max" + "!" * 10).run()
    assert any(e.value.startswith("response 'Max!!!!!!!!!!' is 13 characters long; allowed") for e in at.error)
    at.text_input(key="reward_model:chat_prompt").set_value(" ").run()
    assert any(e.value.startswith("prompt is empty; allowed: characters from") for e in at.error)
    at.text_input(key="reward_model:chat_prompt").set_value("ivy").run()
    at.text_input(key="reward_model:chat_response_B").set_value("Ivy!").run()
    assert not at.error
    # The SFT policy's samples for ivy>, ranked by the fitted model, each with the gold judge's verdict.
    at.toggle(key="reward_model:chat_samples").set_value(True).run()
    assert not at.exception, at.exception
    samples = at.dataframe[2].value
    assert samples["drawn"].sum() == 8 and samples["rank"].tolist() == list(range(1, len(samples) + 1))
    scores = samples["reward model score r"].tolist()
    assert scores == sorted(scores, reverse=True)
    for row in samples.to_dict("records"):
        text = row["response"].removesuffix(" (cut)")
        assert row["reward model score r"] == pytest.approx(alone(fit["model"], "ivy>", text), abs=1e-3)
        assert row["gold verdict"] == (not row["response"].endswith(" (cut)") and gold_success("ivy>", text))
