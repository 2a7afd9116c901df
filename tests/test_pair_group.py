"""Fits to preference pairs of many runs as one group (DPO and IPO, `DPOGroup`; the reward model,
`RewardModelGroup`): a run in a group of three with other seeds and knobs gives the records it gives alone, the same
group twice is bit-identical, and the numbers are those an unstacked `transformers` pass gives."""

from __future__ import annotations

import math
import random
import types

import pytest
import torch

from rl_core.engine.models import build_policy, position_ids_from_mask
from rl_core.engine.preference_optimisation import DPOGroup, DPOTraining, pair_batch
from rl_core.engine.reward_model import PreferencePair, RewardModelGroup, RewardModelTraining, reward_scores
from rl_core.engine.rollout import token_logprobs
from rl_core.engine.run_group import bound_group
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import plan_experiment
from rl_core.runs.sweep import batches
from toy_tasks import get_task

TOKENIZER = build_char_tokenizer()
STEPS = 3
TASK = get_task("reverse")  # a verifier: its gold success needs no preparation


def reverse_pairs(seed: int) -> list[PreferencePair]:
    rng = random.Random(seed)
    return [PreferencePair(p, TASK.answer(p), p[:-1]) for p in TASK.sample_prompts(40, rng)]


def dpo_training(seed: int, **knobs) -> DPOTraining:
    """A random tiny policy (its weights from the seed) fitted to its seed's pairs of the `reverse` task."""
    torch.manual_seed(seed)
    policy = build_policy("tiny", TOKENIZER)
    options = {"steps": STEPS, "batch_size": 8, "n_eval_prompts": 8, "seed": seed} | knobs
    return DPOTraining(policy, reverse_pairs(seed), TASK, **options)


def dpo_records(trainings: list[DPOTraining]) -> list[list[dict]]:
    """`STEPS` steps of the trainings as one group, each step's evaluation (held-out pairs and samples) then its
    update, as a DPO run steps: `[step][run]` records."""
    group = DPOGroup(trainings)
    out = []
    for _ in range(STEPS):
        evaluated = group.evaluate([2] * len(trainings), [True] * len(trainings))
        out.append([e | u for e, u in zip(evaluated, group.update())])
    return out


def assert_records_close(ours: dict, theirs: dict) -> None:
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        if key == "samples":
            assert [s["response"] for s in value] == [s["response"] for s in theirs[key]]
        else:
            assert value == pytest.approx(theirs[key], abs=1e-5), key


def test_a_dpo_run_in_a_group_of_three_gives_its_records_alone_and_the_group_twice_bit_identically():
    alone = dpo_records([dpo_training(0, beta=0.1)])
    others = lambda: [  # noqa: E731 - other seeds, β, loss and learning rate around seed 0
        dpo_training(5, beta=0.3, loss_type="ipo"),
        dpo_training(0, beta=0.1),
        dpo_training(9, beta=0.05, learning_rate=1e-3),
    ]
    first, second = others(), others()
    group, again = dpo_records(first), dpo_records(second)
    for step in range(STEPS):
        assert_records_close(group[step][1], alone[step][0])
    assert group == again
    for a, b in zip(first, second):
        assert all(torch.equal(x, y) for x, y in zip(a.policy.parameters(), b.policy.parameters()))
    # The other runs' numbers are their own: another β and loss give another held-out loss after an update.
    assert len({records["eval_loss"] for records in group[1]}) == 3
    # IPO's first held-out loss, π_θ = π_ref: (0 − 1/(2β))² with β = 0.3.
    assert group[0][0]["eval_loss"] == pytest.approx((1 / 0.6) ** 2, rel=1e-6)


def sequence_logps(model, batch) -> torch.Tensor:
    """log π(y|x) `[B]` of a `pair_batch` from the model's own padded `transformers` forward."""
    with torch.no_grad():
        mask = batch.attention_mask
        logits = model(input_ids=batch.sequences, attention_mask=mask, position_ids=position_ids_from_mask(mask))
    logp = token_logprobs(logits.logits[:, batch.prompt_length - 1 : -1], batch.response_ids)
    return (logp * batch.response_mask).sum(-1)


def test_the_dpo_loss_and_log_probabilities_are_those_of_an_unstacked_transformers_pass():
    """Step 1's mean sequence log-probabilities and step 2's loss (π_θ ≠ π_ref by then) of a run in a group of two,
    recomputed from the run's weights by the policy's and the reference's own forward over the padded pairs and the
    DPO loss written out in Python."""
    trainings = [dpo_training(3, beta=0.2), dpo_training(4, beta=0.5)]
    group = DPOGroup(trainings)
    training = trainings[0]
    for _ in range(2):
        rng = random.Random()
        rng.setstate(training.rng.getstate())  # the pairs this step's update will draw
        batch = pair_batch(TOKENIZER, rng.choices(training.train, k=training.batch_size), torch.device("cpu"))
        logps, ref_logps = sequence_logps(training.policy, batch), sequence_logps(training.reference, batch)
        record = group.update()[0]
        n = training.batch_size
        h = [(logps[i] - ref_logps[i] - logps[n + i] + ref_logps[n + i]).item() for i in range(n)]
        expected = -sum(math.log(1 / (1 + math.exp(-0.2 * x))) for x in h) / n
        assert record["loss"] == pytest.approx(expected, abs=1e-5)
        assert record["logps/chosen"] == pytest.approx(logps[:n].mean().item(), abs=1e-5)
        assert record["logps/rejected"] == pytest.approx(logps[n:].mean().item(), abs=1e-5)
    assert abs(record["loss"] - math.log(2)) > 1e-3, "after an update the policy is not its reference"


def reward_fit(seed: int, **knobs) -> RewardModelTraining:
    rng = random.Random(seed)
    pairs = [PreferencePair("p>", "a" * rng.randint(2, 4) + "b", "b" * rng.randint(1, 3)) for _ in range(40)]
    return RewardModelTraining(pairs, TOKENIZER, steps=STEPS, batch_size=8, seed=seed, eval_every=2, **knobs)


def test_a_reward_model_fit_in_a_group_of_three_gives_its_records_alone_and_the_group_twice_bit_identically():
    alone = list(reward_fit(0).steps())
    others = lambda: [reward_fit(4, learning_rate=1e-2), reward_fit(0), reward_fit(7)]  # noqa: E731
    first, second = others(), others()
    groups = [RewardModelGroup(fits) for fits in (first, second)]
    group, again = ([g.step() for _ in range(STEPS)] for g in groups)
    for step in range(STEPS):
        assert group[step][1].keys() == alone[step].keys()
        assert group[step][1] == pytest.approx(alone[step], abs=1e-5)
    assert [r["step"] for r in alone if "heldout_loss" in r] == [2, 3]
    assert group == again
    for a, b in zip(first, second):
        assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), b.model.parameters()))
    assert len({records["loss"] for records in group[0]}) == 3


def test_the_first_reward_model_loss_is_that_of_the_unstacked_value_model():
    """Step 1's loss and accuracy of a fit in a group of two: the Bradley-Terry loss written out in Python over the
    scores the initial model's own forward (`reward_scores`) gives the pairs the fit draws."""
    fits = [reward_fit(2), reward_fit(6)]
    rng = random.Random()
    rng.setstate(fits[0].rng.getstate())
    drawn = rng.choices(fits[0].train, k=8)
    with torch.no_grad():
        chosen = reward_scores(fits[0].model, TOKENIZER, [p.prompt for p in drawn], [p.chosen for p in drawn])
        rejected = reward_scores(fits[0].model, TOKENIZER, [p.prompt for p in drawn], [p.rejected for p in drawn])
    differences = (chosen - rejected).tolist()
    record = RewardModelGroup(fits).step()[0]
    expected = -sum(math.log(1 / (1 + math.exp(-d))) for d in differences) / len(differences)
    assert record["loss"] == pytest.approx(expected, abs=1e-5)
    assert record["accuracy"] == pytest.approx(sum(d > 0 for d in differences) / len(differences))


def test_a_sweep_puts_the_dpo_arms_seeds_in_one_batch():
    planned = [a.planned.run for a in plan_experiment(get_experiment("dpo_vs_rl"))]
    dpo = [i for i, run in enumerate(planned) if run.algo.name == "dpo"]
    assert len(dpo) == 8 and dpo in batches(dict(enumerate(planned)))


def test_a_group_is_stepped_again_only_while_every_run_of_it_is_still_bound_to_it():
    """`bound_group`, which DPO's and the reward model's `step_group` ask as RL groups do: a, b, c stepped together,
    then b and c alone as a group of two, so a group of all three must be formed again (its rows of b and c are
    stale); a group of other runs, or in another order, is not stepped either."""
    a, b, c = (type("Fit", (), {"group": None})() for _ in range(3))  # equal only to itself, as a training
    listed = lambda group: group.trainings  # noqa: E731
    assert bound_group([a, b, c], listed) is None
    everyone = types.SimpleNamespace(trainings=[a, b, c])
    a.group = b.group = c.group = everyone
    assert bound_group([a, b, c], listed) is everyone
    assert bound_group([c, b, a], listed) is None
    assert bound_group([b, c], listed) is None
    b.group = c.group = types.SimpleNamespace(trainings=[b, c])
    assert bound_group([b, c], listed) is b.group
    assert bound_group([a, b, c], listed) is None
