"""rl_core: a small, exact engine for RLHF policy optimisation on tiny GPT-2 policies."""
