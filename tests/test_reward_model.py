"""The Bradley-Terry loss, reward-model scoring, training, and the preference task's cached reward model."""

from __future__ import annotations

import math
import random

import pytest
import torch

import toy_tasks.preference as preference
from rl_core.engine.models import build_value_model
from rl_core.engine.reward_model import (
    PreferencePair,
    RewardModelTraining,
    bradley_terry_loss,
    encode_for_reward,
    pairwise_accuracy,
    preference_accuracy,
    preference_stats,
    reward_margin,
    reward_scores,
    train_reward_model,
)
from rl_core.engine.tokenizer import build_char_tokenizer
from toy_tasks import get_task

TOKENIZER = build_char_tokenizer()


def test_bt_loss_of_equal_scores_is_log_2():
    scores = torch.tensor([0.3, -1.0, 2.0])
    assert bradley_terry_loss(scores, scores).item() == pytest.approx(math.log(2))


def test_bt_loss_matches_a_hand_computed_value():
    chosen, rejected = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0])
    expected = -(math.log(1 / (1 + math.exp(-2.0))) + math.log(1 / (1 + math.exp(1.0)))) / 2
    assert bradley_terry_loss(chosen, rejected).item() == pytest.approx(expected)


def test_bt_loss_gradient_raises_chosen_and_lowers_rejected():
    chosen = torch.tensor([0.5, -0.2], requires_grad=True)
    rejected = torch.tensor([0.0, 0.4], requires_grad=True)
    bradley_terry_loss(chosen, rejected).backward()
    assert (chosen.grad < 0).all() and (rejected.grad > 0).all()
    # d/dr_c of −log σ(r_c − r_r), averaged over 2 pairs, is −σ(r_r − r_c)/2.
    assert chosen.grad.tolist() == pytest.approx(
        [-torch.sigmoid(torch.tensor(-0.5)).item() / 2, -torch.sigmoid(torch.tensor(0.6)).item() / 2]
    )
    assert rejected.grad.tolist() == pytest.approx((-chosen.grad).tolist())


def test_encoding_is_bos_prompt_response_eos_left_padded():
    ids, mask = encode_for_reward(TOKENIZER, ["ab>", "a>"], ["x", "yz"], torch.device("cpu"))
    assert ids[0].tolist() == [TOKENIZER.bos_token_id] + TOKENIZER.encode("ab>x") + [TOKENIZER.eos_token_id]
    assert ids[1].tolist() == [TOKENIZER.bos_token_id] + TOKENIZER.encode("a>yz") + [TOKENIZER.eos_token_id]
    long_ids, long_mask = encode_for_reward(TOKENIZER, ["abcd>", "a>"], ["xyz", "y"], torch.device("cpu"))
    assert long_ids[1, :5].tolist() == [TOKENIZER.pad_token_id] * 5 and long_mask[1].tolist() == [0] * 5 + [1] * 5
    assert (long_ids[:, -1] == TOKENIZER.eos_token_id).all()


def test_scores_do_not_depend_on_padding():
    torch.manual_seed(0)
    model = build_value_model("tiny", TOKENIZER).eval()
    with torch.no_grad():
        alone = reward_scores(model, TOKENIZER, ["ab>"], ["x"])
        padded = reward_scores(model, TOKENIZER, ["ab>", "abcdef>"], ["x", "xyzxyz"])
    assert alone.shape == (1,) and padded.shape == (2,)
    assert padded[0].item() == pytest.approx(alone[0].item(), abs=1e-5)


def test_training_learns_a_simple_preference():
    rng = random.Random(0)
    # The labeller prefers a response with more "a"s; every pair differs, so the held-out set is informative.
    pairs = []
    for _ in range(200):
        prompt = rng.choice("pq") + ">"
        short, long = sorted(rng.sample(range(4), 2))
        pairs.append(PreferencePair(prompt, "a" * long + "b", "a" * short + "b"))
    model, accuracy = train_reward_model(pairs, TOKENIZER, steps=60, batch_size=32, seed=0)
    assert accuracy >= 0.9
    assert not model.training
    assert preference_accuracy(model, TOKENIZER, pairs) >= 0.9


def test_training_rejects_bad_arguments():
    pair = PreferencePair("a>", "x", "y")
    with pytest.raises(ValueError, match="at least 2"):
        train_reward_model([pair], TOKENIZER, steps=1)
    with pytest.raises(ValueError, match="holdout_fraction"):
        train_reward_model([pair, pair], TOKENIZER, steps=1, holdout_fraction=1.0)
    with pytest.raises(ValueError, match="steps=0"):
        RewardModelTraining([pair, pair], TOKENIZER, steps=0)
    with pytest.raises(ValueError, match="batch_size=2.5"):
        RewardModelTraining([pair, pair], TOKENIZER, batch_size=2.5)
    with pytest.raises(ValueError, match="learning_rate=0"):
        RewardModelTraining([pair, pair], TOKENIZER, learning_rate=0)


def test_margin_and_pairwise_accuracy_by_hand():
    chosen = torch.tensor([2.0, 0.5, 1.0, 3.0])
    rejected = torch.tensor([1.0, 1.5, 1.0, 0.0])
    # Differences 1, −1, 0, 3: mean 3/4; only the first and the last are ordered as labelled (a tie is wrong).
    assert reward_margin(chosen, rejected).item() == pytest.approx(0.75)
    assert pairwise_accuracy(chosen, rejected).item() == pytest.approx(0.5)


def test_step_records_evaluate_the_held_out_pairs_on_schedule():
    rng = random.Random(1)
    pairs = [PreferencePair("p>", "a" * rng.randint(2, 4) + "b", "b") for _ in range(40)]
    training = RewardModelTraining(pairs, TOKENIZER, steps=7, batch_size=8, seed=1, eval_every=3)
    records = list(training.steps())
    assert [r["step"] for r in records] == list(range(1, 8))
    assert [r["step"] for r in records if "heldout_accuracy" in r] == [3, 6, 7]  # every 3 steps, and the last
    assert len(training.held_out) == 8 and not training.model.training
    # The last record's held-out numbers are those of the finished model, scored by the independent route.
    assert records[-1]["heldout_accuracy"] == pytest.approx(
        preference_accuracy(training.model, TOKENIZER, training.held_out)
    )
    with torch.no_grad():
        chosen, rejected = (
            reward_scores(
                training.model,
                TOKENIZER,
                [p.prompt for p in training.held_out],
                [getattr(p, side) for p in training.held_out],
            )
            for side in ("chosen", "rejected")
        )
    assert records[-1]["heldout_margin"] == pytest.approx((chosen - rejected).mean().item(), abs=1e-5)
    assert preference_stats(training.model, TOKENIZER, training.held_out)["loss"] == pytest.approx(
        records[-1]["heldout_loss"]
    )
    # The step-wise fit is the one train_reward_model returns for the same arguments.
    model, accuracy = train_reward_model(pairs, TOKENIZER, steps=7, batch_size=8, seed=1)
    assert accuracy == pytest.approx(records[-1]["heldout_accuracy"])
    for a, b in zip(model.parameters(), training.model.parameters()):
        assert torch.equal(a, b)


def test_policy_like_responses_span_the_gold_judges_scale():
    responses = preference.policy_like_responses("max>", random.Random(0))
    quality = {r: preference.gold_quality("max>", r) for r in responses}
    assert [quality["Max" + "!" * k] for k in (0, 1, 2, 3, 4, 6, 9, 12)] == [4, 5, 6, 7, 0, 0, 0, 0]
    assert quality["max!!"] == 2  # lowercase: not the name, two marks
    assert len(set(responses)) == len(responses) == 11


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The preference task with its reward model trained once, as the trainer would prepare it."""
    cache_dir = tmp_path_factory.mktemp("cache")
    task = get_task("preference")
    task.prepare(cache_dir, torch.device("cpu"), seed=0)
    return task, cache_dir


@pytest.mark.slow
def test_reward_model_ranks_held_out_gold_preferences(prepared):
    task, _ = prepared
    assert task.reward_model_accuracy >= 0.7  # held-out pairs whose labels include the 10 % flips
    clean = task.preference_pairs(500, random.Random(12345), label_noise=0.0)  # fresh pairs, gold labels only
    assert preference_accuracy(task.reward_model, TOKENIZER, clean) >= 0.8


@pytest.mark.slow
def test_prepared_task_scores_with_the_reward_model_and_judges_with_gold(prepared):
    task, _ = prepared
    prompts = ["max>"] * 4
    responses = ["Max!!!", "Max", "max!", "Max!!!!!!!!!"]
    scores = task.score(prompts, responses, [False, False, False, True])
    assert scores.successes == [True, False, False, False]
    assert scores.rewards[0] > scores.rewards[1] and scores.rewards[0] > scores.rewards[2]


@pytest.mark.slow
def test_reward_model_is_exploitable_by_shouting(prepared):
    """The flaw the task is built around: far outside the data, more marks still score higher."""
    task, _ = prepared
    names = list(preference.NAMES)
    honest = task.score([n + ">" for n in names], [n.capitalize() + "!!!" for n in names], [False] * len(names))
    shouting = [n.capitalize() + "!" * (12 - len(n)) for n in names]
    hacked = task.score([n + ">" for n in names], shouting, [True] * len(names))
    assert sum(hacked.rewards) > sum(honest.rewards)
    assert not any(hacked.successes)


@pytest.mark.slow
def test_second_prepare_loads_the_cache_without_training(prepared, monkeypatch):
    task, cache_dir = prepared
    (folder,) = (cache_dir / "reward_models").iterdir()
    stamp = (folder / "value_model.pt").stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the cached reward model was trained again")

    monkeypatch.setattr(preference, "train_reward_models", no_training)
    again = get_task("preference")
    again.prepare(cache_dir, torch.device("cpu"), seed=0)
    assert (folder / "value_model.pt").stat().st_mtime_ns == stamp
    assert [p.name for p in (cache_dir / "reward_models").iterdir()] == [folder.name]  # no staging folder left
    responses = ["Max!!", "max"]
    assert again.score(["max>"] * 2, responses, [False, False]) == task.score(["max>"] * 2, responses, [False, False])
