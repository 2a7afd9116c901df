"""`python -m rl_core`: listings, a short training run, and refusals of bad input."""

import json
import subprocess
import sys

import pytest

from rl_core.algorithms import PRESETS
from rl_core.cli import main
from toy_tasks import DEFAULT_TASK, TASKS


def test_algos_and_tasks_list_everything(capsys):
    assert main(["algos"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(PRESETS)
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(TASKS)
    assert any(line.startswith(DEFAULT_TASK) and line.endswith("(default)") for line in lines)


def test_train_writes_one_json_object_per_step_and_a_summary_line(tmp_path):
    out = tmp_path / "metrics.jsonl"
    result = subprocess.run(
        [sys.executable, "-m", "rl_core", "train", "--algo", "grpo", "--steps", "3", "--seed", "1",
         "--set", "prompts_per_step=4", "--set", "beta=0.1", "--metrics-out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(r["beta"] == 0.1 for r in records)
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("final success=") and " reward=" in last and " steps=3 " in last and " seconds=" in last


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--algo", "nope"], "algorithm 'nope' is unknown; allowed: pg, ppo"),
        (["--algo", "grpo", "--set", "epsilon=1.5"], "epsilon=1.5 is out of range"),
        (["--algo", "grpo", "--set", "num_generations=1"], "num_generations=1 is out of range"),
        (["--algo", "grpo", "--set", "beta=-0.1"], "beta=-0.1 is out of range"),
        (["--algo", "grpo", "--set", "learning_rate=0"], "learning_rate=0.0 is out of range"),
        (["--algo", "grpo", "--set", "bogus=1"], "unknown knob 'bogus'"),
        (["--algo", "grpo", "--set", "beta"], "is not of the form knob=value"),
        (["--algo", "grpo", "--task", "nope"], "task 'nope' is unknown"),
    ],
)
def test_bad_input_is_refused_with_the_knob_named(arguments, message, capsys):
    assert main(["train", "--steps", "1", *arguments]) == 2
    assert message in capsys.readouterr().err
