"""Training itself: the models built from configs, the tokenizer, sampling and teacher-forced passes, the SFT warm
start, the trainer that runs one RL step as named phases over the formulas, batches of runs stepped as one, the
reward model and DPO fits, and talking to a trained policy or reward model."""
