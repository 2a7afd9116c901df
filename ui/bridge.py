"""The bridge from a lab run to the tools practitioners use: the knobs as TRL / verl / OpenRLHF configuration, and a
finished run as a UNIPO log. The pages call one function each; everything they show comes from rl_core."""

from __future__ import annotations

import dataclasses
import json

import streamlit as st

from rl_core.bridge.export_frameworks import export_config
from rl_core.bridge.export_unipo import unipo_document
from rl_core.config import RunConfig
from ui.jobs import Job

FORMATS = {
    "TRL GRPOConfig (Python)": ("trl", "python", "py"),
    "verl overrides (bash)": ("verl", "bash", "sh"),
    "OpenRLHF flags (bash)": ("openrlhf", "bash", "sh"),
}


def scale_exports(page: str, run: RunConfig) -> None:
    """These knobs as TRL, verl or OpenRLHF configuration, shown and downloadable; a knob that does not map is a
    comment.
    Drawn into the caller's container (the live lab's Share popover)."""
    st.markdown("**Take it to scale:** these knobs as TRL 1.16, verl 0.9 or OpenRLHF 0.11 configuration")
    choice = st.radio("format", list(FORMATS), key=f"{page}:export_format", horizontal=True)
    framework, language, suffix = FORMATS[choice]
    try:
        text = export_config(run.algo, framework, run.task)
    except ValueError as error:
        st.info(str(error))
        return
    st.caption("Every knob appears once: as a setting, or as a comment saying why it does not map.")
    st.code(text, language=language)
    st.download_button(
        f"Download {choice}", text, file_name=f"{run.algo.name}-{framework}.{suffix}", key=f"{page}:export_download"
    )


def job_unipo(job: Job) -> dict | None:
    """A job's run as a UNIPO document: every step the dashboard kept, each with the sampled responses it kept
    (the run store keeps every step's: `python -m rl_core export-unipo --run ID`)."""
    snap = job.snapshot()
    if not snap.records:
        return None
    records = [record | {"samples": snap.samples.get(record["step"], [])} for record in snap.records]
    return unipo_document(dataclasses.asdict(job.run), records)


def unipo_download(page: str, job: Job) -> None:
    """The run as a UNIPO log, for UNIPO's viewer."""
    document = job_unipo(job)
    if document is None:
        return
    st.download_button(
        "Download run (UNIPO log, JSON)",
        json.dumps(document),
        file_name=f"{page}-{job.run.algo.name}-unipo.json",
        mime="application/json",
        key=f"{page}:unipo",
        help="UNIPO's canonical schema: every step's metrics and its sampled responses token by token.",
    )
