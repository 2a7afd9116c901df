"""Everything the pages share: training jobs, the knob table, charts, the token view, the lab and the
formula-beside-code block. Pages stay thin: their story, which formulas to show, which preset and knobs."""
