"""One training loop for every preset: rollout → reward → advantages → K epochs × minibatches → metrics.

`Trainer.prepare()` builds the models (SFT warm start, reward model, value pretraining), `Trainer.steps()`
yields one plain-dict record per RL step. Nothing here draws anything: the CLI and the pages consume the records.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from rl_core.config import RunConfig
from rl_core.engine.evaluation import EVALUATION_PROMPTS, EVALUATION_SEED, PolicyEvaluation, evaluate_policies
from rl_core.engine.lora import load_adapters, with_adapters
from rl_core.engine.models import (
    ValueModel,
    frozen_reference,
    load_policy,
    select_device,
    use_preset_threads,
)
from rl_core.engine.pretrained import check_fits, is_preset, model_tokenizer
from rl_core.engine.run_batch import step_together
from rl_core.engine.run_group import RunGroup, TrainingError  # noqa: F401 - TrainingError: the trainer's error
from rl_core.engine.sft import default_cache_dir, sft_policy
from rl_core.engine.stacked_runs import shape_of
from rl_core.formulas.distillation import TEACHER_DEMO_NOISE
from rl_core.formulas.estimators import effective_reward_clip
from rl_core.formulas.rewards import overlong_buffer_length, soft_overlong_punishment
from rl_core.runs.staging import staging_folder
from toy_tasks import get_task

Progress = Callable[[str, int, int], None]  # (phase, done, total)


class TrainingStopped(Exception):
    """The stop event was set while the models were being prepared."""


CHECKPOINT_FILES = ("trainer_state.json", "trainer_state.pt", "policy")  # what save_checkpoint always writes
CHECKPOINT_OPTIONAL = ("critic",)  # and with a critic


def check_checkpoint_folder(folder: Path) -> None:
    """ValueError unless `folder` is free for a checkpoint: missing, empty, or a checkpoint of the lab (which a new
    one replaces). A folder with anything else in it, or a file, is the user's and is never replaced."""
    if not folder.exists() and not folder.is_symlink():
        return
    if not folder.is_dir() or folder.is_symlink():
        raise ValueError(f"--checkpoint {folder.name} is not a folder; give a new or empty folder, or a checkpoint")
    names = {child.name for child in folder.iterdir()}
    if names and not set(CHECKPOINT_FILES) <= names <= {*CHECKPOINT_FILES, *CHECKPOINT_OPTIONAL}:
        raise ValueError(
            f"--checkpoint {folder.name} holds files that are not a lab checkpoint; give a new or empty "
            "folder (an existing checkpoint is replaced, nothing else)"
        )


def stoppable(progress: Progress | None, stop_event: threading.Event) -> Progress:
    """`progress` (or nothing) that first raises TrainingStopped once `stop_event` is set: a setup phase's reports
    are where a stop request ends it."""
    report = progress or (lambda phase, done, total: None)

    def checked(phase: str, done: int, total: int) -> None:
        if stop_event.is_set():
            raise TrainingStopped(f"stopped during {phase}")
        report(phase, done, total)

    return checked


def prepare_warm_start(trainer, progress: Progress):
    """What every run kind starts from, for a trainer's `run`, `task`, `tokenizer`, `device`, `demo_noise` and
    `cache_dir`: the task prepared (its reward model trained or loaded) and the run's SFT policy; returns the policy
    in eval mode and the setup metrics (`sft_success_rate`, `sft_attempts`, `sft_note`)."""
    run = trainer.run
    progress("reward", 0, 1)
    trainer.task.prepare(trainer.cache_dir, trainer.device, run.seed)
    progress("reward", 1, 1)
    policy, sft_report = sft_policy(
        trainer.task,
        trainer.tokenizer,
        run.model,
        run.seed,
        trainer.demo_noise,
        run.sft_steps,
        trainer.device,
        trainer.cache_dir,
        progress=lambda done, loss: progress("sft", done, run.sft_steps),
    )
    # Eval mode for all of training: dropout stays off (the first update's ratios must be 1, as with TRL's
    # disable_dropout), and the sampler never has to switch modes around a rollout.
    policy.eval()
    setup = {"sft_success_rate": sft_report["success_rate"], "sft_attempts": sft_report["attempts"]}
    if "note" in sft_report:
        setup["sft_note"] = sft_report["note"]
    return policy, setup


def group_plan(run: RunConfig) -> tuple:
    """What RL runs must share to train as one group, as their configs say: model, device, task, batch, length
    limit and update schedule, and the same passes (sampler, critic, teacher, value pretraining's, LoRA's). Seeds,
    learning rates, clip ranges, β, losses and advantage estimators may differ."""
    algo = run.algo
    behaviour_differs = (
        algo.rollout_staleness > 0
        or algo.rollout_dtype != "float32"
        or algo.rollout_temperature not in (None, algo.temperature)
    )
    return (
        run.model,
        run.device,
        run.task,
        algo.max_new_tokens or get_task(run.task).max_new_tokens,
        run.samples_per_record,
        algo.prompts_per_step,
        algo.num_generations,
        algo.ppo_epochs,
        algo.num_minibatches,
        algo.dynamic_sampling,
        algo.dynamic_sampling and algo.max_resample_rounds,
        algo.overlong_filter,
        algo.rollout_staleness > 0,
        algo.rollout_dtype,
        behaviour_differs,
        algo.use_critic,
        algo.use_critic and algo.critic_init,
        algo.teacher_model,
        # LoRA's α/r is one number of the stacked pass (`StackedGPT2.lora_scaling`)
        algo.use_peft and (algo.lora_r, algo.lora_alpha, algo.lora_target_modules),
    )


class Trainer:
    """One RL run: its config, its models, and the state that is its own (β, the running baseline, the prompt
    sampler and the generator, the optimisers' moments). It trains in a group of runs (`RunGroup`, one step for
    all of them) that `run_batch.step_together` forms; alone, it is a group of one."""

    def __init__(self, run: RunConfig, cache_dir: Path | None = None, stop_event: threading.Event | None = None):
        run.validate()
        self.run = run
        self.algo = run.algo
        self.cache_dir = Path(cache_dir or default_cache_dir())
        self.stop_event = stop_event or threading.Event()
        self.device = select_device(run.device, run.model)
        use_preset_threads(run.model, self.device)
        self.task = get_task(run.task)
        self.max_new_tokens = self.algo.max_new_tokens or self.task.max_new_tokens
        self.overlong_buffer = overlong_buffer_length(
            self.max_new_tokens, self.algo.overlong_buffer, self.algo.overlong_buffer_fraction
        )
        if self.algo.overlong_punishment and self.overlong_buffer > self.max_new_tokens:
            raise ValueError(
                f"overlong_buffer={self.algo.overlong_buffer!r} is out of range; allowed: at most the length limit "
                f"{self.max_new_tokens} of task {run.task!r}"
            )
        self.reward_clip = effective_reward_clip(self.algo)
        self.demo_noise = self.task.default_demo_noise if run.demo_noise is None else run.demo_noise
        self.tokenizer = model_tokenizer(run.model)
        self.beta = self.algo.beta
        self.running_baseline: float | None = None  # PG's running-mean baseline b, set by the first batch
        self.step_index = 0
        self.prompt_rng = random.Random(run.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(run.seed)
        self.policy = self.reference = self.critic = self.teacher = None
        # The optimisers' moments and step counts (`StackedAdamW.run_state`), views of the group's once it trains.
        self.policy_adam = self.critic_adam = None
        self.group: RunGroup | None = None  # the group it last trained in
        # Set by the live loop's lane (`run_loop.LanePacer`): called between the updates of its steps alone, it waits
        # for the other learners' shares and returns the seconds it waited.
        self.share_pause: Callable[[], float] | None = None
        self.plan = group_plan(run)  # its part of `group_key`, read at every step: worked out once
        self._sampler, self._snapshots, self._snapshot_step = None, None, None  # rollout_staleness > 0

    # ------------------------------------------------------------------ setup
    def prepare(self, progress: Progress | None = None) -> dict:
        """Reward model, SFT policy, reference, critic (value-pretrained if asked); returns setup metrics."""
        progress = stoppable(progress, self.stop_event)
        if not is_preset(self.run.model):
            check_fits(
                self.run.model, self.device, self.algo.use_critic, lora=self.algo if self.algo.use_peft else None
            )
        self.policy, setup = prepare_warm_start(self, progress)
        self.reference = frozen_reference(self.policy)
        if self.algo.use_peft:  # before any group stacks it: the policy is the base (π_ref's weights) with adapters
            self.policy = with_adapters(self.policy, self.algo, self.run.seed)
        if self.algo.teacher_model is not None:
            setup |= self._prepare_teacher(progress)
        if self.algo.use_critic:
            self.critic = self._initial_critic().to(self.device).eval()
            if self.algo.value_pretrain_steps:
                explained, batches = RunGroup([self]).pretrain_value(self.algo.value_pretrain_steps, progress)[0]
                setup |= {"value_pretrain_explained_variance": explained, "value_pretrain_batches": batches}
        return setup

    def _prepare_teacher(self, progress: Progress) -> dict:
        """π_T for on-policy distillation: the task's SFT recipe on noise-free demonstrations, `teacher_sft_steps`
        long, on the `teacher_model` preset and the run's seed; cached like the warm start (the same function),
        frozen like the reference."""
        steps = self.algo.teacher_sft_steps
        teacher, report = sft_policy(
            self.task,
            self.tokenizer,
            self.algo.teacher_model,
            self.run.seed,
            TEACHER_DEMO_NOISE,
            steps,
            self.device,
            self.cache_dir,
            progress=lambda done, loss: progress("teacher", done, steps),
        )
        self.teacher = frozen_reference(teacher)
        return {"teacher_success_rate": report["success_rate"]}

    def _initial_critic(self) -> ValueModel:
        """A copy of the policy's transformer with a zero value head (the usual start: V ≡ 0, explained variance 0,
        until the critic has learnt something), or a copy of the task's reward model (VC-PPO: it scores finished
        responses, so its values at earlier states are biased low)."""
        if self.algo.critic_init == "reward_model":
            critic = copy.deepcopy(self.task.reward_model)
            critic.requires_grad_(True)
            return critic
        # No draw from the global RNG, which other code in the process shares: the head is zeroed right away.
        with torch.random.fork_rng(devices=[]):
            critic = ValueModel.from_policy(self.reference)  # the SFT policy's weights, without adapters
        with torch.no_grad():
            critic.value_head.weight.zero_()
            critic.value_head.bias.zero_()
        return critic

    def group_key(self) -> tuple:
        """Runs with equal keys train as one group (`group_plan` of their configs, and the shapes of the models they
        built). Everything else may differ per run."""
        return (
            self.plan,
            self.device,
            shape_of(self.policy),
            None if self.critic is None else shape_of(self.critic),
            None if self.teacher is None else shape_of(self.teacher),
        )

    # -------------------------------------------------------------- sampling
    def behaviour_policy(self):
        """The sampler μ: the policy itself, or with `rollout_staleness = k` its copy from k steps ago (early on,
        the oldest kept), loaded from a queue of the last k + 1 steps' weights (with LoRA, of its adapters: the
        base never changes)."""
        k = self.algo.rollout_staleness
        if k == 0:
            return self.policy
        if self._sampler is None:
            self._sampler = copy.deepcopy(self.policy)
            self._snapshots = deque(maxlen=k + 1)
        if self._snapshot_step != self.step_index:
            self._snapshots.append(
                {
                    name: t.detach().clone()
                    for name, t in self.policy.state_dict().items()
                    if not self.algo.use_peft or ".lora_" in name
                }
            )
            self._sampler.load_state_dict(self._snapshots[0], strict=not self.algo.use_peft)
            self._snapshot_step = self.step_index
        return self._sampler

    def rewards(self, rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """`(rewards, successes)` `[B]` of a rollout: the task's rewards, plus DAPO's soft overlong punishment."""
        scores = self.task.score(rollout.prompts, rollout.responses, rollout.truncated.tolist())
        rewards = torch.tensor(scores.rewards, dtype=torch.float32, device=self.device)
        if self.algo.overlong_punishment:
            # |y| counts the closing EOS, as verl's `valid_response_length` does: an answer is safe when it ends
            # within L_max − L_cache tokens, EOS included (L_cache is what to choose, not what |y| counts).
            rewards = rewards + soft_overlong_punishment(rollout.lengths, self.max_new_tokens, self.overlong_buffer)
        return rewards, torch.tensor(scores.successes, dtype=torch.bool, device=self.device)

    @property
    def behaviour_temperature(self) -> float:
        return self.algo.temperature if self.algo.rollout_temperature is None else self.algo.rollout_temperature

    @property
    def behaviour_differs(self) -> bool:
        """Whether the sampler μ may differ from π_old: a stale copy, another sampling temperature, or another
        precision. Otherwise the sampler's own log-probabilities are π_old's: μ ≡ π_old, the mismatch removed."""
        return (
            self.algo.rollout_staleness > 0
            or self.behaviour_temperature != self.algo.temperature
            or self.algo.rollout_dtype != "float32"
        )

    # ------------------------------------------------------------------- step
    def steps(self) -> Iterator[dict]:
        """Train for `run.steps` steps (or until stopped), yielding one record per step."""
        if self.policy is None:
            self.prepare()
        while self.step_index < self.run.steps and not self.stop_event.is_set():
            yield self.step()

    def step(self) -> dict:
        """One step alone: a group of one run (`rl_core.engine.run_group`)."""
        outcome = step_together([self])[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def evaluation(self) -> PolicyEvaluation:
        """What the evaluation after the last step samples: the policy at the run's length limit and temperature."""
        return PolicyEvaluation(
            self.policy, self.run.model, self.tokenizer, self.task, self.max_new_tokens, self.algo.temperature
        )

    def evaluate(self, n_prompts: int = EVALUATION_PROMPTS, seed: int = EVALUATION_SEED) -> dict:
        """Success rate and mean reward of the current policy on fresh prompts, one sample each: a group of one
        (`rl_core.engine.evaluation`; `run_batch.evaluate_together` evaluates many runs as one)."""
        return evaluate_policies([self.evaluation()], n_prompts, seed)[0]

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, folder: str | Path) -> Path:
        """Policy (with LoRA its adapters, in peft's layout), critic, optimisers and counters, written to a staging
        folder and renamed into place.

        Tensors (optimiser moments, the sampling generator's state) go to `trainer_state.pt`, read back with
        `torch.load(weights_only=True)`, which unpickles tensors and plain containers only; counters and the
        prompt sampler's state go to `trainer_state.json`. A folder that holds anything else is refused
        (`check_checkpoint_folder`): the old checkpoint is replaced, nothing the lab did not write is deleted."""
        folder = Path(folder)
        check_checkpoint_folder(folder)
        staging = staging_folder(folder)
        try:
            self.policy.save_pretrained(staging / "policy")
            self.tokenizer.save_pretrained(staging / "policy")
            if self.critic is not None:
                self.critic.save(staging / "critic")
            torch.save(
                {
                    # AdamW's moments and step count (`StackedAdamW.run_state`); None before the first update
                    "optimizer": _cloned(self.policy_adam),
                    "critic_optimizer": _cloned(self.critic_adam),
                    "generator": self.generator.get_state(),
                    # the stale sampler's queue (rollout_staleness > 0), so a resumed run samples as it would have
                    "behaviour_snapshots": None if self._snapshots is None else list(self._snapshots),
                },
                staging / "trainer_state.pt",
            )
            version, internal, gauss = self.prompt_rng.getstate()
            (staging / "trainer_state.json").write_text(
                json.dumps(
                    {
                        "step_index": self.step_index,
                        "beta": self.beta,
                        "running_baseline": self.running_baseline,
                        "snapshot_step": self._snapshot_step,
                        "prompt_rng": [version, list(internal), gauss],
                    }
                )
            )
            backup = folder.with_name(folder.name + ".old")
            if folder.exists():
                folder.rename(backup)
            staging.rename(folder)
            shutil.rmtree(backup, ignore_errors=True)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return folder

    def load_checkpoint(self, folder: str | Path) -> None:
        """Resume from `save_checkpoint`'s folder (call after `prepare()`)."""
        folder = Path(folder)
        state = torch.load(folder / "trainer_state.pt", map_location=self.device, weights_only=True)
        counters = json.loads((folder / "trainer_state.json").read_text())
        if self.algo.use_peft:  # peft's adapter folder; the base is the warm start that prepare() built
            load_adapters(self.policy, folder / "policy")
        else:
            self.policy.load_state_dict(load_policy(folder / "policy").state_dict())
        if self.critic is not None:
            self.critic.load_state_dict(ValueModel.load(folder / "critic").state_dict())
            self.critic_adam = state["critic_optimizer"]
        self.policy_adam = state["optimizer"]
        self.group = None  # its group is formed again, from these weights and moments
        self.step_index = counters["step_index"]
        self.beta = counters["beta"]
        version, internal, gauss = counters["prompt_rng"]
        self.prompt_rng.setstate((version, tuple(internal), gauss))
        self.running_baseline = counters.get("running_baseline")
        self.generator.set_state(state["generator"].cpu())
        if state.get("behaviour_snapshots") is not None:
            self.behaviour_policy()  # builds the sampler and its queue
            self._snapshots.clear()
            self._snapshots.extend(state["behaviour_snapshots"])
            self._sampler.load_state_dict(self._snapshots[0], strict=not self.algo.use_peft)
            self._snapshot_step = counters["snapshot_step"]


def _cloned(state: dict | None) -> dict | None:
    """An optimiser state's tensors copied out of its group's stacks (a checkpoint holds them, not views)."""
    return None if state is None else {name: tensor.detach().clone() for name, tensor in state.items()}
