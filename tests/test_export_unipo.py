"""Runs exported in UNIPO's canonical log schema: valid against the schema file, and every per-token series
equal to what an independent computation from the exported log-probabilities gives."""

import dataclasses
import json
import math
import subprocess
import sys

import jsonschema
import pytest

from rl_core.algorithms import get_preset
from rl_core.bridge.export_unipo import read_unipo, unipo_document, unipo_schema, validate_unipo
from rl_core.cli import main
from rl_core.config import RunConfig
from rl_core.engine.trainer import Trainer
from rl_core.runs.store import RunStore


def test_the_schema_file_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(unipo_schema())


def _responses(document):
    return [r for e in document["entries"] for g in e.get("prompts", []) for r in g["responses"]]


def test_train_writes_a_valid_jsonl_log_whose_token_series_agree_by_hand(tmp_path):
    out = tmp_path / "run.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_core",
            "train",
            "--algo",
            "grpo",
            "--steps",
            "2",
            "--seed",
            "3",
            "--set",
            "prompts_per_step=4",
            "--set",
            "beta=0.1",
            "--unipo-out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["type"] == "header" and {json.loads(x)["type"] for x in lines[1:]} == {"step"}
    document = read_unipo(out)
    validate_unipo(document)
    header = document["header"]
    assert header["algorithm"] == "grpo" and header["hparams"]["kl_coef"] == 0.1 and header["groupSize"] == 8
    assert [e["step"] for e in document["entries"]] == [1, 2]
    for entry in document["entries"]:
        metrics = entry["metrics"]
        assert metrics["policy_objective"] == -metrics["policy_loss"] and metrics["reward"] == metrics["reward_mean"]
        assert metrics["kl"] == metrics["kl_k3"]  # the run's own estimator
    responses = _responses(document)
    assert responses and len({r["id"] for r in responses}) == len(responses)
    epsilon = 0.2
    for response in responses:
        tokens = response["tokens"]
        assert len(tokens["ids"]) == response["response_length"] > 0
        assert "values" not in tokens and "returns" not in tokens  # GRPO has no critic
        # Token rewards: the task's reward on the last token, nothing before it (KL is in the loss).
        assert tokens["rewards"][:-1] == [0.0] * (len(tokens["ids"]) - 1)
        assert tokens["rewards"][-1] == response["reward"]
        for logp, old, ref, advantage, kl, objective in zip(
            tokens["log_probs"],
            tokens["old_log_probs"],
            tokens["ref_log_probs"],
            tokens["advantages"],
            tokens["token_kl"],
            tokens["token_objective"],
        ):
            assert advantage == response["advantage"]  # GRPO: one advantage per response
            log_r = ref - logp
            assert kl == pytest.approx(math.exp(log_r) - 1 - log_r, rel=1e-4, abs=1e-6)
            rho = math.exp(logp - old)
            clipped = min(max(rho, 1 - epsilon), 1 + epsilon)
            assert objective == pytest.approx(min(rho * advantage, clipped * advantage), rel=1e-4, abs=1e-6)


def test_a_stored_critic_run_exports_values_and_returns(tmp_path):
    db, out = tmp_path / "runs.sqlite", tmp_path / "ppo.json"
    run = RunConfig(
        algo=get_preset("ppo", prompts_per_step=8, ppo_epochs=1, num_minibatches=1),
        task="caesar",
        steps=2,
        seed=0,
        samples_per_record=3,
    )
    store = RunStore(db)
    run_id = store.add_run(run, label="ppo")
    store.start_run(run_id)
    for record in Trainer(run).steps():
        store.add_step(run_id, record)
    store.finish_run(run_id, "finished")
    assert main(["export-unipo", "--run", str(run_id), "--db", str(db), "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    validate_unipo(document)
    assert document["header"]["algorithm"] == "ppo" and document["header"]["hparams"]["gae_lambda"] == 0.95
    assert "value_loss" in document["entries"][0]["metrics"]
    responses = _responses(document)
    assert len(responses) == 2 * 3
    for response in responses:
        tokens = response["tokens"]
        values, returns, rewards = tokens["values"], tokens["returns"], tokens["rewards"]
        length = len(tokens["ids"])
        assert len(values) == len(returns) == length
        # PPO puts KL in the reward: every token carries −β·k1, the last one the task reward too.
        beta = document["header"]["hparams"]["beta"]
        for t, (old, ref, reward) in enumerate(zip(tokens["old_log_probs"], tokens["ref_log_probs"], rewards)):
            task_reward = response["reward"] if t == length - 1 else 0.0
            assert reward == pytest.approx(task_reward - beta * (old - ref), abs=1e-5)
        # The critic's targets are GAE's returns A_t + V(s_t) (before PPO whitens A), so backwards from
        # R_T = r_T: R_t = r_t + γ V(s_{t+1}) + γλ (R_{t+1} − V(s_{t+1})), with γ = 1 and λ = 0.95.
        expected = [0.0] * length
        expected[-1] = rewards[-1]
        for t in range(length - 2, -1, -1):
            expected[t] = rewards[t] + values[t + 1] + 0.95 * (expected[t + 1] - values[t + 1])
        assert returns == pytest.approx(expected, abs=1e-4)


def test_invalid_logs_are_refused_with_the_place_named(tmp_path):
    run = RunConfig(algo=get_preset("grpo"), task="caesar", steps=1)
    record = {"step": 1, "reward_mean": 0.5, "samples": []}  # no policy loss: no policy_objective
    with pytest.raises(ValueError, match="entries/0/metrics: 'policy_objective' is a required property"):
        validate_unipo(unipo_document(dataclasses.asdict(run), [record]))
    document = {
        "header": {"algorithm": "grpo"},
        "entries": [
            {
                "step": 1,
                "metrics": {"reward": 1.0, "policy_objective": 0.0},
                "prompts": [
                    {
                        "prompt": "a>",
                        "responses": [{"id": "x", "reward": 1.0, "tokens": {"ids": [1, 2], "strings": ["a"]}}],
                    }
                ],
            }
        ],
    }
    with pytest.raises(ValueError, match="response x: per-token series of different lengths"):
        validate_unipo(document)
    assert (
        main(["export-unipo", "--run", "1", "--db", str(tmp_path / "empty.sqlite"), "--out", str(tmp_path / "x.json")])
        == 2
    )


def test_train_writes_a_json_document_and_refuses_another_suffix(tmp_path):
    out = tmp_path / "run.json"
    assert (
        main(["train", "--algo", "grpo", "--steps", "1", "--set", "prompts_per_step=2", "--unipo-out", str(out)]) == 0
    )
    document = json.loads(out.read_text())
    validate_unipo(document)
    assert [e["step"] for e in document["entries"]] == [1]
    assert main(["train", "--algo", "grpo", "--steps", "1", "--unipo-out", str(tmp_path / "run.txt")]) == 2
