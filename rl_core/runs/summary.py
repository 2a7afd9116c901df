"""What a comparison says: each run's outcome, their mean ± std per group across seeds, and CSV export.

A group is a label (the preset, plus the grid values of an ablation); its runs differ only in the seed.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable
from typing import TextIO

from rl_core.runs.store import StoredRun

SUCCESS_TARGET = 0.9

# outcome → its column title; the order of the printed table
OUTCOMES = {
    "final_success": "final success",
    "steps_to_target": f"steps to {SUCCESS_TARGET:.0%}",
    "seconds_to_target": f"s to {SUCCESS_TARGET:.0%}",
    "kl_final": "KL at end",
    "entropy_final": "entropy at end",
    "wall_time": "wall s",
}
# outcomes that only exist for the runs that got there; the table says how many did
REACHED = ("steps_to_target", "seconds_to_target")


def run_outcome(run: StoredRun, records: list[dict]) -> dict:
    """One run's outcome from its stored row and step records.

    * final success: the success rate of the trained policy on 256 fresh prompts (NaN if the run did not finish);
    * steps / seconds to 90 %: the first step whose batch reached it, and the seconds of RL until then;
    * KL and entropy at the end: the last step's exact per-token KL to the reference and token entropy;
    * wall time: start of training (setup included) to its end."""
    reached = next((r for r in records if r.get("success_rate", 0.0) >= SUCCESS_TARGET), None)
    last = records[-1] if records else {}
    return {
        "final_success": (run.final or {}).get("success_rate", math.nan),
        "steps_to_target": reached["step"] if reached else math.nan,
        # Runs trained before records carried `elapsed` (the live lab's, once) have no seconds to tell.
        "seconds_to_target": reached.get("elapsed", math.nan) if reached else math.nan,
        "kl_final": last.get("kl_exact", math.nan),
        "entropy_final": last.get("entropy", math.nan),
        "wall_time": run.wall_time,
    }


def run_row(run: StoredRun, records: list[dict]) -> dict:
    """The run's identity, status and outcome: one row of a per-run table."""
    return {
        "run": run.id,
        "label": run.label,
        "algo": run.algo,
        "seed": run.seed,
        **run.variant,
        "status": run.status,
        "steps": run.steps_done,
        **run_outcome(run, records),
    }


def summarise(rows: Iterable[dict]) -> list[dict]:
    """Per label, in order of first appearance: the number of seeds and the mean and sample std of every outcome
    over the seeds that have it (std 0 for a single value), plus how many reached the success target."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["label"], []).append(row)
    summary = []
    for label, members in groups.items():
        entry = {"label": label, "algo": members[0]["algo"], "seeds": len(members)}
        for name in OUTCOMES:
            values = [m[name] for m in members if not math.isnan(m[name])]
            entry[f"{name}_mean"] = statistics.fmean(values) if values else math.nan
            entry[f"{name}_std"] = statistics.stdev(values) if len(values) > 1 else (0.0 if values else math.nan)
        entry["reached_target"] = sum(not math.isnan(m["steps_to_target"]) for m in members)
        summary.append(entry)
    return summary


def format_table(summary: list[dict]) -> str:
    """The summary as aligned text: mean ± std per outcome; "(2/3)" where not every seed reached the target."""
    header = ["group", "seeds", *OUTCOMES.values()]
    lines = []
    for entry in summary:
        cells = [entry["label"], str(entry["seeds"])]
        for name in OUTCOMES:
            mean, std = entry[f"{name}_mean"], entry[f"{name}_std"]
            cell = "—" if math.isnan(mean) else f"{mean:.3g} ± {std:.2g}"
            if name in REACHED and entry["reached_target"] < entry["seeds"]:
                cell = "not reached" if math.isnan(mean) else f"{cell} ({entry['reached_target']}/{entry['seeds']})"
            cells.append(cell)
        lines.append(cells)
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
        for row in [header, ["-" * w for w in widths], *lines]
    )


def write_csv(file: TextIO, rows: list[dict], first: Iterable[str] = ()) -> None:
    """Rows as CSV: the `first` columns, then every other key in order of first appearance; NaN as empty."""
    columns = list(dict.fromkeys([*first, *(key for row in rows for key in row)]))
    writer = csv.DictWriter(file, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()})
