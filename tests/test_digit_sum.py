"""The digit-sum tasks: many right answers of any length, hand-checked scores, the demonstrations' shapes, and the
coin-flip control whose reward ignores the answer."""

import random

import pytest

from toy_tasks import get_task
from toy_tasks.digit_sum import MAX_TARGET, MIN_TARGET, digit_sum, digits_summing_to


def test_digit_sum_by_hand():
    assert digit_sum("98") == 17 and digit_sum("1111") == 4
    assert digit_sum("") is None and digit_sum("9a") is None and digit_sum("90") is None  # digits 1–9 only


def test_every_string_with_the_right_sum_is_right_whatever_its_length():
    task = get_task("digit_sum")
    prompts = ["17>"] * 6
    responses = ["98", "4553", "11111111111111111", "99", "9 8", "98"]
    scores = task.score(prompts, responses, [False, False, False, False, False, True])
    assert scores.successes == [True, True, True, False, False, False]  # the last one was cut off at the limit
    assert scores.rewards == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_digits_summing_to_respects_the_largest_digit():
    rng = random.Random(0)
    for total in range(1, 40):
        for largest in range(1, 10):
            digits = digits_summing_to(total, largest, rng)
            assert digit_sum(digits) == total and max(digits) <= str(largest)


def test_demonstrations_vary_in_length_for_one_target():
    task = get_task("digit_sum")
    rng = random.Random(1)
    lengths = {len(task.demonstration("20>", rng, 0.0)) for _ in range(300)}
    assert min(lengths) <= 4 and max(lengths) >= 12  # the reward leaves the length free


def test_prompts_cover_the_target_range():
    task = get_task("digit_sum")
    targets = {task.target(p) for p in task.sample_prompts(2000, random.Random(2))}
    assert targets == set(range(MIN_TARGET, MAX_TARGET + 1))


def test_sloppy_demonstrations_miss_by_one_to_three():
    task = get_task("digit_sum")
    rng = random.Random(3)
    misses = {digit_sum(task.demonstration("15>", rng, 1.0)) - 15 for _ in range(500)}
    assert misses == {-3, -2, -1, 1, 2, 3}


def test_rambling_slips_run_past_the_limit_and_are_never_right():
    task = get_task("digit_sum_long")
    rng = random.Random(4)
    demos = [(p, task.demonstration(p, rng, 1.0)) for p in task.sample_prompts(2000, rng)]
    assert not any(task.is_correct(p, d) for p, d in demos)
    too_long = sum(len(d) > task.max_new_tokens for _, d in demos) / len(demos)
    assert too_long == pytest.approx(task.ramble_fraction, abs=0.04)  # 2000 draws: a 3.5-sigma band


def coin_flip(seed: int):
    task = get_task("coin_flip")
    task.prepare(None, None, seed)  # the coins' seed; the task has nothing to build
    return task


def test_coin_flip_success_is_the_digit_sum_and_the_reward_a_function_of_the_batch():
    prompts, responses, cut = ["17>"] * 4, ["98", "4553", "99", "98"], [False, False, False, True]
    scores = coin_flip(0).score(prompts, responses, cut)
    assert scores.successes == get_task("digit_sum").score(prompts, responses, cut).successes
    assert coin_flip(0).score(prompts, responses, cut) == scores  # the same batch, the same coins
    draws = {tuple(coin_flip(seed).score(prompts * 8, responses * 8, cut * 8).rewards) for seed in range(5)}
    assert len(draws) == 5  # 32 coins: five seeds never repeat a draw


def test_coin_flip_pays_right_and_wrong_answers_alike():
    """2,000 batches of eight, half of each right: each kind's mean reward is 0.5 within 0.025 (its standard
    error is 0.0079), so neither the answer nor its place in the batch earns a better coin."""
    task = coin_flip(3)
    rng = random.Random(0)
    paid = {True: [], False: []}
    for _ in range(2000):
        responses = [digits_summing_to(17 + rng.choice((0, 0, 1, -1)), rng.randint(2, 9), rng) for _ in range(8)]
        scores = task.score(["17>"] * 8, responses, [False] * 8)
        for success, reward in zip(scores.successes, scores.rewards):
            paid[success].append(reward)
    for rewards in paid.values():
        assert len(rewards) > 4000 and abs(sum(rewards) / len(rewards) - 0.5) < 0.025
