"""Experiments: every registered one is well formed (its arms differ in exactly its knobs), the runner's verdict is
recomputed from the JSON lines it wrote, the summary's numbers are worked out by hand, and the `experiment`
command lists and refuses by name.

The tests parametrised over `EXPERIMENTS` pick up every experiment file added to the package."""

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pytest

from rl_core.cli import main
from rl_core.config import AlgoConfig
from rl_core.experiments import EXPERIMENTS, Arm, Experiment, mean_interval, verdict
from rl_core.experiments.runner import (
    SUMMARY_FILE,
    ExperimentRun,
    arm_config,
    effect_sentence,
    plain_verdict,
    plan_experiment,
    records_file,
    seed_effects,
    summarise_effects,
)
from rl_core.runs.records import read_jsonl
from rl_core.runs.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
PAGES = {path.stem for path in (ROOT / "app_pages").glob("*.py")}
DESCRIPTIVE = ("name", "title", "summary")  # a preset's names, not knobs
KNOBS = [f.name for f in dataclasses.fields(AlgoConfig) if f.name not in DESCRIPTIVE]


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_the_arms_differ_in_exactly_the_knobs_the_experiment_names(name):
    experiment = EXPERIMENTS[name]
    configs = [arm_config(arm) for arm in experiment.arms]
    if len({type(config) for config in configs}) > 1:  # run kinds (RL against DPO): the whole algorithm differs
        differing = {"algo"}
    else:
        differing = {knob for knob in KNOBS if len({repr(getattr(config, knob)) for config in configs}) > 1}
    assert differing == set(experiment.knobs), f"{name}: the arms differ in {sorted(differing)}"
    # Nothing else may differ either: the runs of one seed share task, model, steps and warm start.
    planned = plan_experiment(experiment)
    for seed in experiment.seeds:
        runs = [dataclasses.replace(p.planned.run, algo=None) for p in planned if p.seed == seed]
        assert len(runs) == len(experiment.arms) and all(run == runs[0] for run in runs)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_an_experiment_is_well_formed(name):
    experiment = EXPERIMENTS[name]
    labels = [arm.label for arm in experiment.arms]
    assert experiment.name == name and labels and len(set(labels)) == len(labels)
    assert experiment.expected in ("positive", "negative") and len(experiment.seeds) >= 3
    assert experiment.charts, f"{name} names no metric to draw"
    assert set(experiment.pages) <= PAGES, f"{name} names pages that do not exist: {set(experiment.pages) - PAGES}"


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_the_verdict_is_recomputed_from_the_stored_json_lines(name, tmp_path):
    """A short version (one seed, two steps, a short warm start) of every experiment, through the runner's worker
    processes; then the effect and verdict are computed again from the files, not taken from summary.json."""
    experiment = EXPERIMENTS[name]
    steps = 2
    run = ExperimentRun(
        experiment, tmp_path / "out", RunStore(tmp_path / "runs.sqlite"), seeds=[0], steps=steps, sft_steps=5, workers=2
    )
    summary = run.run()
    written = read_summary(tmp_path / "out")
    assert written["experiment"] == name and written["seeds"] == [0]
    assert all(row["status"] == "finished" for row in written["runs"]), [
        (r["status"], r["error"]) for r in written["runs"]
    ]
    by_arm = {arm.label: read_jsonl(tmp_path / "out" / records_file(arm, 0)) for arm in experiment.arms}
    for label, records in by_arm.items():
        assert [r["step"] for r in records] == list(range(1, steps + 1)), label
        assert all(r["samples"] for r in records), "each line keeps its samples, as train --metrics-out does"
    for key in experiment.charts:  # some keys exist in one arm only (dynamic sampling's rounds)
        assert any(key in r for records in by_arm.values() for r in records), f"{name} charts {key!r}, never recorded"
    effect = experiment.effect(by_arm)
    stored = math.nan if written["effects"]["0"] is None else written["effects"]["0"]
    assert same(stored, effect) and same(summary["effects"]["0"], effect)
    assert written["verdict"] == summary["verdict"] == verdict([effect], experiment.expected)


def read_summary(folder: Path) -> dict:
    return json.loads((folder / SUMMARY_FILE).read_text())


# ------------------------------------------------------------------------------------------ the summary's numbers
TOY = Experiment(
    name="toy",
    title="toy",
    claim="b beats a",
    source="none",
    task="reverse",
    steps=3,
    metric="x, b minus a",
    arms=(Arm("a", "grpo", {"beta": 0.0}), Arm("b", "grpo", {"beta": 0.1})),
    knobs=("beta",),
    effect=lambda runs: runs["b"][-1]["x"] - runs["a"][-1]["x"],
    expected="positive",
)


def toy_records(a: float, b: float) -> dict:
    return {"a": [{"step": 1, "x": 0.0}, {"step": 2, "x": a}], "b": [{"step": 1, "x": 0.0}, {"step": 2, "x": b}]}


def test_effects_mean_spread_and_verdict_worked_by_hand():
    effects = seed_effects(TOY, {0: toy_records(0.0, 0.5), 1: toy_records(0.25, 0.5), 2: toy_records(0.5, 0.25)})
    assert effects == {0: 0.5, 1: 0.25, 2: -0.25}
    summary = summarise_effects(TOY, effects)
    assert summary["effect_mean"] == pytest.approx(1 / 6)
    # deviations from 1/6: 1/3, 1/12, −5/12; squares sum to 7/24; sample variance 7/48
    assert summary["effect_std"] == pytest.approx(math.sqrt(7 / 48))
    assert summary["seeds_with_expected_sign"] == 2 and summary["verdict"] == "weak"
    sentence = effect_sentence(TOY, summary)
    assert sentence.startswith("x, b minus a: +0.167 (standard deviation 0.38) over 3 seeds (+0.5, +0.25, −0.25)")
    # t(2, 0.975) = 4.30265 from a t table: half-width 4.30265 · √(7/48) / √3 = 0.94865 around 1/6
    low, high = summary["effect_interval"]
    assert (low, high) == (pytest.approx(1 / 6 - 0.94865, abs=1e-4), pytest.approx(1 / 6 + 0.94865, abs=1e-4))
    assert summary["seeds_needed"] == 3
    assert sentence.endswith(
        "2 of 3 positive as the claim expects (3 needed) and its 95 % interval [−0.782, +1.12] "
        "does not exclude 0, so the claim is weak."
    )


def test_the_plain_verdict_says_what_was_compared_what_happened_and_on_how_many_seeds():
    effects = seed_effects(TOY, {0: toy_records(0.0, 0.5), 1: toy_records(0.25, 0.5), 2: toy_records(0.5, 0.25)})
    weak = summarise_effects(TOY, effects)  # 2 of 3 the expected way, 3 needed (the test above)
    assert plain_verdict(TOY, weak) == (
        "Weak, comparing a with b: the claim's way on average, but on only 2 of 3 seeds (3 needed). The claim: toy."
    )
    plain = dataclasses.replace(TOY, plain="Arm b beats arm a.")
    shown = summarise_effects(plain, {seed: 0.5 + seed / 10 for seed in range(8)})
    assert plain_verdict(plain, shown) == "Shown on 8 of 8 seeds, comparing a with b: arm b beats arm a."
    # A name keeps its capitals after the colon.
    assert plain_verdict(dataclasses.replace(plain, plain="GSPO clips."), shown).endswith(": GSPO clips.")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_opens_with_a_plain_claim_of_one_or_two_sentences(name):
    plain = EXPERIMENTS[name].plain
    assert plain.endswith(".") and 1 <= plain.count(". ") + 1 <= 2 and len(plain) < 250, plain
    assert not any(mark in plain for mark in ("[", "±", "Σ", "seeds")), "no intervals, sums or seed sets"


def test_shown_needs_seven_of_eight_signs_and_an_interval_away_from_zero():
    # 7 of 8 at +0.1 and one at −0.1: mean 0.075; deviations 0.025 (×7) and −0.175, squares 7 · 0.000625 + 0.030625
    # = 0.035, s² = 0.035 / 7 = 0.005, s = 0.0707; t(7, 0.975) = 2.3646 from a t table, so the half-width is
    # 2.3646 · 0.0707 / √8 = 0.0591 and the interval [0.0159, 0.1341] excludes 0.
    seven = [0.1] * 7 + [-0.1]
    assert mean_interval(seven) == (pytest.approx(0.0159, abs=1e-4), pytest.approx(0.1341, abs=1e-4))
    assert verdict(seven, "positive") == "shown"
    assert verdict([-e for e in seven], "negative") == "shown"
    # Six of eight right is too few, although the mean (0.7475) and its interval lie well above 0
    assert verdict([1.0] * 6 + [-0.01, -0.01], "positive") == "weak"
    # Eight of eight right but one huge seed: mean 1.13375, s = 3.178, half-width 2.657: the interval holds 0
    assert verdict([0.01] * 7 + [9.0], "positive") == "weak"
    assert mean_interval([0.01] * 7 + [9.0])[0] < 0
    # A NaN seed counts against the claim; one seed alone gives no interval and is never shown
    assert verdict([0.1] * 7 + [math.nan], "positive") == "shown"
    assert verdict([0.1] * 6 + [math.nan, math.nan], "positive") == "weak"
    assert verdict([0.5], "positive") == "weak" and mean_interval([0.5]) == (-math.inf, math.inf)


def test_a_seed_missing_an_arm_has_no_effect_and_counts_against_the_claim():
    records = {0: toy_records(0.0, 0.5), 1: {"a": toy_records(0.0, 0.5)["a"]}, 2: toy_records(0.0, 0.5)}
    effects = seed_effects(TOY, records)
    assert effects[0] == effects[2] == 0.5 and math.isnan(effects[1])
    summary = summarise_effects(TOY, effects)
    assert summary["verdict"] == "weak" and summary["effect_mean"] == 0.5 and summary["effect_std"] == 0.0
    assert statistics.fmean([0.5, 0.5]) == summary["effect_mean"]
    nothing = summarise_effects(TOY, {0: math.nan})
    assert nothing["verdict"] == "not shown" and "was not measured" in effect_sentence(TOY, nothing)


# ---------------------------------------------------------------------------------------------------- the command
def test_the_list_names_every_experiment_first(capsys):
    assert main(["experiment", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(EXPERIMENTS)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["nope"], "experiment 'nope' is unknown; allowed: "),
        ([], "name an experiment"),
        (["{name}"], "--out is required"),
        (["{name}", "--seeds", "0", "0"], "seeds lists a seed twice: 0 0"),
        (["{name}", "--workers", "0"], "workers=0 is out of range"),
        (["{name}", "--steps", "0"], "--steps 0 is out of range"),
        (["{name}", "--model", "huge"], "model='huge' is unknown"),
        (["{name}", "--device", "bogus"], "device 'bogus' is not a torch device"),
        (["{name}", "--out", "{file}"], "is a file; give a folder"),
    ],
)
def test_bad_input_is_refused_in_one_line(arguments, message, tmp_path, capsys):
    (tmp_path / "a-file").write_text("")
    name = next(iter(EXPERIMENTS))
    arguments = [a.format(name=name, file=tmp_path / "a-file") for a in arguments]
    if "--out" not in arguments and message != "--out is required":
        arguments += ["--out", str(tmp_path / "out")]
    assert main(["experiment", *arguments, "--db", str(tmp_path / "runs.sqlite")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not RunStore(tmp_path / "runs.sqlite").runs(), "a refused experiment queues no run"


def test_a_value_argparse_refuses_is_one_line_too(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["experiment", next(iter(EXPERIMENTS)), "--seeds", "x", "--out", "o"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --seeds: invalid int value: 'x'" in err


def test_the_command_runs_an_experiment_and_prints_its_verdict(tmp_path, capsys):
    name = "gspo_clipping"  # no reward model to train: the quickest of today's
    assert (
        main(
            [
                "experiment",
                name,
                "--seeds",
                "0",
                "--steps",
                "2",
                "--db",
                str(tmp_path / "runs.sqlite"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    written = read_summary(tmp_path / "out")
    assert f"seed 0: effect {written['effects']['0']:+.4g}" in out
    assert f"verdict: {written['verdict']}; records and summary.json in {tmp_path / 'out'}" in out
    runs = RunStore(tmp_path / "runs.sqlite").runs()
    assert [run.status for run in runs] == ["finished"] * 2 and {run.steps_done for run in runs} == {2}
