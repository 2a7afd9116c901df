"""How each page fits a screen: its height before training, and where Train and the first chart sit.

Starts `streamlit run app.py`, opens every page in Debian's Chromium at a given viewport (default 1366 × 768,
a common laptop), and prints per page the scroll height of the main area, the bottom edge of the Train button
and the top edge of the first live chart (or "none"), all in CSS pixels from the top of the page. A page whose
Train bottom and first-chart top are both below the viewport's height needs scrolling to see knob and effect.
With `--train PAGE` it also trains that page for a few steps and reports its height afterwards.

Run from the repository root:  python bench/page_layout.py [--width 1366 --height 768] [--train grpo]
                               [--json bench/results/layout.json] [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from app_driver import PAGES, browser_page, open_page, serve_app, wait_for_chart_points  # noqa: E402

MEASURE = """() => {
    const main = document.querySelector('[data-testid="stMain"]');
    const top = main.scrollTop;  // positions are from the top of the page, not of the scrolled view
    const box = el => el ? {top: el.getBoundingClientRect().top + top,
                            bottom: el.getBoundingClientRect().bottom + top} : null;
    const train = Array.from(document.querySelectorAll('button')).find(b => b.innerText.trim() === 'Train');
    const chart = document.querySelector('[data-testid="stMain"] .js-plotly-plot');
    return {height: main.scrollHeight, train_bottom: box(train)?.bottom ?? null,
            chart_top: box(chart)?.top ?? null};
}"""


def measure(args) -> dict:
    cache = Path(tempfile.mkdtemp(prefix="rlhf-lab-layout-"))
    env = {"RLHF_LAB_CACHE": str(cache), "RLHF_LAB_DB": str(cache / "runs.sqlite"), "RLHF_LAB_WARM_START": "0"}
    result: dict = {"viewport": [args.width, args.height], "pages": {}}
    viewport = {"width": args.width, "height": args.height}
    with serve_app(cache / "streamlit.log", env) as (url, _), browser_page(viewport) as page:
        for path, heading in PAGES.items():
            if args.pages and (path or "overview") not in args.pages:
                continue
            open_page(page, f"{url}/{path}", heading)
            page.wait_for_timeout(1000)
            result["pages"][path or "overview"] = page.evaluate(MEASURE)
            if args.screenshots:
                args.screenshots.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=args.screenshots / f"{path or 'overview'}-{args.width}x{args.height}.png")
        if args.train:
            open_page(page, f"{url}/{args.train}", PAGES[args.train])
            page.get_by_test_id("stMainBlockContainer").get_by_role("button", name="Train", exact=True).click()
            wait_for_chart_points(page)
            page.get_by_text("Finished").first.wait_for(timeout=300_000)
            page.wait_for_timeout(1500)
            result["trained"] = {args.train: page.evaluate(MEASURE)}
            if args.screenshots:
                page.screenshot(path=args.screenshots / f"{args.train}-trained-{args.width}x{args.height}.png")
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1366)
    parser.add_argument("--height", type=int, default=768)
    parser.add_argument("--train", help="also train this page (URL path, e.g. grpo) and measure it afterwards")
    parser.add_argument("--pages", nargs="*", help="only these pages (URL paths; overview for the first)")
    parser.add_argument("--screenshots", type=Path, help="save a first-viewport screenshot of every page here")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    result = measure(args)
    print(f"viewport {args.width} × {args.height} (CSS px)")
    print(f"{'page':<20}{'height':>8}{'Train bottom':>14}{'chart top':>11}  first viewport")
    rows = [*result["pages"].items(), *((f"{k} (trained)", v) for k, v in result.get("trained", {}).items())]
    for name, m in rows:
        cells = [f"{m[k]:.0f}" if m[k] is not None else "none" for k in ("height", "train_bottom", "chart_top")]
        fits = m["train_bottom"] is not None and m["train_bottom"] <= args.height
        fits = fits and m["chart_top"] is not None and m["chart_top"] < args.height
        print(f"{name:<20}{cells[0]:>8}{cells[1]:>14}{cells[2]:>11}  {'Train + chart' if fits else '-'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        print(f"report written to {args.json}")


if __name__ == "__main__":
    main()
