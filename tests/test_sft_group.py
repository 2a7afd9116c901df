"""SFT warm starts of many seeds trained as one group: a seed's losses in a group are its losses alone, the same
group twice is bit-identical, each seed's band rounds and checkpoint stay its own, and a sweep groups its warm
starts (teachers included) by seed."""

import random

import pytest
import torch

from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine import sft
from rl_core.engine.models import position_ids_from_mask
from rl_core.engine.pretrained import initial_policy
from rl_core.engine.rollout import token_logprobs
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import plan_experiment
from rl_core.runs import sweep
from rl_core.runs.sweep import warm_start_jobs
from toy_tasks import get_task

STEPS = 4
BATCH = 8


def policies(seeds, tokenizer):
    """Each seed's initial tiny policy, as the warm start builds it."""
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(initial_policy("tiny", tokenizer))
    return out


def fit(seeds, task, tokenizer):
    trained = policies(seeds, tokenizer)
    losses = sft.train_sft(trained, tokenizer, task, STEPS, 0.1, seeds, learning_rate=3e-3, batch_size=BATCH)
    return losses, trained


def test_a_seed_trains_in_a_group_of_three_as_it_does_alone_and_the_group_twice_bit_identically():
    task, tokenizer = get_task("caesar"), build_char_tokenizer()
    alone, _ = fit([0], task, tokenizer)
    group, trained = fit([5, 0, 9], task, tokenizer)
    again, trained_again = fit([5, 0, 9], task, tokenizer)
    torch.testing.assert_close(torch.tensor(group)[:, 1], torch.tensor(alone)[:, 0], rtol=0, atol=1e-5)
    assert group == again
    for first, second in zip(trained, trained_again):
        assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
    # The other seeds draw other demonstrations from other weights: their losses are their own.
    assert len(set(group[0])) == 3


def test_the_first_loss_is_the_demonstrations_nll_of_a_padded_pass_of_the_unstacked_model():
    """An independent route: the group's first loss of a seed is the token-mean NLL that the policy's own
    `transformers` forward gives over the padded batch of the demonstrations `random.Random(seed)` draws (before
    any update). coin_flip's prompts repeat, so the group's pass is packed, in sequences of at most 32 positions."""
    task, tokenizer = get_task("coin_flip"), build_char_tokenizer()
    losses = sft.train_sft(policies([3, 4], tokenizer), tokenizer, task, 1, 0.1, [3, 4], learning_rate=3e-3)
    for r, seed in enumerate([3, 4]):
        (policy,) = policies([seed], tokenizer)
        batch = sft.demonstration_batch(task, tokenizer, random.Random(seed), 64, 0.1, torch.device("cpu"))
        assert batch.prefix_tree.attention_mask.dim() == 4 and batch.prefix_tree.input_ids.shape[1] <= 32
        with torch.no_grad():
            mask = batch.attention_mask
            logits = policy(input_ids=batch.sequences, attention_mask=mask, position_ids=position_ids_from_mask(mask))
        # The logits at column P − 1 + t predict response token t.
        logp = token_logprobs(logits.logits[:, batch.prompt_length - 1 : -1], batch.response_ids)
        expected = -(logp * batch.response_mask).sum().item() / batch.response_mask.sum().item()
        assert losses[0][r] == pytest.approx(expected, abs=1e-5)


def test_trained_policies_leave_the_groups_buffer_and_keep_their_own_weights():
    task, tokenizer = get_task("caesar"), build_char_tokenizer()
    before = policies([1, 2], tokenizer)
    _, trained = fit([1, 2], task, tokenizer)
    for old, new in zip(before, trained):
        changed = [not torch.equal(a, b) for a, b in zip(old.parameters(), new.parameters())]
        assert all(changed)  # every tensor moved: each policy was trained
    pointers = {p.untyped_storage().data_ptr() for policy in trained for p in policy.parameters()}
    assert len(pointers) == sum(1 for policy in trained for _ in policy.parameters())


def test_missing_warm_starts_train_as_one_group_and_each_seeds_band_rounds_are_its_own(monkeypatch, tmp_path):
    """Seeds 0 and 1 train together; seed 0 lands in the band, seed 1 falls short and trains on alone (the same
    weights); seed 2 is cached and trains not at all. Each seed's report is its own."""
    task, tokenizer = get_task("reverse"), build_char_tokenizer()
    task.sft_success_band = (0.25, 0.55)
    groups = []
    monkeypatch.setattr(sft, "train_sft", lambda policies, *a, **k: groups.append((list(policies), a[4])))
    args = (task.default_demo_noise, sft.DEFAULT_SFT_STEPS, torch.device("cpu"), tmp_path)
    monkeypatch.setattr(sft, "sft_success_rate", lambda *a: 0.4)
    sft.sft_policy(task, tokenizer, "tiny", 2, *args)
    groups.clear()
    measured = iter([0.4, 0.1, 0.3])  # seed 0, seed 1 (first round); seed 1 (second round)
    monkeypatch.setattr(sft, "sft_success_rate", lambda *a: next(measured))
    results = sft.sft_policies(task, tokenizer, "tiny", [0, 1, 2], *args)
    assert [seeds for _, seeds in groups] == [[0, 1], [1001]]
    assert groups[1][0][0] is groups[0][0][1]  # short of the skill: the same weights train on
    reports = [report for _, report in results]
    assert [r["success_rate"] for r in reports] == [0.4, 0.3, 0.4]
    assert [r["attempts"] for r in reports] == [1, 2, 1]
    assert "note" in reports[1] and "seed 1" in reports[1]["note"] and "note" not in reports[0]
    # Each checkpoint went to its own folder: asked again, every seed loads, none trains.
    groups.clear()
    again = sft.sft_policies(task, tokenizer, "tiny", [2, 1, 0], *args)
    assert groups == [] and [r for _, r in again] == reports[::-1]


def test_a_group_refuses_a_seed_twice(tmp_path):
    task = get_task("reverse")
    with pytest.raises(ValueError, match="seeds lists a seed twice"):
        sft.sft_policies(task, build_char_tokenizer(), "tiny", [1, 1], 0.1, 5, torch.device("cpu"), tmp_path)


def test_an_experiments_warm_starts_are_two_jobs_of_four_seeds_with_every_arm_of_them():
    planned = [a.planned.run for a in plan_experiment(get_experiment("clip_higher"))]  # 2 arms × seeds 0–7
    jobs = warm_start_jobs(dict(enumerate(planned)))
    assert [sorted({planned[i].seed for i in job}) for job in jobs] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert sorted(i for job in jobs for i in job) == list(range(16))
    # Five seeds: 3 and 2; another SFT step count is another job.
    runs = [RunConfig(algo=get_preset("grpo"), task="caesar", seed=s) for s in range(5)]
    runs.append(RunConfig(algo=get_preset("grpo"), task="caesar", seed=0, sft_steps=50))
    assert warm_start_jobs(dict(enumerate(runs))) == [[0, 1, 2], [3, 4], [5]]
    # A loaded model's seeds train one per job: a group would hold a copy of its weights per seed.
    loaded = [RunConfig(algo=get_preset("grpo"), task="caesar", seed=s, model="models/gpt2") for s in range(3)]
    assert warm_start_jobs(dict(enumerate(loaded))) == [[0], [1], [2]]


def test_a_warm_start_job_trains_its_seeds_then_their_teachers_each_as_one_group(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(
        sweep,
        "sft_policies",
        lambda task, tok, model, seeds, noise, steps, *a, **k: calls.append((model, seeds, steps)),
    )
    # Two arms × seeds 3 and 4; one arm distils from a `tiny` teacher of 600 SFT steps.
    runs = [a.planned.run for a in plan_experiment(get_experiment("distillation_dense"), [3, 4])]
    sweep.warm_starts(runs, tmp_path)
    assert calls == [("tiny", [3, 4], sft.DEFAULT_SFT_STEPS), ("tiny", [3, 4], 600)]
