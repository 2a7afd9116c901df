"""The whole pipeline from `python -m rl_core`: every preset that prepares more than a warm start (a teacher, a
reward model, value pretraining) and the offline preference runs (DPO, IPO) train two steps through `train`, with
each setup phase named on the progress bar, and through `sweep`."""

import json

import pytest
from tqdm import tqdm

from rl_core import cli
from rl_core.cli import main
from rl_core.runs.store import RunStore

# Few SFT steps and small batches: the pipeline is under test, not what it learns.
QUICK = ["--steps", "2", "--sft-steps", "5"]
SMALL_DPO = ["--set", "per_device_train_batch_size=4", "--set", "n_eval_prompts=8"]


class RecordingBar(tqdm):
    """The CLI's progress bar, keeping every description it was given."""

    descriptions: list[str] = []

    def set_description(self, desc=None, refresh=True):
        RecordingBar.descriptions.append(desc)
        super().set_description(desc, refresh)


@pytest.mark.parametrize(
    "arguments, phases",
    [
        # On-policy distillation: its teacher is an SFT policy of its own, trained first.
        (["--algo", "opd", "--set", "teacher_sft_steps=3", "--set", "prompts_per_step=4"], ["teacher 3/3"]),
        # VAPO pretrains its critic before the first step.
        (
            ["--algo", "vapo", "--set", "value_pretrain_steps=2", "--set", "prompts_per_step=4"],
            ["value pretraining 2/2"],
        ),
        # A task with a learned reward model fits it first; the critic here starts from it.
        (
            [
                "--algo",
                "ppo",
                "--task",
                "preference",
                "--set",
                "critic_init=reward_model",
                "--set",
                "prompts_per_step=4",
            ],
            ["reward model 1/1"],
        ),
        (["--algo", "dpo", "--task", "preference", *SMALL_DPO], ["reward model 1/1"]),
        (["--algo", "ipo", "--task", "preference", *SMALL_DPO], ["reward model 1/1"]),
    ],
    ids=["opd", "vapo", "ppo-critic-from-rm", "dpo", "ipo"],
)
def test_every_kind_of_preparation_trains_from_the_command_line_with_its_phases_named(
    arguments, phases, tmp_path, monkeypatch, capsys
):
    RecordingBar.descriptions = []
    monkeypatch.setattr(cli, "tqdm", RecordingBar)
    out = tmp_path / "metrics.jsonl"
    # A teacher is cached once trained: a fresh cache, so that opd's is trained here. (The reward model's phase is
    # named whether it is trained or loaded; value pretraining always runs.)
    cache = ["--cache-dir", str(tmp_path / "cache")] if "opd" in arguments else []
    assert main(["train", *QUICK, *arguments, *cache, "--metrics-out", str(out)]) == 0, capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("final success=")
    # (The SFT warm start is cached across these runs, so only the first names its phase: it is not asserted.)
    for phase in phases:
        assert phase in RecordingBar.descriptions
    if "dpo" in arguments or "ipo" in arguments:
        loss_type = "ipo" if "ipo" in arguments else "sigmoid"
        # Step 1 is measured where π_θ = π_ref: every implicit reward is 0, so DPO's loss is log 2 and IPO's
        # (0 − 1/(2β))² = 25 at β = 0.1.
        assert records[0]["loss"] == pytest.approx({"sigmoid": 0.6931472, "ipo": 25.0}[loss_type], abs=1e-6)
        assert records[0]["rewards/margins"] == 0.0


def test_a_preference_run_refuses_a_checkpoint_and_a_knob_of_the_other_kind(tmp_path, capsys):
    assert main(["train", "--algo", "dpo", "--task", "preference", "--checkpoint", str(tmp_path / "c")]) == 2
    assert "--checkpoint saves an RL run's policy, critic and optimiser; algo=dpo" in capsys.readouterr().err
    assert main(["train", "--algo", "ipo", "--task", "preference", "--set", "num_generations=4"]) == 2
    assert "unknown knob(s) 'num_generations' of ipo; allowed: loss_type, beta" in capsys.readouterr().err
    assert main(["train", "--algo", "dpo", "--task", "caesar"]) == 2
    assert "a task with preference pairs for algo=dpo" in capsys.readouterr().err


@pytest.mark.slow  # two worker processes, each fitting the task's reward model once
def test_a_sweep_over_ipo_beta_stores_one_run_per_value_and_answers_a_repeat_from_the_store(tmp_path, capsys):
    db = tmp_path / "runs.sqlite"
    sweep = [
        "sweep",
        "--algos",
        "ipo",
        "--seeds",
        "1",
        "--task",
        "preference",
        *QUICK,
        *SMALL_DPO,
        "--grid",
        "beta=0.1,0.5",
        "--db",
        str(db),
        "--workers",
        "2",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(sweep) == 0, capsys.readouterr().err
    runs = RunStore(db).runs()
    assert sorted(run.label for run in runs) == ["ipo · beta=0.1", "ipo · beta=0.5"]
    for run in runs:
        first = RunStore(db).steps(run.id)[0]
        # IPO's loss at π_θ = π_ref is (1/(2β))²: 25 at β = 0.1, 1 at β = 0.5.
        assert first["loss"] == pytest.approx((1 / (2 * run.config["algo"]["beta"])) ** 2, abs=1e-6)
    capsys.readouterr()
    assert main(sweep) == 0
    assert "reused 2 of 2 runs" in capsys.readouterr().err


def test_reward_model_fits_from_the_command_line_and_reports_held_out_accuracy(tmp_path, capsys):
    out = tmp_path / "metrics.jsonl"
    assert (
        main(
            [
                "reward-model",
                "--steps",
                "3",
                "--seed",
                "1",
                "--set",
                "per_device_train_batch_size=8",
                "--set",
                "eval_steps=2",
                "--metrics-out",
                str(out),
            ]
        )
        == 0
    ), capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    # Held out every eval_steps = 2 steps and at the last; a minibatch of 8 pairs has accuracy in eighths.
    assert [("heldout_accuracy" in r) for r in records] == [False, True, True]
    assert all((8 * r["accuracy"]).is_integer() and 0 <= r["heldout_accuracy"] <= 1 for r in records[1:])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("final heldout_loss=") and " heldout_accuracy=" in last and " steps=3 " in last
    # `train --algo reward_model` is the same run; an RL knob is refused by name.
    assert main(["train", "--algo", "reward_model", "--task", "preference", "--set", "beta=0.1"]) == 2
    assert "unknown knob(s) 'beta' of reward_model; allowed: learning_rate" in capsys.readouterr().err


@pytest.mark.slow  # two worker processes
def test_a_sweep_over_the_reward_models_learning_rate_stores_a_run_per_value(tmp_path, capsys):
    db = tmp_path / "runs.sqlite"
    assert (
        main(
            [
                "sweep",
                "--algos",
                "reward_model",
                "--seeds",
                "1",
                "--task",
                "preference",
                "--steps",
                "2",
                "--set",
                "per_device_train_batch_size=8",
                "--grid",
                "learning_rate=0.001,0.003",
                "--db",
                str(db),
                "--workers",
                "2",
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    ), capsys.readouterr().err
    runs = RunStore(db).runs()
    assert sorted(run.label for run in runs) == [
        "reward_model · learning_rate=0.001",
        "reward_model · learning_rate=0.003",
    ]
    assert all(run.status == "finished" and 0 <= run.final["heldout_accuracy"] <= 1 for run in runs)
    assert "held-out accuracy" in capsys.readouterr().err


def test_parity_refuses_what_it_cannot_compare_by_name(capsys):
    assert main(["parity", "--algo", "dpo", "--task", "caesar"]) == 2
    assert "parity --algo dpo trains on the preference task's pairs; drop --task" in capsys.readouterr().err
    assert main(["parity", "--algo", "ipo"]) == 2
    assert "algo='ipo' is unknown; allowed: pg, " in capsys.readouterr().err
