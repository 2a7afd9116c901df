"""The evaluation after the last step, of a group of runs as one program (`rl_core.engine.evaluation`): each run gets
the numbers it gets alone, and the numbers of the independent route, `rollout.sample` of its own module
(transformers' GPT-2 layers) scored by its task — the same prompts, the same draws, the same tokens, so equality is
exact; the same group twice is identical; runs of other shapes or kinds are evaluated apart."""

import random

import pytest
import torch

from rl_core.algorithms import get_run_algo
from rl_core.config import RunConfig
from rl_core.engine import evaluation as evaluation_module
from rl_core.engine.evaluation import EVALUATION_PROMPTS, EVALUATION_SEED, evaluate_policies
from rl_core.engine.rollout import sample
from rl_core.engine.run_batch import evaluate_together
from rl_core.engine.trainer import Trainer
from rl_core.runs.run_stream import END, batch_stream

STEPS = 2


def run(preset: str, seed: int, **knobs) -> RunConfig:
    return RunConfig(algo=get_run_algo(preset, **knobs), task="caesar", steps=STEPS, seed=seed, sft_steps=30)


# One shape, three programs' worth of difference: other seeds (so other warm starts), temperatures, clip ranges,
# learning rates and losses. The fourth run has another length limit, so it is a program of its own.
RUNS = [
    run("grpo", 0),
    run("grpo", 1, temperature=0.7, epsilon=0.1),
    run("cispo", 0, learning_rate=5e-4, temperature=1.3),
    run("grpo", 1, max_new_tokens=6),
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The runs trained as one batch (`batch_stream`), with each run's END item and the evaluations they asked for
    (the number of runs in each `evaluate_policies` call)."""
    cache = tmp_path_factory.mktemp("cache")
    trainers = [Trainer(config, cache) for config in RUNS]
    programs = []
    original = evaluation_module.evaluate_policies

    def counted(evaluations, *args, **kwargs):
        programs.append(len(evaluations))
        return original(evaluations, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rl_core.engine.run_batch.evaluate_policies", counted)
        ends = {r: item for r, item in batch_stream(trainers) if END in item}
    return trainers, [ends[r] for r in range(len(trainers))], programs


def sampled_alone(trainer: Trainer) -> dict:
    """The evaluation by the single-run sampler over the run's own module, scored and averaged here."""
    prompts = trainer.task.sample_prompts(EVALUATION_PROMPTS, random.Random(EVALUATION_SEED))
    generator = torch.Generator().manual_seed(EVALUATION_SEED)
    rollout = sample(
        trainer.policy, trainer.tokenizer, prompts, trainer.max_new_tokens, trainer.algo.temperature, generator
    )
    scores = trainer.task.score(prompts, rollout.responses, rollout.truncated.tolist())
    return {
        "success_rate": sum(scores.successes) / len(prompts),
        "reward_mean": sum(scores.rewards) / len(prompts),
        "response_length": rollout.lengths.float().mean().item(),
    }


def test_a_batch_evaluates_its_runs_of_one_shape_as_one_program(trained):
    trainers, ends, programs = trained
    assert all(end[END] == "finished" for end in ends)
    assert sorted(programs) == [1, 3]  # the three runs of one length limit together, the fourth apart


@pytest.mark.parametrize("r", range(len(RUNS)))
def test_each_run_of_the_group_gets_the_numbers_it_gets_alone(trained, r):
    trainers, ends, _ = trained
    alone = trainers[r].evaluate()
    assert ends[r]["final"] == alone == sampled_alone(trainers[r])


def test_the_runs_differ_and_the_same_group_twice_is_identical(trained):
    trainers, ends, _ = trained
    finals = [end["final"] for end in ends]
    assert len({tuple(final.values()) for final in finals}) == len(finals)  # the runs are not one computation
    assert evaluate_together(trainers) == evaluate_together(trainers) == finals


def test_a_run_whose_evaluation_fails_ends_alone_and_a_run_of_another_kind_evaluates_itself(trained):
    trainers, ends, _ = trained

    class Broken:
        def evaluation(self):
            raise RuntimeError("no policy")

    class HeldOutPairs:  # a reward model's fit: its own held-out evaluation, no policy to sample
        def evaluate(self):
            return {"heldout_loss": 0.5}

    outcomes = evaluate_together([trainers[0], Broken(), HeldOutPairs(), trainers[1]])
    assert outcomes[0] == ends[0]["final"] and outcomes[3] == ends[1]["final"]
    assert isinstance(outcomes[1], RuntimeError) and outcomes[2] == {"heldout_loss": 0.5}


def test_runs_of_different_length_limits_are_not_sampled_as_one(trained):
    trainers, _, _ = trained
    with pytest.raises(ValueError, match="evaluate each key's runs apart"):
        evaluate_policies([trainers[0].evaluation(), trainers[3].evaluation()])


def test_a_large_vocabulary_is_sampled_a_few_runs_at_a_time(trained, monkeypatch):
    trainers, ends, _ = trained
    one_run = EVALUATION_PROMPTS * trainers[0].max_new_tokens * trainers[0].policy.config.vocab_size * 4
    monkeypatch.setattr(evaluation_module, "LOGITS_BYTES", 2 * one_run)  # two runs per program
    sampled = []
    original = evaluation_module.sample_runs
    monkeypatch.setattr(
        evaluation_module, "sample_runs", lambda model, *args: sampled.append(model.runs) or original(model, *args)
    )
    evaluations = [t.evaluation() for t in trainers[:3]]
    assert evaluate_policies(evaluations) == [end["final"] for end in ends[:3]]
    assert sampled == [2, 1]
