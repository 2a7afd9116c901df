"""Teacher-forced passes over a prefix tree: each distinct prompt once, followed by the responses that answer it.

A GRPO batch is G responses to each prompt, right-padded to the longest response. Run as a padded `[B, P + T]`
batch, every prompt goes through the model G times and every response is as long as the longest one. Here each
distinct prompt opens one sequence, its responses follow one after another, and a 4-D attention mask lets a
response token see its prompt and the earlier tokens of its own response, nothing else. Positions restart after
the prompt for each response. Every logit is then exactly the one a padded pass gives (float rounding aside),
for a fraction of the tokens: 8 prompts × 8 responses of the default task run 296 tokens instead of 768.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rl_core.engine.models import position_ids_from_mask

PROMPT, FILLER = -1, -2  # owners of prompt and of filler positions; a response's positions are owned by its row
PAD = -3  # `prefix_trees`: positions past a run's own tree, which see nothing (but themselves)
# A prompt's responses go on in a further sequence (the prompt repeated) beyond this length, so attention, which
# costs the square of a sequence's length, stays cheap when many long responses share a prompt.
MAX_SEQUENCE_LENGTH = 256
# Packing pays for its 4-D mask, which costs attention its fastest kernels, only when it runs at most this share of
# the tokens of the padded batch; otherwise the padded batch is run as it is.
PACKING_GAIN = 0.75


@dataclass
class PrefixTree:
    """The packed layout of a batch: `U` sequences of length `L`, one per distinct prompt (or more, for long ones);
    or the padded batch itself where packing would gain little."""

    input_ids: torch.Tensor  # [U, L]
    position_ids: torch.Tensor  # [U, L]
    # [U, 1, L, L] bool, True where a query position may attend a key position; or, for an unpacked batch, its
    # [B, L] 2-D mask
    attention_mask: torch.Tensor
    logit_index: torch.Tensor  # [B, T]: flat index into [U·L] of the position whose logits predict response token t
    real: torch.Tensor  # [U, L] bool: a prompt's or a response's token, not filler (`token_index`)


def prefix_tree(
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    prompt_length: int,
    response_mask: torch.Tensor,
    pack: bool | None = None,
    budget: int | None = None,
) -> PrefixTree:
    """Pack `[left-padded prompt | right-padded response]` rows (see `rl_core.engine.rollout`) into a prefix tree
    (`pack` None: only where that runs at most `PACKING_GAIN` of the padded batch's tokens; True: always), a
    prompt's responses going on in a further sequence past `budget` positions (default `MAX_SEQUENCE_LENGTH`;
    at least the longest row).

    Response token t of a row is predicted at its prompt's last position (t = 0) or at its own token t − 1; a
    response's last token predicts nothing sampled and is left out. Columns past a response's end point at its
    prompt's last position: their logits are finite and the response mask hides them."""
    device = sequences.device
    response_columns = response_mask.shape[1]
    prompt_ids, prompt_mask = sequences[:, :prompt_length], attention_mask[:, :prompt_length].long()
    fed = (response_mask.sum(-1).long() - 1).tolist()  # response tokens that go in as inputs, per row
    prompt_real = prompt_mask.sum(-1).tolist()
    budget = max(MAX_SEQUENCE_LENGTH if budget is None else budget, prompt_length + response_columns)
    # Rows in the order given; each joins the sequence open for its prompt, or opens one if that would grow too long.
    open_sequence: dict[tuple[int, ...], int] = {}
    first_rows, lengths, sequence_of_row, start_of_row = [], [], [], []
    for row, key in enumerate(map(tuple, torch.cat([prompt_ids, prompt_mask], dim=1).tolist())):
        sequence = open_sequence.get(key)
        if sequence is None or lengths[sequence] + fed[row] > budget:
            sequence = open_sequence[key] = len(first_rows)
            first_rows.append(row)
            lengths.append(prompt_real[row])
        sequence_of_row.append(sequence)
        start_of_row.append(lengths[sequence])
        lengths[sequence] += fed[row]
    length = max(lengths)
    steps = torch.arange(response_columns, device=device)[None, :]
    response_lengths = response_mask.sum(-1, keepdim=True)
    width = prompt_length + max(fed)
    if not pack and len(first_rows) * length > PACKING_GAIN * len(fed) * width:
        # Few prompts are shared (G = 1, say): the padded batch, cut after its last input, with a 2-D mask, runs
        # hardly more tokens and lets attention take its faster path (causal, when no prompt is padded).
        mask = torch.cat([prompt_mask, prompt_mask.new_ones((len(fed), width - prompt_length))], dim=1)
        column = torch.where(steps < response_lengths, prompt_length - 1 + steps, prompt_length - 1)
        row_start = torch.arange(len(fed), device=device)[:, None] * width
        return PrefixTree(sequences[:, :width], position_ids_from_mask(mask), mask, row_start + column, mask.bool())
    group = torch.tensor(sequence_of_row, device=device)
    start = torch.tensor(start_of_row, device=device)
    first_row = torch.tensor(first_rows, device=device)
    prompt_lengths = torch.tensor([prompt_real[row] for row in first_rows], device=device)  # [U]

    input_ids = torch.zeros((len(first_rows), length), dtype=torch.long, device=device)
    position_ids = torch.zeros_like(input_ids)
    owner = torch.full_like(input_ids, FILLER)
    # Prompts without their left padding.
    shifted = torch.arange(prompt_length, device=device)[None, :] - (prompt_length - prompt_lengths)[:, None]
    u, prompt_column = (shifted >= 0).nonzero(as_tuple=True)
    packed_column = shifted[u, prompt_column]
    input_ids[u, packed_column] = prompt_ids[first_row[u], prompt_column]
    position_ids[u, packed_column] = packed_column
    owner[u, packed_column] = PROMPT
    # Responses, each continuing the positions of its prompt.
    row, t = (steps < torch.tensor(fed, device=device)[:, None]).nonzero(as_tuple=True)
    target = (group[row], start[row] + t)
    input_ids[target] = sequences[row, prompt_length + t]
    position_ids[target] = prompt_lengths[group[row]] + t
    owner[target] = row

    causal = torch.ones((length, length), dtype=torch.bool, device=device).tril()
    keys, queries = owner[:, None, :], owner[:, :, None]
    # Filler queries see the prompt, so that no softmax row is empty; nothing reads them.
    allowed = (causal & ((keys == PROMPT) | (keys == queries)))[:, None]

    prompt_last = prompt_lengths[group][:, None] - 1
    column = torch.where((steps > 0) & (steps < response_lengths), start[:, None] + steps - 1, prompt_last)
    return PrefixTree(input_ids, position_ids, allowed, group[:, None] * length + column, owner != FILLER)


def prefix_trees(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    response_lengths: torch.Tensor,
    response_widths: torch.Tensor,
    prompt_lengths: torch.Tensor,
    mixed: bool = True,
) -> tuple[torch.Tensor, ...] | None:
    """`prefix_tree` of R batches at once, laid out as `stacked_runs.stacked_trees` lays their trees out (the same
    tensors, bit for bit): `(input_ids [R, U·L], position_ids [R, U·L], mask [R·U, 1, L, L], index [R, B, T],
    tokens [R, n] or None)`, `tokens` the positions of the trees' prompt and response tokens (`token_index`).

    Batch r is rows `[B, …]` of `prompt_ids` / `prompt_mask` `[R, B, P]` (its left-padded prompts, padded further
    on the left to the widest run's P), `response_ids` `[R, B, T]` with `response_lengths` `[R, B]` tokens each; its
    own widths are `prompt_lengths[r]` and `response_widths[r]` columns. One program for every run: a tree per run
    cost about 1 ms of Python and small ops, all 32 trees of R = 32 minibatches cost 0.11 ms per run (one
    thread; about five trees per run and step). None where the trees
    are not all plain prefix trees: no run would pack (`PACKING_GAIN`: the padded batches run as they are), some
    would not and `mixed` is False (`stacked_trees` packs them all the same; a caller that re-reads the layout of a
    run's own tree needs it) or a sequence outgrows `MAX_SEQUENCE_LENGTH` (it would be split); `stacked_trees` lays
    those out."""
    R, B, P = prompt_ids.shape
    T, device = response_ids.shape[2], prompt_ids.device
    fed = response_lengths.long() - 1  # [R, B]: response tokens that go in as inputs
    prompt_real = prompt_mask.sum(-1)
    # Rows i, j of a run answer one prompt (its ids and padding alike), compared a prompt column at a time.
    same = torch.ones((R, B, B), dtype=torch.bool, device=device)
    for column in (prompt_ids * 2 + prompt_mask).unbind(-1):
        same &= column[:, :, None] == column[:, None, :]
    # A sequence per distinct prompt, numbered in order of first appearance, as `prefix_tree` numbers them.
    row = torch.arange(B, device=device)
    first = same.byte().argmax(-1)  # [R, B]: the first row of each row's prompt
    opens = first == row
    number = opens.cumsum(-1) - 1  # at the rows that open a sequence, its number
    sequence = number.gather(1, first)
    # Each row's responses start after its prompt and the earlier rows' of its sequence.
    start = prompt_real + (same & (row[None, :] < row[:, None])).long().mul(fed[:, None, :]).sum(-1)
    length = prompt_real + same.long().mul(fed[:, None, :]).sum(-1)  # [R, B]: each row's sequence's
    per_run, run_length = opens.sum(-1), length.amax(-1)
    tokens = (opens * prompt_real).sum(-1) + fed.sum(-1)  # [R]: each tree's prompts and fed responses
    counts = torch.stack([per_run.max(), run_length.max(), tokens.max()])
    U, L, n, *rest = torch.cat([counts, per_run, run_length, fed.amax(-1), prompt_lengths.to(counts)]).tolist()
    sequences, lengths, widths, prompts = (rest[i * R : (i + 1) * R] for i in range(4))
    packs = [s * n <= PACKING_GAIN * B * (p + w) for s, n, p, w in zip(sequences, lengths, prompts, widths)]
    if not any(packs) or not (mixed or all(packs)) or L > MAX_SEQUENCE_LENGTH:
        return None
    column = torch.arange(L, device=device)
    inside = (torch.arange(U, device=device)[:, None] < per_run[:, None, None]) & (column < run_length[:, None, None])
    owner = torch.where(inside, FILLER, PAD)  # [R, U, L]
    input_ids = torch.zeros((R, U, L), dtype=torch.long, device=device)
    position_ids = torch.zeros_like(input_ids)
    # Prompts without their left padding, from the row that opens each sequence.
    shifted = torch.arange(P, device=device) - (P - prompt_real)[..., None]  # [R, B, P]
    r, i, c = (opens[..., None] & (shifted >= 0)).nonzero(as_tuple=True)
    target = (r, number[r, i], shifted[r, i, c])
    input_ids[target] = prompt_ids[r, i, c]
    position_ids[target] = target[2]
    owner[target] = PROMPT
    # Responses, each continuing the positions of its prompt.
    steps = torch.arange(T, device=device)
    r, i, t = (steps < fed[..., None]).nonzero(as_tuple=True)
    target = (r, sequence[r, i], start[r, i] + t)
    input_ids[target] = response_ids[r, i, t]
    position_ids[target] = prompt_real[r, i] + t
    owner[target] = i

    causal = torch.ones((L, L), dtype=torch.bool, device=device).tril()
    keys_, queries = owner[..., None, :], owner[..., :, None]
    allowed = causal & ((keys_ == PROMPT) | (keys_ == queries)) & (queries != PAD)
    mask = allowed | torch.eye(L, dtype=torch.bool, device=device)

    predicted = (steps > 0) & (steps < response_lengths[..., None])
    inner = torch.where(predicted, start[..., None] + steps - 1, (prompt_real - 1)[..., None])
    index = torch.where(steps < response_widths[:, None, None], sequence[..., None] * L + inner, 0)
    real = ((owner != FILLER) & (owner != PAD)).view(R, U * L)
    return input_ids.view(R, U * L), position_ids.view(R, U * L), mask.view(R * U, 1, L, L), index, token_index(real, n)


def token_index(real: torch.Tensor, tokens: int) -> torch.Tensor | None:
    """`[R, tokens]`: the positions of each run's `real` `[R, M]` tokens in order, then M (a slot past the layout)
    for a run with fewer; None where every position is real. A layout's filler and the padding to the widest run
    are about a third of its positions in a group of eight or more (0.65–0.69 of them real: 140 of 216 at R = 10),
    and a stacked pass runs its MLPs, two thirds of its arithmetic, on these positions only
    (`StackedGPT2._block`)."""
    positions = real.shape[1]
    if tokens >= positions:
        return None
    order = torch.argsort((~real).to(torch.int8), dim=1, stable=True)[:, :tokens]
    return torch.where(real.gather(1, order), order, positions)
