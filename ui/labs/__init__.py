"""Tables and figures for the Labs pages: exact, model-free pictures of single formulas, one module per lab.

Every number comes from the rl_core function that training calls, and every gradient from autograd through
that function, so a picture can never drift from the engine. Builders take plain Python values and return
DataFrames, strings or plotly figures: the tests check them without Streamlit and the pages stay thin.
"""
