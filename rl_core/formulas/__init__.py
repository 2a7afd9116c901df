"""The spec's formulas as pure functions over `[B, T]` tensors: advantages, policy and value losses, KL estimators,
aggregation, masking, reward shaping, rollout correction, diagnostics. No `torch.nn.Module` state, no I/O, nothing
from the engine, the run machinery or the bridge: each can be read and tested against docs/ALGORITHMS.md alone."""
