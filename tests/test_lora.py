"""LoRA (`use_peft`) through the stacked engine: peft's own `PeftModel`, run by transformers and autograd, is the
independent route for the logits and the adapters' gradients; training moves the adapters alone."""

import copy

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from test_evaluation import sampled_alone
from test_run_batch import TIMING, close

from hf_models import save_gpt2_folder
from rl_core.algorithms import get_preset
from rl_core.config import RunConfig, parse_overrides
from rl_core.engine.lora import adapter_parameters, base_parameters, lora_parameter_count, with_adapters
from rl_core.engine.models import build_policy, frozen_reference, model_config
from rl_core.engine.pretrained import check_fits, parameter_count, pretrained_config, training_bytes
from rl_core.engine.rollout import response_logits, sample, token_logprobs
from rl_core.engine.run_batch import evaluate_together, step_together
from rl_core.engine.run_group import RunGroup
from rl_core.engine.stacked_runs import AdapterStack, Stack, StackedGPT2, stacked_trees, teacher_forced
from rl_core.engine.tokenizer import build_char_tokenizer
from rl_core.engine.trainer import Trainer, group_plan
from rl_core.formulas.advantages import grpo_advantages

ALL_LAYERS = "c_attn,c_proj,c_fc"
PROMPTS = [["ab>", "hgfed>", "c>"], ["xyz>", "q>", "rs>"]]
QUICK = {"prompts_per_step": 4, "num_generations": 4, "learning_rate": 1e-2}
# Its reward has signal from the first step on (caesar's 30-step warm start may score every sample 0); every run
# here starts from the same two cached warm starts (seeds 0 and 1, 30 SFT steps).
TASK = "coin_flip"


def lora_policies(algo):
    """Two tiny policies of their own random weights, each with peft's adapters on every layer, and B drawn at
    random too (peft starts it at 0, where the policy is its base and A gets no gradient)."""
    tokenizer = build_char_tokenizer()
    bases, policies = [], []
    for seed in range(2):
        torch.manual_seed(seed)
        base = build_policy("tiny", tokenizer).eval()
        bases.append(frozen_reference(base))
        policy = with_adapters(base, algo, seed)
        with torch.no_grad():
            for name, parameter in adapter_parameters(policy):
                if name.endswith("lora_B"):
                    parameter.normal_(0.0, 0.2)
        policies.append(policy)
    return tokenizer, bases, policies


def test_a_stacked_lora_pass_gives_peft_logits_and_adapter_gradients():
    algo = get_preset("grpo", use_peft=True, lora_r=4, lora_alpha=12, lora_target_modules=ALL_LAYERS)
    tokenizer, bases, policies = lora_policies(algo)
    batches = [
        sample(policy, tokenizer, prompts, 8, 1.0, torch.Generator().manual_seed(r), 3)
        for r, (policy, prompts) in enumerate(zip(policies, PROMPTS))
    ]
    T = max(b.response_mask.shape[1] for b in batches)
    stack = AdapterStack(policies, Stack(bases), trainable=True)
    model = StackedGPT2(policies[0], stack.views())
    assert model.lora_scaling == 3.0  # α / r
    hidden = teacher_forced(model, stacked_trees(batches, T))
    together = model._head(hidden.flatten(1, 2)).view(*hidden.shape[:3], -1)

    def loss(logits, batch):  # a policy-gradient-like scalar that reaches every adapter
        return -(token_logprobs(logits, batch.response_ids) * batch.response_mask).sum() / batch.response_mask.sum()

    sum(loss(logits[:, : b.response_mask.shape[1]], b) for logits, b in zip(together, batches)).backward()
    gradients = stack.adapters._split(stack.buffer.grad)
    assert len(gradients) == 2 * 4 * 2  # 2 layers × 4 adapted Conv1Ds × (A, B)
    for r, (policy, batch) in enumerate(zip(policies, batches)):
        alone = response_logits(policy, batch)  # peft's forward: base_layer(x) + lora_B(lora_A(x)) · α/r
        valid = batch.response_mask.bool()
        torch.testing.assert_close(together[r, :, : valid.shape[1]][valid], alone[valid], atol=1e-5, rtol=1e-5)
        policy.zero_grad()
        loss(alone, batch).backward()
        for name, parameter in adapter_parameters(policy):
            assert parameter.grad.abs().sum() > 0, name
            torch.testing.assert_close(gradients[name][r], parameter.grad, atol=1e-5, rtol=1e-5, msg=name)
    # The adapters without their base would be another model: the base's weights take no gradient.
    assert stack.base.buffer.grad is None


def test_the_adapter_count_is_peft_s():
    tokenizer = build_char_tokenizer()
    for targets in ("c_attn", "c_attn,c_proj", ALL_LAYERS):
        algo = get_preset("grpo", use_peft=True, lora_r=3, lora_target_modules=targets)
        policy = with_adapters(build_policy("tiny", tokenizer), algo, 0)
        counted = sum(p.numel() for p in policy.parameters() if p.requires_grad)
        assert lora_parameter_count(model_config("tiny", tokenizer), 3, targets) == counted
    # By hand, tiny (2 layers, d = 64): c_attn r·(64 + 192), c_proj r·(64 + 64) + r·(256 + 64), c_fc r·(64 + 256).
    assert lora_parameter_count(model_config("tiny", tokenizer), 3, ALL_LAYERS) == 2 * 3 * (256 + 128 + 320 + 320)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two GRPO runs with LoRA (other seeds) trained together for 5 steps on the tiny model, with their SFT policies
    as they were before RL."""
    cache = tmp_path_factory.mktemp("cache")
    algo = get_preset("grpo", use_peft=True, lora_r=4, lora_target_modules=ALL_LAYERS, **QUICK)
    trainers = [Trainer(RunConfig(algo=algo, task=TASK, steps=5, seed=s, sft_steps=30), cache) for s in (0, 1)]
    before = []
    for trainer in trainers:
        trainer.prepare()
        before.append({n: p.detach().clone() for n, p in trainer.policy.named_parameters()})
    for _ in range(5):
        for outcome in step_together(trainers):
            assert isinstance(outcome, dict), outcome
    return trainers, before


def test_five_grpo_steps_with_lora_move_the_adapters_alone(trained):
    trainers, before = trained
    for trainer, start in zip(trainers, before):
        assert trainer.step_index == 5
        moved = {n for n, p in trainer.policy.named_parameters() if not torch.equal(p, start[n])}
        adapters = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
        assert moved == adapters and len(adapters) == 16
        # π_ref is the base the adapters sit on: the SFT policy, unchanged, and the same tensors as the policy's.
        base = dict(base_parameters(trainer.policy))
        peft_names = [n for n, _ in trainer.policy.named_parameters() if ".lora_" not in n]
        sft = {name: start[peft] for (name, _), peft in zip(base_parameters(trainer.policy), peft_names)}
        for name, parameter in trainer.reference.named_parameters():
            assert torch.equal(parameter, sft[name])
            assert parameter.data_ptr() == base[name].data_ptr()
        with trainer.policy.disable_adapter(), torch.no_grad():
            ids = torch.tensor([[1, 5, 9, 3]])
            torch.testing.assert_close(trainer.policy(ids).logits, trainer.reference(ids).logits, atol=0, rtol=0)


def test_a_lora_checkpoint_is_peft_s_adapter_folder_and_resumes(trained, tmp_path):
    trainer = trained[0][0]
    folder = trainer.save_checkpoint(tmp_path / "checkpoint")
    policy_folder = folder / "policy"
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in policy_folder.iterdir()}
    assert "model.safetensors" not in {p.name for p in policy_folder.iterdir()}  # the base is the warm start
    # peft reads it back onto the base: the same model as the run's.
    loaded = PeftModel.from_pretrained(copy.deepcopy(trainer.reference), policy_folder)
    ids = torch.tensor([[1, 5, 9, 3, 7]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, trainer.policy(ids).logits, atol=1e-6, rtol=1e-6)
    saved = load_file(policy_folder / "adapter_model.safetensors")
    assert len(saved) == 16 and all(".lora_" in name for name in saved)
    # A new trainer of the same run resumes with these adapters and AdamW moments.
    resumed = Trainer(trainer.run, trainer.cache_dir)
    resumed.prepare()
    resumed.load_checkpoint(folder)
    for (name, mine), (_, theirs) in zip(adapter_parameters(resumed.policy), adapter_parameters(trainer.policy)):
        assert torch.equal(mine, theirs), name
    assert resumed.step_index == 5 and torch.equal(resumed.policy_adam["step"], trainer.policy_adam["step"])


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"lora_r": 0}, "lora_r=0 is out of range; allowed: an integer from 1 to 1024"),
        ({"lora_alpha": 0}, "lora_alpha=0 is out of range; allowed: an integer from 1 to 4096"),
        (
            {"lora_target_modules": "q_proj"},
            "lora_target_modules='q_proj' is not allowed; choose one of: c_attn, c_attn,c_proj, c_attn,c_proj,c_fc",
        ),
    ],
)
def test_lora_knobs_out_of_range_are_refused_by_name(knobs, message):
    with pytest.raises(ValueError, match=message):
        get_preset("grpo", use_peft=True, **knobs)


def test_a_rank_above_the_model_width_is_refused_with_the_width():
    assert parse_overrides(["use_peft=true", "lora_r=65", f"lora_target_modules={ALL_LAYERS}"]) == {
        "use_peft": True,
        "lora_r": 65,
        "lora_target_modules": ALL_LAYERS,
    }
    run = RunConfig(algo=get_preset("grpo", use_peft=True, lora_r=65), task="caesar", model="tiny")
    with pytest.raises(ValueError, match=r"lora_r=65 is out of range; allowed: at most the width of model=tiny "):
        run.validate()
    RunConfig(algo=get_preset("grpo", use_peft=True, lora_r=64), task="caesar", model="tiny").validate()


def test_where_full_fine_tuning_does_not_fit_the_message_offers_lora(tmp_path):
    folder = save_gpt2_folder(tmp_path / "gpt2-bpe")
    parameters = parameter_count(str(folder))
    # peft's default for GPT-2, r = 16 on c_attn: 2 layers × 16 · (64 + 192) adapter parameters.
    adapters = 2 * 16 * (64 + 192)
    assert lora_parameter_count(pretrained_config(str(folder)), 16, "c_attn") == adapters
    full, lora = training_bytes(parameters, False), training_bytes(parameters, False, adapters)
    assert lora == int((4 * parameters + 16 * adapters) * 1.25) < full
    cpu = torch.device("cpu")
    with pytest.raises(
        ValueError,
        match=r"full fine-tuning .*; allowed: a smaller model, or a device with more memory, "
        r"or LoRA: use_peft=true \(low-rank adapters train over frozen weights: about 0.0 GiB\) with "
        r"sft_steps=0",
    ):
        check_fits(str(folder), cpu, critic=False, free=lora)
    algo = get_preset("grpo", use_peft=True)
    check_fits(str(folder), cpu, critic=False, free=lora, lora=algo)
    with pytest.raises(
        ValueError,
        match=r"LoRA \(lora_r=16: adapters over frozen weights\) of its policy and π_ref needs .*, or a lower lora_r$",
    ):
        check_fits(str(folder), cpu, critic=False, free=lora - 1, lora=algo)
    # Not even LoRA fits: no LoRA offered.
    with pytest.raises(ValueError, match=r"allowed: a smaller model, or a device with more memory$"):
        check_fits(str(folder), cpu, critic=False, free=lora - 1)


def test_with_adapters_leaves_the_global_random_state_alone():
    tokenizer = build_char_tokenizer()
    algo = get_preset("grpo", use_peft=True)
    policies = [build_policy("tiny", tokenizer) for _ in range(2)]
    state = torch.random.get_rng_state()
    first = with_adapters(policies[0], algo, 7)
    assert torch.equal(torch.random.get_rng_state(), state)
    second = with_adapters(policies[1], algo, 7)
    for (name, a), (_, b) in zip(adapter_parameters(first), adapter_parameters(second)):
        assert torch.equal(a, b), name


def test_a_lora_run_beside_another_makes_its_first_update_as_alone(trained):
    """One update of a LoRA run of seed 0 beside one of seed 1 (another learning rate): its record and adapter
    gradient equal its own alone to 1e-5. Runs of another α/r never share a group (one scaling per stacked pass)."""
    cache = trained[0][0].cache_dir
    once = {**QUICK, "ppo_epochs": 1, "num_minibatches": 1}
    algo = get_preset("grpo", use_peft=True, lora_r=4, lora_target_modules=ALL_LAYERS, **once)
    configs = [RunConfig(algo=algo, task=TASK, steps=1, seed=0, sft_steps=30)]
    configs.append(RunConfig(algo=algo.replace(learning_rate=3e-3), task=TASK, steps=1, seed=1, sft_steps=30))
    alone = Trainer(configs[0], cache)
    group = [Trainer(config, cache) for config in configs]
    for trainer in (alone, *group):
        trainer.prepare()
    record_alone, record = step_together([alone])[0], step_together(group)[0]
    close(
        {k: v for k, v in record.items() if k not in TIMING}, {k: v for k, v in record_alone.items() if k not in TIMING}
    )
    gradient, gradient_alone = group[0].group.policy.buffer.grad[0], alone.group.policy.buffer.grad[0]

    assert gradient.abs().sum() > 0  # B's (A's is 0 while B = 0)
    torch.testing.assert_close(gradient, gradient_alone, rtol=1e-5, atol=1e-8)
    other_alpha = RunConfig(algo=algo.replace(lora_alpha=8), task=TASK, steps=1, seed=0, sft_steps=30)
    assert group_plan(other_alpha) != group_plan(configs[0])


def test_a_stale_sampler_with_lora_samples_from_its_own_adapters(trained):
    """rollout_staleness = 1: each run samples with its adapters of one step before, over its own base."""
    cache = trained[0][0].cache_dir
    algo = get_preset("grpo", use_peft=True, lora_r=4, lora_target_modules=ALL_LAYERS, rollout_staleness=1, **QUICK)
    trainers = [Trainer(RunConfig(algo=algo, task=TASK, steps=3, seed=s, sft_steps=30), cache) for s in (0, 1)]
    for trainer in trainers:
        trainer.prepare()
    for _ in range(3):
        records = step_together(trainers)
        assert all(isinstance(r, dict) for r in records), records
    # At the third step the sampler is the policy of step 2, whose adapters differ from the current ones.
    sampler, policy = trainers[0].behaviour_policy(), trainers[0].policy
    assert any(not torch.equal(a, b) for (_, a), (_, b) in zip(adapter_parameters(sampler), adapter_parameters(policy)))
    assert records[0]["rollout_corr/kl"] != 0
    # The queue keeps the adapters of each step alone: the base is π_ref's and never changes.
    assert all(
        set(snapshot) == {n for n, p in policy.named_parameters() if p.requires_grad}
        for snapshot in trainers[0]._snapshots
    )


def test_the_first_lora_update_has_the_gradient_peft_s_autograd_gives(trained, monkeypatch):
    """One update (GRPO, β = 0, token-mean, no clipping of the gradient): the adapters' gradient the engine leaves in
    its buffer equals autograd's through a copy of peft's model on the same batch, −Σ Â·log π / Σ mask. At the first
    update the ratio is 1, so the clip is inactive and the surrogate's gradient is the policy gradient's."""
    cache = trained[0][0].cache_dir
    knobs = {**QUICK, "ppo_epochs": 1, "num_minibatches": 1, "beta": 0.0, "max_grad_norm": 1000.0}
    algo = get_preset(
        "grpo", use_peft=True, lora_r=4, lora_target_modules=ALL_LAYERS, loss_agg_mode="token-mean", **knobs
    )
    trainer = Trainer(RunConfig(algo=algo, task=TASK, steps=1, seed=0, sft_steps=30), cache)
    trainer.prepare()
    with torch.no_grad():  # B ≠ 0, so that A gets a gradient too
        for name, parameter in adapter_parameters(trainer.policy):
            if name.endswith("lora_B"):
                parameter.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(5))
    independent = copy.deepcopy(trainer.policy)
    sampled = []
    original = RunGroup._sample

    def recorded(group, runs):
        sampled.extend(original(group, runs))
        return sampled

    monkeypatch.setattr(RunGroup, "_sample", recorded)
    step_together([trainer])
    rollout, rewards, _ = sampled[0]
    advantages = grpo_advantages(rewards, algo.num_generations)
    assert advantages.abs().sum() > 0
    mask = rollout.response_mask
    logp = token_logprobs(response_logits(independent, rollout), rollout.response_ids)
    (-(advantages[:, None] * logp * mask).sum() / mask.sum()).backward()
    engine = trainer.group.policy.adapters._split(trainer.group.policy.buffer.grad)
    for name, parameter in adapter_parameters(independent):
        assert parameter.grad.abs().sum() > 0, name
        torch.testing.assert_close(engine[name][0], parameter.grad, atol=1e-6, rtol=1e-5, msg=name)


def test_lora_runs_evaluated_together_get_what_peft_s_own_model_samples_alone(trained):
    trainers, _ = trained
    assert evaluate_together(trainers) == [sampled_alone(trainer) for trainer in trainers]
