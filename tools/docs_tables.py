"""The reference docs' measurement tables, each generated from a committed JSON file, between its markers in a doc:

    python -m tools.docs_tables            # rewrite every table between its markers
    python -m tools.docs_tables --check    # exit 1 if a doc's table is not the one its file gives

A measurement enters docs/ only this way: a table written by hand would drift from the file it quotes
(tests/test_docs.py checks them). Each table: (the doc, the file it comes from, the function that writes it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table:{name}:start -->", f"<!-- table:{name}:end -->"


def paper_scale(scale: dict) -> str:
    """The paper profile's runs as `python -m benchmark.paper` measured them (reports/paper/scale.json): each run's
    model, seconds per iteration and their split, peak GPU memory, and the projected wall time of all its runs."""
    lines = ["| run | model | agents | seconds per iteration (generation / scoring / update) | peak GPU memory (GiB) "
             "| projected seconds, every seed |", "|---|---|---|---|---|---|"]
    per_run = scale["projection"]["per_run_seconds"]
    for key, run in scale["runs"].items():
        split = run["split"]
        model = run["model"].split("/")[-1] + (f", LoRA r={run['lora_rank']}" if run.get("lora_rank") else "") + (
            ", 4-bit NF4" if run.get("load_in_4bit") else "")
        lines.append(f"| {key} | {model} | {run['n_agents']} | {run['seconds_per_iteration']:.3f} "
                     f"({split['generation']:.3f} / {split['scoring']:.3f} / {split['update']:.3f}) "
                     f"| {run['peak_gpu_gib']:.1f} | {per_run[key]:.0f} |")
    projection = scale["projection"]
    devices = sorted({run["device"] for run in scale["runs"].values()})
    sources = sorted({run["source"] for run in scale["runs"].values() if run.get("source")})
    lines += ["", f"All of the `{scale['profile']}` profile's runs: {projection['hours']:.2f} h of iterations on "
              f"{', '.join(devices)} ({projection['assumes']}). From `reports/paper/scale.json`, combined from "
              + ", ".join(f"`{source}`" for source in sources) + "."]
    return "\n".join(lines)


def bench_rl(benches: list[dict]) -> str:
    """`python -m benchmark.rl` files, one per run (reports/default/bench/): each variant of each run, its seconds per
    iteration and their split, peak GPU memory, kernel launches of its profiled iteration and MFU, the profile's
    settings first; then how much faster each variant is than the profile's settings."""
    lines = ["| run | settings | seconds per iteration (generation / scoring / experience / epochs) | peak GPU memory "
             "(GiB) | kernel launches | MFU | vs the profile's settings |", "|---|---|---|---|---|---|---|"]
    for bench in benches:
        for run, variants in bench["runs"].items():
            base = next(iter(variants.values()))["iteration"]
            for variant, r in variants.items():
                launches = sum(r["profile"]["launches"].values()) if r.get("profile") else None
                lines.append(f"| {run} | {variant.replace('ppo.speed.', '')} | {r['iteration']:.3f} ({r['generation']:.3f} / "
                             f"{r['scoring']:.3f} / {r['experience']:.3f} / {r['epochs']:.3f}) | {r['peak_gib']:.2f} | "
                             f"{launches if launches is not None else '-'} | {r['mfu']['iteration']:.1%} | "
                             f"{base / r['iteration']:.2f}x |")
    first = benches[0]
    lines += ["", f"Group `{first['group']}`, random weights of its shapes, one process alone on {first['device']} "
              f"(torch {first['torch']}): {first['iterations']} timed iterations after {first['warmup']}, then one "
              f"profiled. From " + ", ".join(f"`{source}`" for source in BENCH_SMOLLM2) + "."]
    return "\n".join(lines)


BENCH_SMOLLM2 = ("reports/default/bench/20261207_h100_smollm2_ppo.json",
                 "reports/default/bench/20261207_h100_smollm2_cory.json")

TABLES = {"paper_scale": ("docs/scale.md", "reports/paper/scale.json", paper_scale),
          "smollm2_speed": ("docs/speed.md", BENCH_SMOLLM2, bench_rl)}
"""name -> (the doc, the committed JSON file or files, the function that writes the table from it or them)."""


def rewrite(text: str, name: str, table: str) -> str:
    start, end = markers(name)
    if start not in text or end not in text:
        raise SystemExit(f"no {start} ... {end} block")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{table}\n{end}{tail}"


def tables() -> dict[Path, str]:
    """Every doc with its tables written from their files: {doc: its text}."""
    docs: dict[Path, str] = {}
    for name, (doc, source, write) in TABLES.items():
        path = ROOT / doc
        text = docs.get(path, path.read_text())
        loaded = ([json.loads((ROOT / one).read_text()) for one in source] if isinstance(source, tuple)
                  else json.loads((ROOT / source).read_text()))
        docs[path] = rewrite(text, name, write(loaded))
    return docs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that every table is its file's")
    args = parser.parse_args(argv)
    stale = {path: text for path, text in tables().items() if text != path.read_text()}
    if args.check and stale:
        raise SystemExit("tables not their files': " + ", ".join(map(str, stale)) + ": python -m tools.docs_tables")
    if not args.check:
        for path, text in stale.items():
            path.write_text(text)


if __name__ == "__main__":
    main(sys.argv[1:])
