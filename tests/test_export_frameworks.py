"""A lab configuration exported to TRL, verl and OpenRLHF: every knob accounted for, values worked out by hand, the
scripts parsed by bash, every verl key found in verl 0.9.1's released config, every OpenRLHF flag parsed by
OpenRLHF 0.11.2's own argument parser, and TRL's own `GRPOConfig` built from the export in a throwaway virtualenv."""

import dataclasses
import re
import subprocess

import pytest

from released_packages import openrlhf_parser, trl_built, trl_class_names, verl_config_keys, verl_registered
from rl_core.algorithms import PRESETS, get_preset, get_run_algo
from rl_core.bridge.export_frameworks import FRAMEWORKS, Set, export_config, knob_lines, knob_values, settings
from rl_core.bridge.export_pairs import export_pair_config, pair_knob_lines, pair_settings
from rl_core.bridge.trl_env import trl_python
from rl_core.cli import main
from rl_core.config import AlgoConfig

TASK = "caesar"


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_knob_gets_a_setting_or_a_comment_and_no_field_is_set_twice(preset, framework):
    lines = knob_lines(PRESETS[preset], framework, TASK)
    assert [knob for knob, _ in lines] == list(knob_values(PRESETS[preset]))
    assert all(produced for _, produced in lines)
    if framework == "trl" and PRESETS[preset].num_generations < 2:
        with pytest.raises(ValueError, match="num_generations=1 does not map to TRL's GRPOConfig"):
            export_config(PRESETS[preset], framework, TASK)
        return
    settings(PRESETS[preset], framework, TASK)  # raises if one field got two values
    text = export_config(PRESETS[preset], framework, TASK)
    for knob, _ in lines:
        # Every knob is named in the text, on a setting's comment or on its own comment line.
        assert f"# {knob}=" in text


def test_a_knob_the_table_does_not_know_becomes_a_does_not_map_comment():
    Extended = dataclasses.make_dataclass("Extended", [("brand_new_knob", int, 3)], bases=(AlgoConfig,), frozen=True)
    algo = Extended(**{f.name: getattr(PRESETS["grpo"], f.name) for f in dataclasses.fields(AlgoConfig)})
    for framework in FRAMEWORKS:
        produced = dict(knob_lines(algo, framework, TASK))["brand_new_knob"]
        assert produced == [f"does not map: no {framework} counterpart is recorded for this knob"]
        assert "# brand_new_knob=3: does not map" in export_config(algo, framework, TASK)


def test_dapo_values_by_hand():
    trl = settings(PRESETS["dapo"], "trl", TASK)
    # 8 prompts × 8 completions in 2 minibatches of 32, 2 epochs; token-mean over the minibatch.
    assert trl["per_device_train_batch_size"] == 32 and trl["steps_per_generation"] == 2
    assert trl["num_iterations"] == 2 and trl["loss_type"] == "bnpo"
    assert (trl["epsilon"], trl["epsilon_high"], trl["beta"]) == (0.2, 0.28, 0.0)
    assert trl["max_completion_length"] == 8 and trl["scale_rewards"] == "group"
    verl = settings(PRESETS["dapo"], "verl", TASK)
    assert verl["data.train_batch_size"] == 8 and verl["actor_rollout_ref.rollout.n"] == 8
    assert verl["actor_rollout_ref.actor.ppo_mini_batch_size"] == 4  # prompts per minibatch
    assert verl["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    assert verl["algorithm.filter_groups.enable"] is True and verl["algorithm.filter_groups.metric"] == "reward"
    assert verl["reward.reward_manager.name"] == "dapo"
    assert verl["+reward.reward_kwargs.overlong_buffer_cfg.len"] == 2  # 0.2 of the 8-token limit, rounded
    assert verl["+reward.reward_kwargs.max_resp_len"] == 8
    openrlhf = settings(PRESETS["dapo"], "openrlhf", TASK)
    # 8 prompts × 8 completions = 64 in 2 optimiser steps of 32 completions.
    assert openrlhf["--rollout.batch_size"] == 8 and openrlhf["--rollout.n_samples_per_prompt"] == 8
    assert openrlhf["--train.batch_size"] == 32 and openrlhf["--train.max_epochs"] == 2
    assert openrlhf["--actor.eps_clip_low_high"] == (0.2, 0.28)
    assert openrlhf["--algo.advantage.estimator"] == "group_norm" and openrlhf["--algo.dynamic_filtering_enable"]
    assert openrlhf["--reward.overlong_buffer_len"] == 2 and openrlhf["--actor.loss_agg_mode"] == "token-mean"
    text = export_config(PRESETS["dapo"], "trl", TASK)
    assert "# dynamic_sampling=True: does not map" in text
    assert "get_soft_overlong_punishment(max_completion_len=8, soft_punish_cache=2)" in text


def test_dr_grpo_gspo_and_ppo_map_their_defining_knobs():
    assert settings(PRESETS["dr_grpo"], "trl", TASK)["scale_rewards"] == "none"
    assert settings(PRESETS["dr_grpo"], "trl", TASK)["loss_type"] == "dr_grpo"
    assert settings(PRESETS["dr_grpo"], "verl", TASK)["algorithm.norm_adv_by_std_in_grpo"] is False
    assert settings(PRESETS["gspo"], "trl", TASK)["importance_sampling_level"] == "sequence"
    assert settings(PRESETS["gspo"], "verl", TASK)["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    verl = settings(PRESETS["ppo"], "verl", TASK)
    assert verl["algorithm.adv_estimator"] == "gae" and verl["algorithm.use_kl_in_reward"] is True
    assert verl["algorithm.kl_ctrl.kl_coef"] == 0.05 and verl["algorithm.kl_penalty"] == "kl"
    assert verl["critic.enable"] is True
    assert "# use_critic=True: does not map" in export_config(PRESETS["vapo"], "trl", TASK)


def _successor(**knobs) -> dict:
    """GRPO's knobs plus the 2025–26 knobs of the successors' presets (read as a dict, before they exist)."""
    defaults = dict(
        sapo_tau_pos=1.0,
        sapo_tau_neg=1.05,
        dppo_delta_low=0.15,
        dppo_delta_high=0.15,
        dppo_ratio_cap=20.0,
        cispo_two_sided=False,
        kl_gradient="plain",
        rollout_staleness=0,
        rollout_is_mode="none",
        rollout_is_level="token",
        rollout_is_threshold=2.0,
        adv_norm_mean="group",
        adv_norm_std="group",
    )
    return dataclasses.asdict(PRESETS["grpo"]) | defaults | knobs


def test_the_successor_knobs_map_by_name():
    cispo = _successor(policy_loss="cispo", epsilon_high=5.0, beta=0.0, loss_agg_mode="token-mean")
    trl, verl = settings(cispo, "trl", TASK), settings(cispo, "verl", TASK)
    assert trl["loss_type"] == "cispo" and trl["epsilon_high"] == 5.0
    # verl clamps to [1 − low, 1 + high]: the one-sided cap 5 is low = 1 (bound 0), high = 4.
    assert verl["actor_rollout_ref.actor.clip_ratio_low"] == 1.0
    assert verl["actor_rollout_ref.actor.clip_ratio_high"] == 4.0
    two_sided = settings(_successor(policy_loss="cispo", cispo_two_sided=True, epsilon_high=0.28), "verl", TASK)
    assert two_sided["actor_rollout_ref.actor.clip_ratio_low"] == 0.2
    assert two_sided["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    sapo = settings(_successor(policy_loss="sapo", sapo_tau_neg=2.0), "trl", TASK)
    assert sapo["loss_type"] == "sapo" and sapo["sapo_temperature_neg"] == 2.0
    dppo = _successor(policy_loss="dppo_tv", dppo_delta_low=0.1, dppo_delta_high=0.3)
    verl = settings(dppo, "verl", TASK)
    assert verl["actor_rollout_ref.actor.policy_loss.loss_mode"] == "dppo_tv"
    assert (verl["actor_rollout_ref.actor.clip_ratio_low"], verl["actor_rollout_ref.actor.clip_ratio_high"]) == (
        0.1,
        0.3,
    )
    assert verl["actor_rollout_ref.actor.clip_ratio_c"] == 20.0
    assert dict(knob_lines(dppo, "trl", TASK))["policy_loss"] == ["does not map: TRL has no dppo_tv loss"]
    mis = _successor(rollout_is_mode="mask", rollout_is_level="sequence", rollout_is_threshold=3.0)
    assert settings(mis, "trl", TASK)["vllm_importance_sampling_mode"] == "sequence_mask"
    verl = settings(mis, "verl", TASK)
    assert verl["algorithm.rollout_correction.rollout_rs"] == "seq_sum_k1"
    assert verl["algorithm.rollout_correction.rollout_rs_threshold"] == 3.0
    k2 = _successor(beta=0.04, kl_gradient="k2_grad")
    assert settings(k2, "verl", TASK)["actor_rollout_ref.actor.kl_loss_type"] == "k3+"
    assert settings(_successor(kl_gradient="is_corrected"), "trl", TASK)["use_bias_correction_kl"] is True
    rloo = settings(_successor(adv_norm_mean="leave_one_out", adv_norm_std="none"), "verl", TASK)
    assert rloo["algorithm.adv_estimator"] == "rloo" and "algorithm.norm_adv_by_std_in_grpo" not in rloo
    dr_grpo = _successor(advantage_estimator="dr_grpo", loss_agg_mode="seq-mean-token-sum-norm")
    assert settings(dr_grpo, "trl", TASK)["scale_rewards"] == "none"  # the selector is unused outside grpo
    assert settings(dr_grpo, "verl", TASK)["algorithm.norm_adv_by_std_in_grpo"] is False
    lite = _successor(adv_norm_std="batch", loss_agg_mode="token-mean")
    assert settings(lite, "trl", TASK)["scale_rewards"] == "batch"
    assert dict(knob_lines(lite, "verl", TASK))["adv_norm_std"][0].startswith("does not map")


def test_the_verl_script_parses_and_passes_each_override_once(tmp_path):
    script = tmp_path / "verl.sh"
    assert main(["export", "--algo", "dapo", "--set", "beta=0.1", "--format", "verl", "--out", str(script)]) == 0
    # A stand-in for verl's entry point prints the arguments the script passes.
    done = subprocess.run(
        ["bash", "-c", f'python3() {{ printf "%s\\n" "$@"; }}; source {script}'],
        capture_output=True,
        text=True,
        check=True,
    )
    arguments = done.stdout.splitlines()
    assert arguments[:2] == ["-m", "verl.trainer.main_ppo"]  # verl 0.9's trainer filters groups itself
    overrides = dict(a.split("=", 1) for a in arguments[2:])
    assert len(overrides) == len(arguments) - 2  # no key twice
    assert overrides["actor_rollout_ref.actor.kl_loss_coef"] == "0.1"
    assert overrides["actor_rollout_ref.actor.use_kl_loss"] == "true"
    expected = settings(get_preset("dapo", beta=0.1), "verl", TASK)
    assert overrides.keys() == expected.keys()


def test_a_preset_without_dapo_options_runs_verls_main_trainer():
    assert export_config(PRESETS["grpo"], "verl", TASK).splitlines()[-1].startswith("python3 -m verl.trainer.main_ppo ")


def test_export_refuses_bad_input_naming_the_knob(capsys):
    assert main(["export", "--algo", "grpo", "--set", "epsilon=2", "--format", "trl"]) == 2
    assert "epsilon=2.0 is out of range" in capsys.readouterr().err
    assert main(["export", "--algo", "grpo", "--format", "trl", "--task", "nope"]) == 2
    assert "task 'nope' is unknown" in capsys.readouterr().err


@pytest.mark.slow
def test_trl_builds_a_grpo_config_from_every_export(tmp_path):
    """TRL's own GRPOConfig, in its own virtualenv (created on first use; CI caches it), accepts every preset's
    export and ends up with exactly the values the export set."""
    python = trl_python()
    cases = {name: preset for name, preset in PRESETS.items() if preset.num_generations > 1}
    cases["dapo, beta=0.1, 4 minibatches"] = get_preset("dapo", beta=0.1, num_minibatches=4)
    expected = {name: settings(algo, "trl", TASK) for name, algo in cases.items()}
    sources = {name: export_config(algo, "trl", TASK) for name, algo in cases.items()}
    assert trl_built(python, sources, {name: list(fields) for name, fields in expected.items()}, tmp_path) == expected


def _script_arguments(text: str, tmp_path, launcher: str = "python3") -> list[str]:
    """The arguments a bash export passes to its `launcher` (a stand-in that prints them)."""
    script = tmp_path / "export.sh"
    script.write_text(text)
    done = subprocess.run(
        ["bash", "-c", f'{launcher}() {{ printf "%s\\n" "$@"; }}; source {script}'],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


VARIANTS = {  # knobs the presets leave off, so that their rules are checked against the releases too
    "dapo, beta=0.1, 4 minibatches": get_preset("dapo", beta=0.1, num_minibatches=4),
    "grpo, TIS per token": get_preset("grpo", rollout_staleness=2, rollout_is_mode="truncate"),
    "grpo, MIS geometric": get_preset(
        "grpo", rollout_staleness=2, rollout_is_mode="mask", rollout_is_level="geometric"
    ),
    "grpo, binary-KL gate per response": get_preset(
        "grpo",
        rollout_staleness=2,
        rollout_is_mode="mask",
        rollout_is_level="sequence",
        is_correction_gating="binary_kl",
    ),
    "grpo, bfloat16 sampler": get_preset("grpo", rollout_dtype="bfloat16"),
    "grpo, dro": get_preset("grpo", policy_loss="dro", dro_beta=0.5),
    "grpo, is_corrected KL": get_preset("grpo", kl_gradient="is_corrected"),
    "ppo, adaptive beta, dual clip": get_preset("ppo", target_kl=0.02, dual_clip=3.0),
    "grpo, KL-Cov": get_preset("grpo", cov_mode="kl_cov"),
    "grpo, LoRA": get_preset("grpo", use_peft=True, lora_r=8, lora_alpha=16, lora_target_modules="c_attn,c_proj"),
}
CASES = {**PRESETS, **VARIANTS}


@pytest.mark.parametrize("case", list(CASES))
def test_every_verl_key_is_in_the_released_config(case):
    """verl 0.9.1's generated trainer config holds every key the export sets; a `+key` is one it lacks, under a
    group it has (Hydra appends it there). The policy loss and advantage estimator it names are registered in verl."""
    keys = verl_config_keys()
    exported = settings(CASES[case], "verl", TASK)
    for field, names in verl_registered().items():  # and the loss and estimator it names are registered there
        assert exported.get(field, "vanilla" if "loss_mode" in field else "gae") in names, field
    for field in exported:
        if field.startswith("+"):
            parts = field[1:].split(".")
            assert field[1:] not in keys, f"{field}: the key exists, so Hydra refuses the +"
            assert any(".".join(parts[:i]) in keys for i in range(1, len(parts))), field
        else:
            assert field in keys, field


@pytest.mark.parametrize("case", list(CASES))
def test_openrlhfs_own_parser_reads_every_flag_as_set(case, tmp_path):
    """OpenRLHF 0.11.2's argument parser (its names, types, choices and nargs) takes the script's flags, and ends
    up with exactly the values the export set."""
    arguments = _script_arguments(export_config(CASES[case], "openrlhf", TASK), tmp_path)
    assert arguments[:2] == ["-m", "openrlhf.cli.train_ppo_ray"]
    try:
        parsed = vars(openrlhf_parser().parse_args(arguments[2:]))
    except SystemExit:  # argparse's way to refuse; its message is in the captured stderr
        pytest.fail(f"OpenRLHF refused the flags of {case}")
    for flag, value in settings(CASES[case], "openrlhf", TASK).items():
        assert parsed[flag[2:]] == (list(value) if isinstance(value, tuple) else value), flag


def test_openrlhf_values_by_hand():
    ppo = settings(PRESETS["ppo"], "openrlhf", TASK)
    # KL (k1) in the reward with β = 0.05, GAE λ = 0.95, reward clipped at ±5 (deepspeed-chat), a critic.
    assert ppo["--algo.advantage.estimator"] == "gae" and "--algo.kl.use_loss" not in ppo
    assert (ppo["--algo.kl.init_coef"], ppo["--algo.kl.estimator"]) == (0.05, "k1")
    assert ppo["--algo.advantage.lambd"] == 0.95 and ppo["--reward.clip_range"] == (-5.0, 5.0)
    assert ppo["--train.max_epochs"] == 4 and ppo["--train.batch_size"] == 16  # 64 completions in 4 minibatches
    tis = settings(VARIANTS["grpo, TIS per token"], "openrlhf", TASK)
    assert (tis["--algo.advantage.is_correction_level"], tis["--algo.advantage.is_correction_mode"]) == (
        "token",
        "clip",
    )
    assert tis["--algo.advantage.is_correction_threshold"] == (2.0,)  # one number: the upper bound C, min(w, C)
    assert settings(VARIANTS["grpo, is_corrected KL"], "openrlhf", TASK)["--algo.kl.unbiased_gradient"] is True
    gate = settings(VARIANTS["grpo, binary-KL gate per response"], "openrlhf", TASK)
    assert (
        gate["--algo.advantage.is_correction_level"],
        gate["--algo.advantage.is_correction_mode"],
        gate["--algo.advantage.is_correction_gating"],
    ) == ("seq", "mask", "binary_kl")
    assert gate["--algo.advantage.is_correction_threshold"] == (0.005,)  # δ, not the ratio's C
    verl_lines = dict(knob_lines(VARIANTS["grpo, binary-KL gate per response"], "verl", TASK))
    assert verl_lines["is_correction_gating"][0].startswith("does not map: verl gates")
    assert settings(VARIANTS["grpo, bfloat16 sampler"], "verl", TASK)["actor_rollout_ref.rollout.dtype"] == "bfloat16"
    dro = settings(VARIANTS["grpo, dro"], "verl", TASK)
    actor = "actor_rollout_ref.actor"
    assert (dro[f"{actor}.policy_loss.loss_mode"], dro[f"{actor}.policy_loss.dro_beta"]) == ("dro", 0.5)
    lines = dict(knob_lines(PRESETS["dppo"], "openrlhf", TASK))
    assert lines["policy_loss"] == ["does not map: OpenRLHF 0.11's policy losses are ppo and gspo, not dppo_tv"]


def test_no_export_names_a_class_the_releases_lack():
    """Every `…Trainer` / `…Config` an export or a refusal names exists in TRL 1.16 (its PPOTrainer is gone)."""
    texts = []
    for algo in CASES.values():
        for framework in FRAMEWORKS:
            try:
                texts.append(export_config(algo, framework, TASK))
            except ValueError as refusal:
                texts.append(str(refusal))
    named = set(re.findall(r"\b(\w+(?:Trainer|Config))\b", "\n".join(texts)))
    assert named and named <= trl_class_names(), named - trl_class_names()
    # TRL 1.16's importance_sampling_level is "token" or "sequence", no GSPO-token level: GSPO-token exports as GSPO.
    gspo_token = settings(get_preset("gspo", policy_loss="gspo_token"), "trl", TASK)
    assert gspo_token["importance_sampling_level"] == "sequence"


# ------------------------------------------------------------------ the runs fitted to preference pairs
PAIR_CASES = {
    "dpo": get_run_algo("dpo"),
    "ipo, beta=0.5": get_run_algo("ipo", beta=0.5),
    "reward_model": get_run_algo("reward_model", learning_rate=1e-3),
}
OPENRLHF_SCRIPTS = {"dpo": "train_dpo", "ipo, beta=0.5": "train_dpo", "reward_model": "train_rm"}


@pytest.mark.parametrize("framework", ["trl", "openrlhf"])
@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_every_pair_knob_gets_a_setting_or_a_comment(case, framework):
    algo = PAIR_CASES[case]
    lines = pair_knob_lines(algo, framework)
    assert [knob for knob, _, _ in lines] == [
        k for k in dataclasses.asdict(algo) if k not in ("name", "title", "summary")
    ]
    assert all(xs for _, _, xs in lines)
    text = export_pair_config(algo, framework)
    for knob, value, _ in lines:
        assert f"{knob}={value}" in text


def test_pair_values_by_hand():
    ipo = pair_settings(PAIR_CASES["ipo, beta=0.5"], "trl")
    assert ipo["loss_type"] == ["ipo"] and ipo["beta"] == 0.5 and ipo["learning_rate"] == 5e-4
    assert ipo["per_device_train_batch_size"] == 32 and (ipo["eval_strategy"], ipo["eval_steps"]) == ("steps", 10)
    assert ipo["max_grad_norm"] == 1.0 and ipo["lr_scheduler_type"] == "constant" and ipo["disable_dropout"]
    assert pair_settings(PAIR_CASES["dpo"], "trl")["loss_type"] == ["sigmoid"]
    openrlhf = pair_settings(PAIR_CASES["ipo, beta=0.5"], "openrlhf")
    assert openrlhf["--model.ipo_enable"] is True and openrlhf["--model.beta"] == 0.5
    assert openrlhf["--train.batch_size"] == openrlhf["--train.micro_batch_size"] == 32
    assert "--model.ipo_enable" not in pair_settings(PAIR_CASES["dpo"], "openrlhf")
    # OpenRLHF's IPO sums the log-probabilities: the export says so beside the flag.
    notes = {knob: xs for knob, _, xs in pair_knob_lines(PAIR_CASES["ipo, beta=0.5"], "openrlhf")}
    assert any("summed log-probabilities" in x for x in notes["loss_type"] if not isinstance(x, Set))
    rm = pair_settings(PAIR_CASES["reward_model"], "trl")
    assert rm["learning_rate"] == 1e-3 and rm["per_device_train_batch_size"] == 64 and rm["eval_steps"] == 10
    assert rm["center_rewards_coefficient"] is None


def test_a_pair_export_to_verl_is_refused_with_the_reason(capsys):
    assert main(["export", "--algo", "dpo", "--format", "verl"]) == 2
    assert "format='verl' cannot take algo=dpo" in capsys.readouterr().err
    assert main(["export", "--algo", "reward_model", "--format", "trl", "--set", "beta=0.1"]) == 2
    assert "unknown knob(s) 'beta' of reward_model" in capsys.readouterr().err


@pytest.mark.parametrize("case", list(PAIR_CASES))
def test_openrlhfs_own_parsers_read_every_pair_flag_as_set(case, tmp_path):
    """OpenRLHF 0.11.2's `train_dpo` / `train_rm` argument parser takes the script's flags and ends up with exactly
    the values the export set."""
    script = OPENRLHF_SCRIPTS[case]
    arguments = _script_arguments(export_pair_config(PAIR_CASES[case], "openrlhf"), tmp_path, "deepspeed")
    assert arguments[:2] == ["--module", f"openrlhf.cli.{script}"]
    try:
        parsed = vars(openrlhf_parser(script).parse_args(arguments[2:]))
    except SystemExit:
        pytest.fail(f"OpenRLHF's {script} refused the flags of {case}")
    for flag, value in pair_settings(PAIR_CASES[case], "openrlhf").items():
        assert parsed[flag[2:]] == (list(value) if isinstance(value, tuple) else value), flag


@pytest.mark.slow
def test_trl_builds_dpo_and_reward_configs_from_the_pair_exports(tmp_path):
    """TRL 1.16's own DPOConfig and RewardConfig, in its virtualenv, take each export and end up with exactly the
    values it set."""
    expected = {name: pair_settings(algo, "trl") for name, algo in PAIR_CASES.items()}
    sources = {name: export_pair_config(algo, "trl") for name, algo in PAIR_CASES.items()}
    assert (
        trl_built(trl_python(), sources, {name: list(fields) for name, fields in expected.items()}, tmp_path)
        == expected
    )
