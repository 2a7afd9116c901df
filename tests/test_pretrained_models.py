"""`--model FOLDER` (or a Hub id): a Hugging Face causal LM with its own BPE tokenizer trains like a preset, on every
task, by GRPO and DPO; what cannot be loaded is refused with the model named.

The folder is a 2-layer GPT-2 and a byte-level BPE tokenizer made here (tests/hf_models.py), so nothing is
downloaded."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import BertConfig, GPT2Config, LlamaConfig, ViTConfig

from hf_models import BPE_VOCABULARY, save_gpt2_folder
from rl_core import train
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig
from rl_core.engine import sft
from rl_core.engine.pretrained import check_fits, check_model, model_choices, model_tokenizer, training_bytes
from rl_core.engine.rollout import encode_pairs
from rl_core.experiments import get_experiment
from rl_core.experiments.runner import plan_experiment
from rl_core.runs.reuse import run_key
from rl_core.runs.sweep import plan_sweep
from toy_tasks import TASKS, get_task
from toy_tasks.preference import PreferenceTask

ROOT = Path(__file__).resolve().parent.parent
# Small batches, short responses and few evaluation prompts: these tests show that a loaded model goes through the
# engine, not that it learns (its random weights write to the length limit).
QUICK = {"prompts_per_step": 2, "num_generations": 2, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_gpt2_folder(tmp_path_factory.mktemp("models") / "gpt2-bpe")


@pytest.fixture
def quick(monkeypatch):
    """The preference task's reward model from 20 steps on 200 pairs instead of 300 on 3000, and the SFT success
    measured on 8 prompts instead of 256: only their plumbing is under test."""
    monkeypatch.setattr(PreferenceTask, "rm_steps", 20)
    monkeypatch.setattr(PreferenceTask, "n_pairs", 200)
    monkeypatch.setattr(sft, "SFT_EVAL_PROMPTS", 8)


@pytest.mark.parametrize("name", list(TASKS))
def test_a_task_reads_and_scores_text_the_same_under_a_bpe_tokenizer(folder, name):
    """Prompts and demonstrations survive BPE encoding (several characters to a token) and decoding unchanged, and
    the decoded demonstrations score as the originals do."""
    task, tokenizer, rng = get_task(name), model_tokenizer(str(folder)), random.Random(1)
    prompts = task.sample_prompts(32, rng)
    responses = [task.demonstration(p, rng, task.default_demo_noise) for p in prompts]
    batch = encode_pairs(tokenizer, prompts, responses, "cpu")
    decoded = [
        tokenizer.decode(row[mask.bool()], skip_special_tokens=True)
        for row, mask in zip(batch.response_ids, batch.response_mask)
    ]
    assert decoded == responses
    assert len(tokenizer) == BPE_VOCABULARY > 256 + 1, "merges beyond the 256 bytes and <|endoftext|>"
    for prompt in prompts:
        assert tokenizer.decode(tokenizer(prompt, add_special_tokens=False)["input_ids"]) == prompt
        assert len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) <= task.max_prompt_length
    if name != "preference":  # its reward needs a trained reward model (the GRPO test below prepares one)
        cut = [False] * len(prompts)
        assert task.score(prompts, decoded, cut) == task.score(prompts, responses, cut)


@pytest.mark.slow  # 8–35 s a task on 2 busy cores
@pytest.mark.parametrize("name", list(TASKS))
def test_five_grpo_steps_from_the_folder_on_every_task(folder, name, quick, tmp_path):
    trained = train(
        "grpo", task=name, model=str(folder), steps=5, sft_steps=2, cache_dir=tmp_path, final_prompts=8, **QUICK
    )
    assert [r["step"] for r in trained.records] == [1, 2, 3, 4, 5]
    assert len(trained.trainer.tokenizer) == BPE_VOCABULARY and trained.trainer.tokenizer.eos_token == "<|endoftext|>"
    assert trained.trainer.policy.config.vocab_size == BPE_VOCABULARY
    assert 0 <= trained.final["success_rate"] <= 1
    # The warm start was fine-tuned from the folder's weights and cached under the model's name.
    assert any("gpt2-bpe" in p.name for p in (tmp_path / "sft").iterdir())


@pytest.mark.slow  # the preference task's reward model first
def test_five_dpo_steps_from_the_folder_on_the_preference_task(folder, quick, tmp_path):
    trained = train(
        "dpo",
        task="preference",
        model=str(folder),
        steps=5,
        sft_steps=2,
        cache_dir=tmp_path,
        final_prompts=8,
        n_eval_prompts=4,
    )
    assert [r["step"] for r in trained.records] == [1, 2, 3, 4, 5]
    assert trained.records[1]["kl_exact"] > 0, "the updates moved π_θ away from π_ref"
    assert len(trained.trainer.tokenizer) == BPE_VOCABULARY


def test_the_command_line_trains_the_folder_through_model(folder, tmp_path):
    out = tmp_path / "metrics.jsonl"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rl_core",
            "train",
            "--algo",
            "grpo",
            "--model",
            str(folder),
            "--steps",
            "5",
            "--sft-steps",
            "2",
            "--cache-dir",
            str(tmp_path),
            "--metrics-out",
            str(out),
            *[f"--set={k}={v}" for k, v in QUICK.items()],
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert " steps=5 " in result.stdout.splitlines()[-1]


def test_a_hub_id_neither_cached_nor_reachable_is_refused_with_its_name(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run(
        [sys.executable, "-m", "rl_core", "train", "--algo", "grpo", "--model", "nobody-here/no-such-model"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "error: model='nobody-here/no-such-model' is unknown: not a preset, not a folder "
        "here, and as a Hugging Face Hub id not in the local cache, and HF_HUB_OFFLINE is "
        "set"
    )
    assert "Traceback" not in result.stderr


def test_a_model_that_is_no_causal_lm_or_not_gpt2_is_refused_with_what_it_is(tmp_path):
    vit, bert, llama, empty = tmp_path / "vit", tmp_path / "bert", tmp_path / "llama", tmp_path / "empty"
    ViTConfig().save_pretrained(vit)
    BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(bert)
    LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2).save_pretrained(
        llama
    )
    empty.mkdir()
    with pytest.raises(ValueError, match=r"model='.*vit' is a 'vit' model, not a causal LM"):
        check_model(str(vit))
    # BERT is in AutoModelForCausalLM's table (as BertLMHeadModel), yet a BERT saved as an encoder is none.
    with pytest.raises(
        ValueError,
        match=r"model='.*bert' is a 'bert' encoder \(its config has is_decoder=False\), not a causal LM; allowed: "
        r"a preset \(tiny, small, gpt2\), a folder saved with save_pretrained, or a Hugging Face Hub id of a causal "
        r"LM of the GPT-2 architecture",
    ):
        RunConfig(algo=get_preset("grpo"), task="caesar", model=str(bert)).validate()
    with pytest.raises(
        ValueError,
        match=r"model='.*llama' is a 'llama' causal LM; the lab's sampler runs the GPT-2 "
        r"architecture only: allowed model types gpt2",
    ):
        RunConfig(algo=get_preset("grpo"), task="caesar", model=str(llama)).validate()
    with pytest.raises(ValueError, match=r"model='.*empty' is a folder without config.json"):
        check_model(str(empty))
    with pytest.raises(ValueError, match=r"model='/no/such/folder' is not a folder here"):
        check_model("/no/such/folder")
    with pytest.raises(
        ValueError,
        match=r"model='huge' is unknown: not a preset, not a folder here, and not a Hugging "
        r"Face Hub id \(owner/name\) in the local cache; allowed: a preset \(tiny, "
        r"small, gpt2\), a folder",
    ):
        check_model("huge")


def test_a_model_too_big_for_the_free_memory_is_refused_with_its_size(folder):
    # The 2 × 64 GPT-2 with 400 tokens: 400·64 + 128·64 (embeddings) + 2 · (12·64² + 13·64) (blocks) + 2·64 (ln_f).
    parameters = 400 * 64 + 128 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64
    assert training_bytes(parameters, critic=False) == int(parameters * 20 * 1.25)
    check_fits(str(folder), __import__("torch").device("cpu"), critic=False, free=training_bytes(parameters, False))
    with pytest.raises(
        ValueError,
        match=r"model='.*gpt2-bpe' \(0.1 M parameters\) does not fit on cpu: full "
        r"fine-tuning of its policy and π_ref needs about 0.0 GiB and 0.0 GiB are "
        r"free",
    ):
        check_fits(
            str(folder), __import__("torch").device("cpu"), critic=False, free=training_bytes(parameters, False) - 1
        )


def test_the_tokenizer_of_a_gpt2_folder_pads_and_starts_with_its_end_token(folder):
    tokenizer = model_tokenizer(str(folder))
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token_id == tokenizer.bos_token_id == tokenizer.eos_token_id == 0


def test_the_app_lists_the_presets_the_models_folder_and_the_allowed_hub_ids(folder, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "not-a-model").mkdir()
    GPT2Config(n_layer=1, n_embd=8, n_head=1).save_pretrained(models / "b-gpt2")
    (models / "a-link").symlink_to(folder)
    environ = {"RLHF_LAB_MODELS_DIR": str(models), "RLHF_LAB_HUB_MODELS": "openai-community/gpt2, distilgpt2,"}
    assert model_choices(environ) == [
        "tiny",
        "small",
        "gpt2",
        str(models / "a-link"),
        str(models / "b-gpt2"),
        "openai-community/gpt2",
        "distilgpt2",
    ]
    assert model_choices({}) == ["tiny", "small", "gpt2"]


def test_a_folder_saved_again_is_another_run_for_reuse(tmp_path):
    folder = save_gpt2_folder(tmp_path / "gpt2-bpe")
    run = RunConfig(algo=get_preset("grpo"), task="caesar", model=str(folder))
    first = run_key(run)
    assert run_key(run) == first
    save_gpt2_folder(folder, seed=1)  # other weights, same config
    os.utime(folder / "model.safetensors", ns=(1, 1))  # a different date even where the clock is coarse
    assert run_key(run) != first


def test_sweeps_and_experiments_plan_their_runs_on_the_folder(folder):
    planned = plan_sweep(["grpo", "rloo"], range(2), "caesar", 5, model=str(folder))
    assert [p.run.model for p in planned] == [str(folder)] * 4
    arm_runs = plan_experiment(get_experiment("rloo_leave_one_out"), seeds=[0], steps=3, model=str(folder))
    assert {a.planned.run.model for a in arm_runs} == {str(folder)} and len(arm_runs) == 2
    with pytest.raises(ValueError, match="model='nobody' is unknown"):
        plan_sweep(["grpo"], range(1), "caesar", 5, model="nobody")
