"""Talk to a fitted reward model: a prompt and two responses (typed, or a held-out pair picked), each one's score,
which the model prefers and by what margin, beside the gold judge; and how it ranks the SFT policy's own samples for
that prompt. The section is a fragment: typing redraws only it. The engine is `rl_core.engine.reward_chat`."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from rl_core.engine.chat import check_prompt
from rl_core.engine.preference_optimisation import preference_warm_start
from rl_core.engine.reward_chat import N_SAMPLES, PairJudgement, check_response, judge_pair, rank_policy_samples
from rl_core.engine.reward_model import PreferencePair
from rl_core.messages import brief
from toy_tasks import get_task
from toy_tasks.preference import gold_quality, gold_success

TASK = "preference"
EXAMPLE_PAIRS = 4  # held-out pairs offered to pick
SIDES = ("A", "B")


def talk_to_reward_model(page: str, fit: dict | None) -> None:
    """The section, once a fit has trained a step (a stopped fit's model is talked to as it stands)."""
    if fit is None or not fit["records"]:
        return
    st.subheader("Talk to this reward model")
    st.caption(
        "A reward model answers nothing; it scores a response to a prompt. Type a prompt and two responses, "
        "or pick a held-out pair (one the model never trained on)."
    )
    st.fragment(_talk, key=f"{page}-reward-chat")(page, fit)


def _talk(page: str, fit: dict) -> None:
    pairs: list[PreferencePair] = fit["pairs"][:EXAMPLE_PAIRS]
    keys = [f"{page}:chat_prompt", *(f"{page}:chat_response_{side}" for side in SIDES)]
    if keys[0] not in st.session_state:
        _fill(page, pairs[0])
    st.pills(
        "held-out pairs",
        range(len(pairs)),
        key=f"{page}:chat_pair",
        on_change=_use_pair,
        args=(page, pairs),
        format_func=lambda i: f"{pairs[i].prompt} {pairs[i].chosen or '∅'} vs {pairs[i].rejected or '∅'}",
        help="Put a held-out pair in the boxes: the labelled chosen response as A, the rejected one as B.",
    )
    prompt_column, *response_columns = st.columns([2, 3, 3])
    typed = prompt_column.text_input("prompt", key=keys[0], help="A name, then '>', as the task's prompts.")
    responses = [
        column.text_input(f"response {side}", key=key, help="Scored as typed, EOS appended.")
        for column, side, key in zip(response_columns, SIDES, keys[1:])
    ]
    try:
        prompt = check_prompt(TASK, typed)
        first, second = (check_response(TASK, text) for text in responses)
    except ValueError as error:
        st.error(brief(str(error)))
        return
    judgement = judge_pair(fit["model"], fit["tokenizer"], prompt, first, second)
    st.dataframe(pair_table(judgement), hide_index=True, key=f"{page}:chat_pair_table")
    st.caption(pair_verdict(judgement))
    label = next((p for p in pairs if (p.prompt, p.chosen, p.rejected) == (prompt, first, second)), None)
    if label is not None:
        st.caption(
            f"The labeller chose A in the data; a share {fit['settings']['label_noise']:g} of the labels "
            "was flipped at random, so a label can disagree with the gold judge."
        )
    _samples(page, fit, prompt)


def _fill(page: str, pair: PreferencePair) -> None:
    st.session_state[f"{page}:chat_prompt"] = pair.prompt
    for side, response in zip(SIDES, (pair.chosen, pair.rejected)):
        st.session_state[f"{page}:chat_response_{side}"] = response


def _use_pair(page: str, pairs: list[PreferencePair]) -> None:
    chosen = st.session_state.get(f"{page}:chat_pair")
    if chosen is not None:
        _fill(page, pairs[chosen])
        st.session_state[f"{page}:chat_pair"] = None  # so that the same pair can be picked again later


def pair_table(judgement: PairJudgement) -> pd.DataFrame:
    """One row per response: the reward model's score, the gold judge's quality and verdict."""
    return pd.DataFrame(
        [
            {
                "response": side,
                "text": response,
                "reward model score r": round(score, 3),
                "gold quality": gold_quality(judgement.prompt, response),
                "gold verdict": gold_success(judgement.prompt, response),
            }
            for side, response, score in zip(SIDES, judgement.responses, judgement.scores)
        ]
    )


def pair_verdict(judgement: PairJudgement) -> str:
    """The model's preference in Bradley-Terry's terms, and whether the gold judge agrees."""
    qualities = [gold_quality(judgement.prompt, response) for response in judgement.responses]
    gold = None if qualities[0] == qualities[1] else int(qualities[1] > qualities[0])
    if judgement.preferred is None:
        model = "The reward model scores A and B alike: to it the pair is a coin toss, σ(0) = 0.5."
    else:
        winner, loser = SIDES[judgement.preferred], SIDES[1 - judgement.preferred]
        model = (
            f"The reward model prefers {winner}: r_{winner} − r_{loser} = {judgement.margin:.3f}, so under "
            f"Bradley-Terry P({winner} ≻ {loser}) = σ({judgement.margin:.3f}) = {judgement.probability:.3f}."
        )
    if gold is None:
        return f"{model} The gold judge ties them (quality {qualities[0]} each)."
    agreement = "agrees" if gold == judgement.preferred else "disagrees"
    return (
        f"{model} The gold judge prefers {SIDES[gold]} (quality {qualities[gold]} against "
        f"{qualities[1 - gold]}): the model {agreement}."
    )


def _samples(page: str, fit: dict, prompt: str) -> None:
    seed = fit["settings"]["seed"]
    if not st.toggle(
        f"Rank {N_SAMPLES} samples of the SFT policy for {prompt}",
        key=f"{page}:chat_samples",
        help=f"The policy RL would start from (seed {seed}); loading it trains it first when it is "
        "new, about 15 s, once.",
    ):
        return
    if fit.get("sft") is None:
        with st.spinner("Loading the SFT policy …"):
            fit["sft"] = preference_warm_start(get_task(TASK), seed)
    task = get_task(TASK)
    ranked = rank_policy_samples(fit["model"], fit["sft"], fit["tokenizer"], prompt, task.max_new_tokens, seed)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "rank": rank,
                    "response": sample.response + (" (cut)" if sample.truncated else ""),
                    "drawn": sample.count,
                    "reward model score r": round(sample.score, 3),
                    "gold quality": gold_quality(prompt, sample.response),
                    "gold verdict": not sample.truncated and gold_success(prompt, sample.response),
                }
                for rank, sample in enumerate(ranked, 1)
            ]
        ),
        hide_index=True,
        key=f"{page}:chat_sample_table",
    )
    st.caption(
        f"{N_SAMPLES} responses drawn at temperature 1 with seed {seed}, as RL's sampler draws them; each "
        "distinct one once, best score first. RL pushes the policy toward the top rows: where the gold "
        "judge rates them lower, that is where over-optimisation starts."
    )
