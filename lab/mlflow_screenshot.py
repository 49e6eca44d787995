"""Look at the MLflow UI as a user comparing runs would, in headless Chromium, and keep screenshots of what it shows.

Starts `mlflow ui` on the store of a finished `dvc repro`, waits for it, then, in a real browser:
1. the experiment's run list (`cory-<profile>`, in the "Model training" view: MLflow 3 opens an experiment on its
   GenAI pages) with the pipeline's parent run expanded: the training runs, named "<group>/<run>/seed<k>", nested
   under "pipeline <commit>"; then the same list searched with `tags.superseded != "true"` (the current runs only);
2. the comparison view (`#/compare-runs?runs=[...]&experiments=[...]`) of two runs of one group (default: imdb's
   ppo and cory, seed 0), with "Show diff only" on for params and tags: the params that differ between them;
3. the metric page of `--metric` (default llm1/task_reward) for both runs: one line per run;
4. the second run's artifact viewer on `samples.json`: the generations as a table (iteration, phase, agent, ...);
5. the parent run's page: its description, the headline numbers, one row per "<group>/<run>";
6. the runs table in the view the report stage shares (`?viewStateShareKey=headline`): the headline numbers and
   llm1/task_reward, llm1/kl as columns, written (small) to --view-out.
Each page is checked; a failed check is printed and makes the exit status 1. The comparison view, down to its
Artifacts section, is written to --out (reduced to 256 colours or scaled down past --max-kb), the other pages, full
size, to --shots. The UI is stopped at the end.

Run it from the project root after `dvc repro` (any profile; smoke takes a few minutes on CPU):

    python -m venv /tmp/pw && /tmp/pw/bin/pip install playwright pillow
    /tmp/pw/bin/python -m lab.mlflow_screenshot        # writes reports/mlflow/compare_runs.png, /tmp/mlflow_shots/

It needs Chromium at /usr/bin/chromium (Debian: `apt-get install chromium`; `playwright install` is not used) and
the `playwright` package (Pillow, optional, crops and shrinks the comparison view); neither is a project
dependency. It uses only the standard library besides them (the runs are found through the UI server's REST API),
so any Python with playwright runs it; `mlflow` is the project venv's (.venv/bin/mlflow) unless --mlflow names
another.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import urllib.parse
from pathlib import Path

from lab.mlflow_ui import (CHROMIUM_FLAGS, PROJECT_ROOT, SAMPLES_COLUMNS, Checks, api, close_assistant, crop_png,
                           current_runs, default_mlflow, default_profile, full_page, settle, shrink_png, start_ui,
                           stop_ui, text, wait_for)


def run_list(page, base: str, experiment_id: str, parent: dict | None, trained: list[dict], runs: list[dict],
             shots: Path, check: Checks) -> None:
    # ?workflowType=machine_learning: MLflow 3 opens an experiment on its GenAI (traces) pages unless the user has
    # picked "Model training" at the top left; this is that switch.
    page.goto(f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning")
    settle(page, 4)
    close_assistant(page)
    body = text(page, parent["info"]["run_name"] if parent else "")
    check(parent is not None and parent["info"]["run_name"] in body,
          f"run list shows the pipeline's parent run {parent and parent['info']['run_name']!r}")
    # the +/- button before the parent's name shows the runs nested under it
    page.locator(".ag-row button[data-component-id*='runnamecellrenderer']").first.click()
    settle(page, 2)
    # the Run Name column is narrow by default: drag its edge so that "<group>/<run>/seed<k>" is readable
    box = page.locator(".ag-header-cell[col-id='attributes.`Run Name`']").first.bounding_box()
    if box:
        x, y = box["x"] + box["width"] - 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y)
        page.wait_for_timeout(200)
        page.mouse.down()
        page.mouse.move(x + 60, y, steps=4)
        page.mouse.move(x + 110, y, steps=4)
        page.mouse.up()
        page.mouse.move(box["x"], box["y"] + 600)  # away from the header, whose tooltip would show
        page.wait_for_timeout(500)
    body = text(page, *(run["info"]["run_name"] for run in trained))
    shown = [run["info"]["run_name"] for run in trained if run["info"]["run_name"] in body]
    check(len(shown) == len(trained), f"run list shows the {len(trained)} training runs by name "
                                      f"<group>/<run>/seed<k> once the parent is expanded ({len(shown)} seen)")
    full_page(page, shots / "run_list.png")
    # only the current runs: the filter the README gives (cory.tracking tags every run superseded=false|true)
    search = page.get_by_placeholder(re.compile("metrics"))
    if search.count():
        search.first.fill('tags.superseded != "true"')
        search.first.press("Enter")
        settle(page, 3)
        current = {run["info"]["run_id"] for run in runs if run["tags"].get("superseded") == "false"}
        # the UI keeps the tree: it also lists the parent of a run that matches (an older pipeline's, for a run
        # logged before stage runs had keys)
        parents = {run["tags"].get("mlflow.parentRunId") for run in runs if run["info"]["run_id"] in current}
        expected = len(current) + len(parents - current - {None})
        match = re.search(r"(\d+)\s+matching runs", text(page, f"{expected} matching runs", timeout=10))
        check(bool(current) and match is not None and int(match.group(1)) == expected,
              f'run list filtered on tags.superseded != "true" shows the {len(current)} current runs '
              f"({match.group(1) if match else '?'} rows, {expected} expected with their parents)")
        full_page(page, shots / "run_list_current.png")


def compare(page, base: str, experiment_id: str, runs: list[dict], metric: str, out: Path, max_kb: int,
            shots: Path, check: Checks) -> None:
    ids = json.dumps([run["info"]["run_id"] for run in runs], separators=(",", ":"))
    page.goto(f"{base}/#/compare-runs?runs={urllib.parse.quote(ids)}"
              f"&experiments={urllib.parse.quote(json.dumps([experiment_id]))}&workflowType=machine_learning")
    settle(page, 4)
    close_assistant(page)
    names = [run["info"]["run_name"] for run in runs]
    body = text(page, *names, "Show diff only")
    check(all(name in body for name in names), f"comparison view names the runs {names}")
    full_page(page, shots / "compare_runs_all_params.png")
    for table in ("Parameters", "Tags"):
        toggle = page.locator(f"button[aria-label='{table} - Show diff only']")
        if toggle.count():
            toggle.first.click()
    settle(page, 1)
    differing = sorted(key for key in set(runs[0]["params"]) | set(runs[1]["params"])
                       if runs[0]["params"].get(key) != runs[1]["params"].get(key))
    params_table = page.locator("table.mlflow-compare-run-table").filter(has_text=differing[0] if differing else "")
    shown = params_table.first.inner_text() if params_table.count() else ""
    check(bool(differing) and all(key in shown for key in differing),
          f"'Show diff only' lists the params that differ: {differing}")
    # the Metrics table is a virtualised list a few rows high (llm1/... is far down it); the parallel coordinates
    # plot at the top draws the metric for each run, its history is on the metric page below
    check(metric in text(page, metric), f"comparison view plots {metric} (parallel coordinates)")
    check("samples.json" in text(page), "comparison view lists the runs' artifact samples.json")
    # the committed view ends where the Artifacts section starts (it shows samples.json as raw JSON, side by side:
    # the run page's artifact viewer shows it as a table)
    cut = page.evaluate("""() => { const m = document.querySelector('main');
        const h = Array.from(document.querySelectorAll('.du-bois-light-collapse-header'))
            .find(e => e.textContent.trim() === 'Artifacts');
        return h && m ? h.getBoundingClientRect().bottom + m.scrollTop + 8 : 0 }""")
    shot = full_page(page, shots / "compare_runs_full.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shrink_png(crop_png(shot, cut), max_kb))
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)", file=sys.stderr)

    # the metric's history, one line per run: the page the metric's name links to
    page.goto(f"{base}/#/metric?runs={urllib.parse.quote(ids)}&metric={urllib.parse.quote(json.dumps(metric))}"
              f"&experiments={urllib.parse.quote(json.dumps([experiment_id]))}"
              f"&plot_metric_keys={urllib.parse.quote(json.dumps([metric]))}&x_axis=step")
    settle(page, 4)
    close_assistant(page)
    try:
        page.wait_for_selector(".js-plotly-plot path.js-line", timeout=20000)
    except Exception:  # noqa: BLE001 - no chart: the check below fails
        pass
    # each run's line is drawn twice, smoothed and (faded) as logged: count distinct lines
    traces = len(set(page.locator(".js-plotly-plot .scatterlayer .trace path.js-line").evaluate_all(
        "paths => paths.map(p => p.getAttribute('d'))")))
    check(traces == len(runs), f"metric page plots {metric} for every run ({traces} lines for {len(runs)} runs)")
    full_page(page, shots / "metric_chart.png")


def parent_run(page, base: str, experiment_id: str, parent: dict, trained: list[dict], shots: Path,
               check: Checks) -> None:
    """The parent run's page: its description is the headline table, one row per "<group>/<run>"."""
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{parent['info']['run_id']}?workflowType=machine_learning")
    settle(page, 3)
    close_assistant(page)
    rows = sorted({run["info"]["run_name"].rsplit("/", 1)[0] for run in trained})
    body = text(page, "Final values", *rows)
    missing = [row for row in rows if f"\n{row}\t" not in body and f"\n{row} " not in body]
    check(not missing, f"the parent run's description has a headline row for every run ({len(rows)}); "
                       f"missing: {missing}")
    full_page(page, shots / "parent_run.png")


def headline_view(page, base: str, experiment_id: str, parent: dict, out: Path, max_kb: int, check: Checks) -> None:
    """The runs table in the shared view (cory.report.pipeline_run.view_url): MLflow shows no metric column by
    default; this view has the parent run's headline numbers and each training run's llm1 metrics."""
    page.goto(f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey=headline&workflowType=machine_learning")
    settle(page, 4)
    close_assistant(page)
    expand = page.locator(".ag-row button[data-component-id*='runnamecellrenderer']")
    if expand.count():  # the shared view does not say which runs are expanded: show the parent's
        expand.first.click()
        settle(page, 2)
    wanted = [key for key in parent["metrics"] if not key.startswith("headline/")] + ["llm1/task_reward"]
    headers = " ".join(page.locator(".ag-header-cell").all_inner_texts())
    body = text(page, *wanted)
    check(bool(wanted) and all(key in headers or key in body for key in wanted),
          f"the shared view has the headline columns {wanted}")
    shot = page.screenshot(full_page=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shrink_png(shot, max_kb))
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)", file=sys.stderr)


def samples(page, base: str, experiment_id: str, run: dict, shots: Path, check: Checks) -> None:
    run_id = run["info"]["run_id"]
    page.goto(f"{base}/#/experiments/{experiment_id}/runs/{run_id}/artifacts/samples.json"
              "?workflowType=machine_learning")
    settle(page, 3)
    close_assistant(page)
    link = page.get_by_text("samples.json", exact=True)
    if link.count():
        link.first.click()
        settle(page, 4)
    body = text(page, "response", "phase")
    seen = [column for column in SAMPLES_COLUMNS if re.search(rf"(^|\s){column}(\s|$)", body)]
    check(len(seen) == len(SAMPLES_COLUMNS),
          f"artifact viewer shows {run['info']['run_name']}'s samples.json as a table (columns seen: {seen})")
    full_page(page, shots / "samples_table.png")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI")
                        or f"sqlite:///{PROJECT_ROOT / 'mlflow.db'}", help="the store (default: cory.tracking's)")
    parser.add_argument("--port", type=int, default=5077)
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "reports" / "mlflow" / "compare_runs.png",
                        help="the comparison view's screenshot")
    parser.add_argument("--shots", type=Path, default=Path(tempfile.gettempdir()) / "mlflow_shots",
                        help="folder of the other screenshots")
    parser.add_argument("--view-out", type=Path, default=PROJECT_ROOT / "docs" / "img" / "mlflow_runs.png",
                        help="the runs table in the shared headline view")
    parser.add_argument("--max-kb", type=int, default=400, help="largest --out and --view-out (scaled down past it)")
    parser.add_argument("--profile", default=default_profile(), help="experiment cory-<profile> (params.yaml's)")
    parser.add_argument("--group", default="imdb")
    parser.add_argument("--runs", default="ppo,cory", help="the two runs of --group to compare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="llm1/task_reward")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--mlflow", default=default_mlflow(), help="the mlflow command that serves the UI")
    args = parser.parse_args(argv)
    shots = args.shots
    shots.mkdir(parents=True, exist_ok=True)

    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{args.port}"
    log = Path(tempfile.mkstemp(prefix="mlflow-ui-", suffix=".log")[1])
    server = start_ui(args.mlflow, args.tracking_uri, args.port, log)
    check = Checks()
    try:
        wait_for(base, server, 180, log)
        experiment = api(base, f"experiments/get-by-name?experiment_name=cory-{args.profile}")["experiment"]
        experiment_id = experiment["experiment_id"]
        runs = current_runs(base, experiment_id)
        by_name = {run["info"]["run_name"]: run for run in runs if run["tags"].get("dvc_stage") == "train"}
        trained = sorted(by_name.values(), key=lambda run: run["info"]["run_name"])
        parents = [run for run in runs if run["tags"].get("run_key") == f"{args.profile}/pipeline"]
        parent = parents[0] if parents else None
        check(parent is not None and all(run["tags"].get("mlflow.parentRunId") == parent["info"]["run_id"]
                                         for run in trained),
              "every current training run is nested under the pipeline's parent run (tag mlflow.parentRunId)")
        pair = [by_name.get(f"{args.group}/{name}/seed{args.seed}") for name in args.runs.split(",")]
        if None in pair:
            raise SystemExit(f"no runs {args.runs} of group {args.group}, seed {args.seed} in {sorted(by_name)}")

        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as playwright:
            # a new, empty --user-data-dir (playwright passes it for a persistent context)
            context = playwright.chromium.launch_persistent_context(
                profile, executable_path=args.chromium, headless=True, args=CHROMIUM_FLAGS,
                viewport={"width": 1500, "height": 1000})
            page = context.new_page()
            run_list(page, base, experiment_id, parent, trained, runs, shots, check)
            compare(page, base, experiment_id, pair, args.metric, args.out, args.max_kb, shots, check)
            samples(page, base, experiment_id, pair[-1], shots, check)
            if parent is not None:
                parent_run(page, base, experiment_id, parent, trained, shots, check)
                headline_view(page, base, experiment_id, parent, args.view_out, args.max_kb, check)
            context.close()
    finally:
        stop_ui(server)
    print(f"{len(check.failed)} check(s) failed" if check.failed else "all checks passed")
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
