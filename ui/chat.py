"""Talk to a run: once a run of the page has ended, a prompt and what the reference (the SFT warm start, before RL)
and the trained policy (after RL) answer to it, side by side, with the likeliest tokens at every position of each
answer; and one decision of a fixed prompt (the run's probe) moving over the run's steps, as an animation.

The prompt and its answers are a fragment, so typing a prompt redraws only them. The answers come from the models the
job keeps (`Job.chat_models`), the animation from the probe it recorded at every step (`Job.probe`); a page whose fit
runs in its own script (DPO's) hands `talk` its models and probe itself."""

from __future__ import annotations

import html
from collections.abc import Callable

import plotly.graph_objects as go
import streamlit as st

from rl_core.engine.chat import Answer, ChatModels, Probe, check_prompt, example_prompts
from rl_core.messages import brief
from toy_tasks import get_task
from toy_tasks.base import ExactAnswerTask
from ui.dashboard import follow_newest
from ui.jobs import Job
from ui.runs import labels
from ui.tokens import EOS_TOKEN

MAX_FRAMES = 100  # an animation of a longer run shows evenly spaced steps, the first and the last among them
DECODING = ("greedy", "sampled")


def talk_to_run(page: str) -> None:
    """The "Talk to this run" section of an algorithm page, drawn once one of its runs has ended: the prompt and
    its answers are a fragment of their own, so that a prompt redraws neither the page nor the animation."""
    runs: list[Job] = st.session_state.get(f"{page}:runs", [])
    ended = [job for job in runs if not job.active and job.chat_models() is not None]
    if not ended:
        return
    st.subheader("Talk to this run")
    names = labels(runs)
    key = f"{page}:chat_run"
    follow_newest(key, [job.number for job in ended])
    if len(ended) > 1:
        st.selectbox(
            "run",
            [job.number for job in ended],
            key=key,
            format_func=lambda n: names[n],
            help="Which ended run to ask; its reference is its own SFT warm start.",
        )
    job = next(job for job in ended if job.number == st.session_state[key])
    talk(page, job.chat_models, ("Before RL: the reference (SFT)", f"After RL: run #{job.number}"), *job.probe())


def talk(
    page: str,
    models: Callable[[], ChatModels | None],
    titles: tuple[str, str],
    probe: Probe | None,
    history: list[tuple[int, list[float]]],
    judge: Callable[[str, str], bool] | None = None,
) -> None:
    """A prompt and what the reference and the trained policy (`models()`, read at each redraw: the server may let
    them go) answer, headed by `titles` (before, after), in a fragment; then the probe's animation over `history`.
    For a task without one right answer, `judge(prompt, text)` marks the answers its gold judge accepts."""
    st.fragment(_talk, key=f"{page}-chat")(page, models, titles, judge)
    _probe_animation(page, probe, history)


def shown(token: str) -> str:
    """A token as the chat writes it: EOS as ⏎, a space as ␣."""
    return "⏎" if token == EOS_TOKEN else "␣" if token == " " else token


def _talk(
    page: str, kept: Callable[[], ChatModels | None], titles: tuple[str, str], judge: Callable[[str, str], bool] | None
) -> None:
    models = kept()
    if models is None:  # let go by the server between the list above and now
        st.info("This run's models are no longer kept on the server; train it again to talk to it.")
        return
    typed_column, examples_column, decoding_column, seed_column = st.columns([3, 4, 2, 1])
    decoding = decoding_column.radio(
        "decoding",
        DECODING,
        key=f"{page}:chat_decoding",
        horizontal=True,
        help="Greedy takes the likeliest token at every position; sampled draws from the policy at the run's "
        "temperature, with the seed, as the run's sampler draws.",
    )
    seed = seed_column.number_input("seed", 0, 10_000, 0, key=f"{page}:chat_seed", disabled=decoding == "greedy")
    prompt_key = f"{page}:chat_prompt"
    examples = example_prompts(models.task)
    # A run of another task, or a box whose state Streamlit dropped while the section was not drawn: one of the
    # task's prompts, not an empty box.
    if st.session_state.get(f"{page}:chat_task") != models.task or prompt_key not in st.session_state:
        st.session_state[f"{page}:chat_task"] = models.task
        st.session_state[prompt_key] = examples[0]
    typed = typed_column.text_input(
        "prompt", key=prompt_key, help=f"A prompt of task {models.task}, like the ones it trained on."
    )
    examples_column.pills(
        "examples",
        examples,
        key=f"{page}:chat_example",
        on_change=_use_example,
        args=(page,),
        help="Put an example prompt of the task in the box.",
    )
    try:
        prompt = check_prompt(models.task, typed)
    except ValueError as error:
        st.error(brief(str(error)))
    else:
        _answers(page, models, prompt, None if decoding == "greedy" else int(seed), titles, judge)


def _use_example(page: str) -> None:
    chosen = st.session_state.get(f"{page}:chat_example")
    if chosen:
        st.session_state[f"{page}:chat_prompt"] = chosen
        st.session_state[f"{page}:chat_example"] = None  # so that the same example can be picked again later


def _answers(
    page: str,
    models: ChatModels,
    prompt: str,
    seed: int | None,
    titles: tuple[str, str],
    judge: Callable[[str, str], bool] | None,
) -> None:
    reference, policy = models.answers(prompt, seed)
    task = get_task(models.task)
    right = task.answer(prompt) if isinstance(task, ExactAnswerTask) else None
    if right is not None:
        st.caption(f"The right answer to `{prompt}` is `{right}`.")
        judge = lambda _, text: text == right  # noqa: E731 - the task's one right answer is its judge
    elif judge is not None:
        st.caption(
            "✓ marks an answer the task's gold judge accepts, ✗ one it rejects (an answer cut at the length "
            "limit never counts)."
        )
    sides = (("reference", titles[0], reference), ("policy", titles[1], policy))
    for column, (side, title, said) in zip(st.columns(2), sides):
        with column:
            verdict = "" if judge is None else (" ✓" if said.ended and judge(prompt, said.text) else " ✗")
            cut = "" if said.ended else " (cut at the length limit)"
            heading = f"{title} answers <b>{html.escape(said.text) or '(nothing)'}</b>{verdict}{cut}"
            # A key of its own: before and after RL can answer alike, and two equal charts need two keys.
            st.plotly_chart(
                top_tokens_figure(said, heading), key=f"{page}:chat_top:{side}", config={"displayModeBar": False}
            )
    st.caption(
        "Each column is one position of the answer; its cells are the likeliest tokens there, likeliest on "
        "top, coloured by probability. The first row is the token taken unless the answer was sampled."
    )


def top_tokens_figure(said: Answer, title: str) -> go.Figure:
    """A heatmap: x the answer's positions (labelled with the token taken), y the rank, text token and probability."""
    k = len(said.top[0])
    columns = [f"{t + 1}: {shown(token)}" for t, token in enumerate(said.tokens)]
    z = [[said.top[t][rank][1] for t in range(len(said.tokens))] for rank in range(k)]
    text = [
        [f"{shown(said.top[t][rank][0])} {said.top[t][rank][1]:.2f}" for t in range(len(said.tokens))]
        for rank in range(k)
    ]
    trace = {
        "type": "heatmap",
        "x": columns,
        "y": [f"#{rank + 1}" for rank in range(k)],
        "z": z,
        "text": text,
        "texttemplate": "%{text}",
        "zmin": 0,
        "zmax": 1,
        "colorscale": [[0, "#f7fbff"], [1, "#2166ac"]],
        "showscale": False,
        "hovertemplate": "position %{x}<br>%{text}<extra></extra>",
    }
    layout = {
        "title": {"text": title},
        "height": 100 + 34 * k,
        "margin": {"l": 40, "r": 10, "t": 50, "b": 40},
        "yaxis": {"autorange": "reversed"},
        "xaxis": {"type": "category"},
    }
    return go.Figure(data=[trace], layout=layout, _validate=False)


def _probe_animation(page: str, probe: Probe | None, history: list[tuple[int, list[float]]]) -> None:
    if probe is None or len(history) < 2:
        return
    st.markdown(
        f"**One decision over the run.** After `{probe.prompt}{probe.context}` the reference was least sure "
        "of its next token; press ▶ to watch the policy's distribution there move, step by step."
    )
    st.plotly_chart(probe_figure(probe, history), key=f"{page}:chat_probe", config={"displayModeBar": False})


def probe_figure(probe: Probe, history: list[tuple[int, list[float]]]) -> go.Figure:
    """Bars of the probed tokens' probabilities (and "other"): the policy at each kept step (at most MAX_FRAMES
    frames, the first and last included) over the reference's, with a step slider and a play button."""
    stride = max(1, -(-len(history) // MAX_FRAMES))
    frames = history[::stride] if (len(history) - 1) % stride == 0 else [*history[::stride], history[-1]]
    x = [shown(token) for token in probe.tokens] + ["other"]
    before = {"type": "bar", "x": x, "y": history[0][1], "name": "reference (step 0)", "marker": {"color": "#bbbbbb"}}

    # The slider alone names the policy's step: plotly redraws a frame's legend one frame late, so a legend that
    # named it read step 7 beside the slider's 8 while playing.
    def policy(probabilities: list[float]) -> dict:
        return {
            "type": "bar",
            "x": x,
            "y": probabilities,
            "name": "policy at the slider's step",
            "marker": {"color": "#1f77b4"},
            "texttemplate": "%{y:.2f}",
            "textposition": "outside",
            "cliponaxis": False,
        }

    slider = {
        # The grip jumps to each step, as the value above it does: plotly's default glide left it a tick behind.
        "active": len(frames) - 1,
        "currentvalue": {"prefix": "step "},
        "transition": {"duration": 0},
        "x": 0.08,
        "len": 0.92,
        "y": 0,
        "yanchor": "top",
        "pad": {"t": 40},
        "steps": [
            {
                "label": str(step),
                "method": "animate",
                "args": [[str(step)], {"mode": "immediate", "frame": {"duration": 0, "redraw": True}}],
            }
            for step, _ in frames
        ],
    }
    # No transition between frames: plotly's default one (500 ms) outlasts a frame, so the bars would lag the slider.
    play = {
        "type": "buttons",
        "showactive": False,
        "x": 0.07,
        "y": 0,
        "xanchor": "right",
        "yanchor": "top",
        "pad": {"t": 75},
        "buttons": [
            {
                "label": "▶",
                "method": "animate",
                "args": [
                    None,
                    {"frame": {"duration": 120, "redraw": True}, "transition": {"duration": 0}, "fromcurrent": False},
                ],
            }
        ],
    }
    layout = {
        "height": 440,
        "barmode": "group",
        "margin": {"l": 50, "r": 10, "t": 60, "b": 110},
        "title": {"text": f"The next token after {probe.prompt}{probe.context}"},
        "yaxis": {"range": [0, 1.1], "title": {"text": "probability"}},
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        "sliders": [slider],
        "updatemenus": [play],
    }
    return go.Figure(
        data=[before, policy(frames[-1][1])],
        frames=[{"name": str(step), "data": [before, policy(probabilities)]} for step, probabilities in frames],
        layout=layout,
        _validate=False,
    )
