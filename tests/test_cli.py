"""`python -m rl_core`: listings, a short training run, and refusals of bad input."""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rl_core import cli
from rl_core.algorithms import PRESETS
from rl_core.cli import main
from rl_core.engine.trainer import Trainer, TrainingError
from toy_tasks import DEFAULT_TASK, TASKS


def test_algos_and_tasks_list_everything(capsys):
    assert main(["algos"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == [*PRESETS, "dpo", "ipo", "reward_model"]
    assert main(["tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(TASKS)
    assert any(line.startswith(DEFAULT_TASK) and line.endswith("(default)") for line in lines)


def test_train_writes_one_json_object_per_step_and_a_summary_line(tmp_path):
    out = tmp_path / "metrics.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_core",
            "train",
            "--algo",
            "grpo",
            "--steps",
            "3",
            "--seed",
            "1",
            "--set",
            "prompts_per_step=4",
            "--set",
            "beta=0.1",
            "--metrics-out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
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


# ------------------------------------------------------------------------------------------ malformed input
KNOB_TEXT = st.sampled_from(
    [
        "beta",
        "ppo_epochs",
        "num_minibatches",
        "use_critic",
        "kl_estimator",
        "dual_clip",
        "max_new_tokens",
        "value_pretrain_steps",
        "name",
        "title",
        "bogus",
        "",
        " ",
    ]
)
VALUE_TEXT = st.one_of(
    st.sampled_from(
        [
            "",
            "none",
            "nan",
            "inf",
            "-inf",
            "1e999",
            "1e-999",
            "2.5",
            "-1",
            "0",
            "true",
            "maybe",
            "9" * 5000,
            "0x10",
            "1_000",
            "k4",
            "=",
            "==1",
            "[1]",
            "None",
            "1,2",
        ]
    ),
    st.text(max_size=12),
)


@st.composite
def malformed_sets(draw):
    """`--set` text: a knob name (or none, or junk) and a value of the wrong kind, or no `=` at all."""
    if draw(st.booleans()):
        return draw(st.text(max_size=20))
    return f"{draw(KNOB_TEXT)}{draw(st.sampled_from(['=', ' = ', '==', ':']))}{draw(VALUE_TEXT)}"


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(malformed_sets())
def test_a_malformed_set_is_one_line_on_its_own_exit_2_and_no_traceback(capsys, monkeypatch, assignment):
    # Accepted values would train: only the refusal path is under test here.
    monkeypatch.setattr(cli, "_train", lambda trainer, args: 0)
    capsys.readouterr()
    try:
        code = main(["train", "--algo", "grpo", "--steps", "1", f"--set={assignment}"])
    except SystemExit as exit:  # argparse's own refusals
        code = exit.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code != 0:
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and err.endswith("\n"), err


def test_a_training_error_is_printed_on_a_line_of_its_own_after_the_progress_bar(capsys, monkeypatch):
    def diverge(self):
        raise TrainingError("step 1: the loss became nan (policy_loss=nan); lower learning_rate or check the knobs")

    monkeypatch.setattr(Trainer, "prepare", lambda self, progress=None: {})
    monkeypatch.setattr(Trainer, "step", diverge)
    monkeypatch.setattr(Trainer, "policy", object(), raising=False)
    assert main(["train", "--algo", "grpo", "--steps", "3"]) == 1
    err = capsys.readouterr().err
    assert "\nerror: step 1: the loss became nan" in err and err.endswith("check the knobs\n")
    assert "Traceback" not in err


def test_bad_argument_types_are_one_line_with_exit_2():
    result = subprocess.run(
        [sys.executable, "-m", "rl_core", "train", "--algo", "grpo", "--steps", "abc"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == "error: argument --steps: invalid int value: 'abc' (see python -m rl_core train --help)\n"


def test_a_checkpoint_never_replaces_a_folder_the_lab_did_not_write(tmp_path, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "important.txt").write_text("keep me")
    (folder / "table.csv").write_text("a,b\n")
    assert main(["train", "--algo", "grpo", "--steps", "1", "--checkpoint", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: --checkpoint results holds files that are not a lab checkpoint; give a new or empty "
        "folder (an existing checkpoint is replaced, nothing else)\n"
    )
    assert sorted(p.name for p in folder.iterdir()) == ["important.txt", "table.csv"]
    assert not (tmp_path / "results.old").exists()
    (tmp_path / "file").write_text("x")
    assert main(["train", "--algo", "grpo", "--steps", "1", "--checkpoint", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err and (tmp_path / "file").read_text() == "x"


def test_a_huge_seed_count_is_refused_by_name(tmp_path, capsys):
    assert main(["sweep", "--algos", "grpo", "--seeds", str(10**20), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --seeds 100000000000000000000 is out of range; allowed: an integer from 1 to")
    assert "OverflowError" not in err and err.count("\n") == 1


def test_export_unipo_of_a_missing_store_creates_nothing(tmp_path, capsys):
    assert (
        main(["export-unipo", "--run", "1", "--db", str(tmp_path / "none.sqlite"), "--out", str(tmp_path / "run.json")])
        == 2
    )
    assert capsys.readouterr().err == "error: there is no run store none.sqlite there; give an existing file\n"
    assert list(tmp_path.iterdir()) == []


def test_a_huge_unknown_knob_is_cut_short_in_the_message(capsys):
    assert main(["train", "--algo", "grpo", "--steps", "1", "--set", "x" * 10_000 + "=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown knob 'xxxx") and err.count("\n") == 1 and len(err) <= 320


def test_any_failure_during_training_is_printed_on_a_line_of_its_own(capsys, monkeypatch, tmp_path):
    def full_disk(self, progress=None):
        raise OSError(28, "No space left on device", str(tmp_path / "cache" / "sft" / "model.bin"))

    monkeypatch.setattr(Trainer, "prepare", full_disk)
    assert main(["train", "--algo", "grpo", "--steps", "3"]) == 1
    err = capsys.readouterr().err
    assert "\nerror: OSError: [Errno 28] No space left on device: '…/model.bin'\n" in err and str(tmp_path) not in err
