"""The DPO page's instrument: DPO or IPO trained live (`ui.live_fit`) on the `preference` task's pairs, from the
task's SFT warm start as policy and frozen reference; the loss, the implicit rewards, the sequence log-probabilities,
the reward accuracy, and the gold success and KL of the policy's own samples, drawn as they come; once a fit has
trained, its policy is talked to beside its reference (`ui.chat.talk`), with the probe read after every step."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator

import streamlit as st
from transformers import GPT2LMHeadModel

from rl_core.engine.chat import ChatModels, Probe
from rl_core.engine.preference_optimisation import (
    MAX_BETA,
    DPOTraining,
    check_preference_loss,
    preference_warm_start,
)
from rl_core.messages import brief
from toy_tasks import get_task
from toy_tasks.preference import gold_success
from ui.chat import talk
from ui.compare import PLOT_CONFIG
from ui.knobs import LEARNING_RATES
from ui.live_fit import fit_lab, run_fit, select_sliders, status_text, step_figure

N_PAIRS, LABEL_NOISE = 1000, 0.1  # the reward-model page's default data: both pages learn from the same labels
BATCH_SIZE = 32
MODEL_PRESET = "tiny"  # preference_warm_start's default: the policy and reference the chat reads
EVAL_EVERY = 5  # steps between evaluations: held-out pairs, and 128 samples of the policy for gold success and KL
LOSS_TYPES = {"sigmoid": "sigmoid (DPO)", "ipo": "ipo (IPO)"}  # TRL's loss_type → its label
SLIDERS = {  # key → (label, options, default, help); names as TRL's DPOConfig
    "learning_rate": ("learning rate (learning_rate)", LEARNING_RATES, 5e-4, "AdamW's step size."),
    "max_steps": (
        "training steps (max_steps)",
        (20, 50, 100, 200, 300),
        100,
        f"Optimiser steps, each on {BATCH_SIZE} pairs drawn with replacement.",
    ),
    "seed": (
        "seed",
        tuple(range(10)),
        0,
        "Picks the SFT warm start, the pairs, the held-out split and the batches. "
        "A new seed trains its warm start first (about 15 s), once.",
    ),
}


def dpo_lab(page: str) -> dict | None:
    """Knobs, Train and Stop on the left, the live fit on the right; returns the latest fit (None before the
    first): `{"records", "settings", "status", "held_out"}`."""
    return fit_lab(
        page,
        lambda: _knobs(page),
        lambda settings, charts: _train(page, settings, charts),
        _draw,
        "Press **Train**: the loss, the implicit rewards, both log-probabilities, the accuracy, and "
        "the gold success and KL of the policy's samples fill in here live.",
    )


def _knobs(page: str) -> dict:
    loss_type = st.radio(
        "loss (loss_type)",
        list(LOSS_TYPES),
        format_func=LOSS_TYPES.get,
        horizontal=True,
        key=f"{page}:loss_type",
        help="sigmoid: DPO's −log σ(β h). ipo: IPO's (h̄ − 1/(2β))², h̄ per token as in TRL, which stops at a margin.",
    )
    beta = st.number_input(
        "β (beta)",
        min_value=0.0,
        value=0.1,
        step=0.05,
        format="%.3f",
        key=f"{page}:beta",
        help=f"The KL coefficient the implicit reward assumes: 0 < β ≤ {MAX_BETA:g}. TRL's default is 0.1.",
    )
    return {"loss_type": loss_type, "beta": beta} | select_sliders(page, SLIDERS)


def _train(page: str, settings: dict, charts) -> None:
    try:
        check_preference_loss(settings["loss_type"], settings["beta"])
    except ValueError as error:  # the engine names the knob and what it allows
        charts.error(f"This fit cannot run: {brief(str(error))}", icon=":material/error:")
        return
    task = get_task("preference")
    pairs = task.preference_pairs(N_PAIRS, random.Random(settings["seed"]), LABEL_NOISE)
    fit = {"records": [], "settings": settings, "status": "waiting for a training slot", "held_out": None}
    st.session_state[f"{page}:fit"] = fit

    def begin():
        fit["status"] = "preparing the SFT warm start (the policy and its frozen reference)"
        _draw(charts, fit)
        training = DPOTraining(
            preference_warm_start(task, settings["seed"]),
            pairs,
            task,
            loss_type=settings["loss_type"],
            beta=settings["beta"],
            learning_rate=settings["learning_rate"],
            steps=settings["max_steps"],
            batch_size=BATCH_SIZE,
            seed=settings["seed"],
            eval_every=EVAL_EVERY,
        )
        fit["held_out"], fit["status"] = len(training.held_out), "training"
        # The chat's probe, as an RL run records it: its probabilities before the first step, then after each.
        probe = Probe.of(task.name, training.reference, training.tokenizer, task.max_new_tokens)
        fit["chat"] = chat_models(training)
        fit["probe"], fit["probe_history"] = probe, [(0, probe.probabilities(training.policy))]
        return probed(training.steps(), probe, training.policy, fit["probe_history"])

    run_fit(fit, begin, settings["max_steps"], charts, _draw)


def chat_models(training: DPOTraining) -> ChatModels:
    """The fit's policy (trained in place as it goes) and frozen reference, as the chat reads them; answers sampled
    at temperature 1, as the fit's own samples for the gold success and KL are."""
    return ChatModels(
        training.policy,
        training.reference,
        training.tokenizer,
        MODEL_PRESET,
        training.task.name,
        training.task.max_new_tokens,
        temperature=1.0,
    )


def probed(
    records: Iterable[dict], probe: Probe, policy: GPT2LMHeadModel, history: list[tuple[int, list[float]]]
) -> Iterator[dict]:
    """`records` passed on, appending `(step, probe.probabilities(policy))` to `history` after each trained step."""
    for record in records:
        if record["step"] > 0:
            history.append((record["step"], probe.probabilities(policy)))
        yield record


def talk_to_fit(page: str, fit: dict | None) -> None:
    """ "Talk to this fit": once a fit has trained a step, a prompt answered by its reference (the SFT warm start)
    and its policy, marked by the gold judge, and the probe's decision animated over the steps."""
    if fit is None or "chat" not in fit or len(fit["probe_history"]) < 2:
        return
    st.subheader("Talk to this fit")
    after = f"After the {LOSS_TYPES[fit['settings']['loss_type']]} fit: the policy"
    talk(
        page,
        lambda: fit["chat"],
        ("Before: the reference (SFT)", after),
        fit["probe"],
        fit["probe_history"],
        judge=gold_success,
    )


CHARTS = (  # title → the (record key, label) of its series; "eval_" series are the held-out pairs'. Titles fit a
    # third of a 1024-pixel screen; one unit per chart (success is a share, KL nats per token).
    ("Loss", (("loss", "minibatch"), ("eval_loss", "held-out pairs"))),
    ("Implicit rewards, held out", (("eval_rewards/chosen", "chosen y_w"), ("eval_rewards/rejected", "rejected y_l"))),
    ("log π_θ(y|x), held out", (("eval_logps/chosen", "chosen y_w"), ("eval_logps/rejected", "rejected y_l"))),
    ("Reward accuracy", (("rewards/accuracies", "minibatch"), ("eval_rewards/accuracies", "held-out pairs"))),
    ("Gold success of samples", (("success_rate", "gold success"),)),
    ("KL to π_ref, k3 per token", (("kl_k3", "KL(π_θ‖π_ref), k3"),)),
)


def _draw(charts, fit: dict) -> None:
    settings, records = fit["settings"], fit["records"]
    total = settings["max_steps"]
    fit["draws"] = fit.get("draws", 0) + 1  # a key per chart per redraw: one script run draws them many times
    with charts.container():
        held_out = "" if fit["held_out"] is None else f" ({fit['held_out']} held out)"
        st.caption(
            f"{LOSS_TYPES[settings['loss_type']]} with β = {settings['beta']:g} on {N_PAIRS} pairs{held_out}, "
            f"{total} steps: {status_text(fit, total)}."
        )
        st.progress(sum(1 for r in records if r["step"] > 0) / total)
        for row in (CHARTS[:3], CHARTS[3:]):
            for column, (title, series) in zip(st.columns(3), row):
                column.plotly_chart(
                    step_figure(title, records, series), config=PLOT_CONFIG, key=f"dpo:chart:{title}:{fit['draws']}"
                )
        if len(records) > 1 and "eval_loss" in records[-1]:
            st.caption(summary(records[0], records[-1]))


def summary(start: dict, end: dict) -> str:
    """What the held-out pairs and the samples say at the `end` record, against the warm start's `start` record."""

    def moved(key: str) -> str:
        change = end[key] - start[key]
        return f"{start[key]:.2f} → {end[key]:.2f} ({'fell' if change < 0 else 'rose'} by {abs(change):.2f})"

    return (
        f"Step {end['step']}, held-out pairs: accuracy {end['eval_rewards/accuracies']:.2f} (a coin scores 0.5; "
        f"at step 0 every implicit reward is 0, a tie, counted wrong), margin {end['eval_rewards/margins']:.2f}. "
        f"log π(y_w): {moved('eval_logps/chosen')}; log π(y_l): {moved('eval_logps/rejected')}. "
        f"Gold success of the policy's samples: {moved('success_rate')}; KL to the reference "
        f"{end['kl_k3']:.3f} per token."
    )
