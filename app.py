"""The app's router: `streamlit run app.py`. Its pages and their sections are the table in ui/navigation.py; a page
is one file under app_pages/ (not pages/, which Streamlit reserves for its legacy page folder)."""

import streamlit as st

from rl_core.algorithms import PRESETS
from rl_core.config import RunConfig
from toy_tasks import DEFAULT_TASK
from ui.classroom import mark_seen, pinned_banner
from ui.instructor import authorised, with_instructor_page
from ui.jobs import start_server_upkeep, warm_default_start
from ui.navigation import navigation
from ui.present import presenter_switch
from ui.session import join_class_link, remember_learner

st.set_page_config(page_title="RLHF policy optimisation lab", page_icon=":material/tune:", layout="wide")
# A page is an instrument: at 1366 × 768 its Train button, lesson knobs and first chart share the first screen.
# Streamlit's default 6 rem of space above the content and its 2.75 rem title would take a fifth of that.
st.html(
    "<style>.block-container{padding-top:3.5rem;padding-bottom:2rem}"
    "h1{font-size:1.9rem !important;padding:0.25rem 0 0.5rem !important}"
    # A toggle's label is one line cut with "…" (Streamlit's default), which hides the knob's name in a third of a
    # 1024-pixel screen; wrapped, as the other widgets' labels are, it stays whole.
    "[data-testid=stCheckbox] .stMarkdownEllipsis,[data-testid=stCheckbox] .stMarkdownEllipsis p"
    "{white-space:normal !important;overflow:visible !important}</style>"
)
presenter_switch()  # ?present=1: larger text and charts for a projector

# Runs a dead server left queued or running end as interrupted before anyone reads them (their pages say so).
start_server_upkeep()
# The default page's first Train should not wait for a supervised warm start: build it while the learner reads.
warm_default_start(RunConfig(algo=PRESETS["grpo"], task=DEFAULT_TASK))
# Navigation in the top bar, not a sidebar: the sidebar would take a quarter of a laptop screen's width.
# The instructor's page exists only where the server has an instructor's token (ui/instructor.py).
page = st.navigation(with_instructor_page(navigation()), position="top")
join_class_link()  # ?class=<code>: this learner may train where the class needs its join link
if not authorised():  # a learner: counted as present, and shown the link the instructor pinned
    mark_seen()
    pinned_banner()
page.run()
# After the page, so that its first screen is drawn first: the learner's token into the browser's cookie.
remember_learner()
