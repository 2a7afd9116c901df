"""The toy tasks: registry, prompts, demonstrations (noise rate, encodability) and hand-checked scores."""

from __future__ import annotations

import importlib
import pkgutil
import random

import pytest

import toy_tasks
from rl_core.engine.tokenizer import build_char_tokenizer
from toy_tasks import DEFAULT_TASK, TASKS, get_task
from toy_tasks.base import ExactAnswerTask, ToyTask
from toy_tasks.preference import MAX_MARKS, NAMES, PreferenceTask, distractor, gold_quality, gold_success, typo

TOKENIZER = build_char_tokenizer()


def is_correct(task: ToyTask, prompt: str, response: str) -> bool:
    """Ground truth without a reward model: the exact answer, or the preference task's gold judge."""
    if isinstance(task, ExactAnswerTask):
        return response == task.answer(prompt)
    if hasattr(task, "is_correct"):  # a verifier with many right answers
        return task.is_correct(prompt, response)
    return gold_success(prompt, response)


def test_registry_holds_one_task_per_module():
    modules = {m.name for m in pkgutil.iter_modules(toy_tasks.__path__)} - {"base"}
    registered = {cls.__module__.rsplit(".", 1)[-1] for cls in TASKS.values()}
    assert registered == modules
    assert {"reverse", "shift", "count", "preference"} <= set(TASKS)
    assert DEFAULT_TASK in TASKS


def test_abstract_bases_are_not_registered():
    assert ExactAnswerTask not in TASKS.values()
    assert ToyTask not in TASKS.values()


def test_a_new_subclass_registers_itself():
    module = importlib.import_module("toy_tasks.reverse")

    class Palindrome(module.ReverseTask):
        name = "palindrome-test"

    try:
        assert TASKS["palindrome-test"] is Palindrome
    finally:
        del TASKS["palindrome-test"]


def test_get_task_rejects_unknown_names_and_lists_the_allowed_ones():
    with pytest.raises(ValueError) as error:
        get_task("no-such-task")
    for name in TASKS:
        assert name in str(error.value)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_task_metadata(name):
    task = get_task(name)
    assert isinstance(task, TASKS[name])
    assert task.description and "\n" not in task.description
    assert task.lesson
    assert 1 <= task.max_new_tokens <= 32  # with a prompt of ≤ 8 characters, BOS and EOS: within 64 positions
    assert 0 <= task.default_demo_noise <= 1


@pytest.mark.parametrize("name", sorted(TASKS))
def test_prompts_are_reproducible_and_short(name):
    task = get_task(name)
    first = task.sample_prompts(50, random.Random(7))
    assert first == task.sample_prompts(50, random.Random(7))
    assert first != task.sample_prompts(50, random.Random(8))
    assert all(1 <= len(p) <= 8 for p in first)


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("noise", [0.0, 0.3, None, 1.0])
def test_demonstrations_are_correct_at_rate_one_minus_noise(name, noise):
    task = get_task(name)
    noise = task.default_demo_noise if noise is None else noise
    rng = random.Random(11)
    prompts = task.sample_prompts(2000, rng)
    correct = sum(is_correct(task, p, task.demonstration(p, rng, noise)) for p in prompts) / len(prompts)
    # 2000 draws: the standard error is at most 0.011, so 0.04 is a 3.5-sigma band.
    assert correct == pytest.approx(1 - noise, abs=0.04)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_prompts_and_demonstrations_are_encodable(name):
    task = get_task(name)
    rng = random.Random(5)
    for prompt in task.sample_prompts(300, rng):
        for text in (prompt, task.demonstration(prompt, rng, 0.5)):
            ids = TOKENIZER.encode(text)
            assert len(ids) == len(text) and min(ids) > 2  # one id per character, never a special token
            assert TOKENIZER.decode(ids) == text


def test_reverse_scores():
    task = get_task("reverse")
    prompts = ["b2D>"] * 5
    responses = ["D2b", "b2D", "D2", "D2bb", "D2b"]
    scores = task.score(prompts, responses, [False, False, False, False, True])
    assert scores.rewards == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert scores.successes == [True, False, False, False, False]


def test_reverse_codes_are_letter_digit_capital_and_the_slip_is_a_copy():
    task = get_task("reverse")
    for prompt in task.sample_prompts(200, random.Random(0)):
        assert prompt[0].islower() and prompt[1].isdigit() and prompt[2].isupper() and prompt[3:] == ">"
        assert task.demonstration(prompt, random.Random(0), 1.0) == prompt[:3]


def test_shift_scores():
    task = get_task("shift")
    prompts = ["bdfa>"] * 4
    scores = task.score(prompts, ["cegb", "cdfb", "ceg", "cegb"], [False, False, False, True])
    assert scores.rewards == [1.0, 0.0, 0.0, 0.0]
    assert scores.successes == [True, False, False, False]


def test_shift_slips_copy_single_letters():
    task = get_task("shift")
    rng = random.Random(1)
    for prompt in task.sample_prompts(200, rng):
        demo = task.demonstration(prompt, rng, 0.9)
        assert all(d in (p, chr(ord(p) + 1)) for p, d in zip(prompt[:4], demo))


def test_count_scores():
    task = get_task("count")
    prompts = ["5>", "5>", "5>", "5>", "1>", "9>"]
    responses = ["12345", "1234567", "1234", "123456789012", "1", "123456789"]
    scores = task.score(prompts, responses, [False, False, False, True, False, False])
    assert scores.rewards == [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    assert scores.successes == [True, False, False, False, True, True]


def test_count_slips_overshoot_and_half_of_them_never_stop():
    task = get_task("count")
    rng = random.Random(2)
    demos = [(p, task.demonstration(p, rng, 1.0)) for p in task.sample_prompts(2000, rng)]
    assert all(d.startswith(task.answer(p)) and len(d) > len(task.answer(p)) for p, d in demos)
    too_long = sum(len(d) > task.max_new_tokens for _, d in demos) / len(demos)
    assert too_long == pytest.approx(0.5, abs=0.04)


def test_preference_gold_judge():
    assert gold_success("max>", "Max!") and gold_success("max>", "Max!!!")
    for response in ("Max", "max!", "Max!!!!", "Zoe!", "Max!!!!!!!!!", "!!!!"):
        assert not gold_success("max>", response)
    assert gold_quality("max>", "Max!!") > gold_quality("max>", "Max!") > gold_quality("max>", "max!!!")
    assert gold_quality("max>", "Max!!!!") == 0  # shouting


def test_preference_demonstrations_never_shout():
    task = get_task("preference")
    rng = random.Random(3)
    for prompt in task.sample_prompts(500, rng):
        demo = task.demonstration(prompt, rng, 0.5)
        assert len(demo) - len(demo.rstrip("!")) <= MAX_MARKS


def test_preference_typos_are_never_right():
    rng = random.Random(6)
    for _ in range(500):
        name = rng.choice(NAMES)
        assert typo(name, rng) != name
        assert len(distractor(name, rng, 12)) <= 12


def test_preference_pairs_are_ranked_by_the_gold_judge_up_to_label_noise():
    task = get_task("preference")
    pairs = task.preference_pairs(2000, random.Random(4), PreferenceTask.label_noise)
    agree = sum(gold_quality(p.prompt, p.chosen) > gold_quality(p.prompt, p.rejected) for p in pairs) / len(pairs)
    assert agree == pytest.approx(1 - PreferenceTask.label_noise, abs=0.03)


def test_preference_score_needs_prepare():
    with pytest.raises(RuntimeError, match="prepare"):
        get_task("preference").score(["max>"], ["Max!"], [False])
