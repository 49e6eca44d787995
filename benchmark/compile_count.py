"""How much a compiled run compiles, and when: each iteration's seconds, dynamo's count of graphs and of graph breaks
so far.

    python -m benchmark.compile_count [--group math --run cory] [--iterations 12] [--variant ppo.speed.compile=true]
                                    [--profile smoke]                                   (from the project root)

Builds the run as benchmark/rl.py does (random weights of the profile's shapes; params.yaml, or --profile NAME's
rendering, or $CORY_PARAMS) and trains it. A graph counted after the first iteration is a recompilation (a new shape
or guard), paid again in the middle of a run. Run it twice to see what inductor's on-disk caches save a second
process (dynamo's tracing is not cached; inductor's code generation is).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benchmark.common import CompileCount, profile_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--group", default="math")
    parser.add_argument("--run", default="cory")
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--variant", default="ppo.speed.compile=true", help="comma-separated dotted KEY=VALUE train settings")
    parser.add_argument("--profile", help="render this profile instead of reading params.yaml (e.g. smoke, on a CPU)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.profile:
            os.environ["CORY_PARAMS"] = str(profile_params(args.profile, Path(tmp)))
        from cory.rl.trainer import Trainer
        from benchmark.rl import build

        cfg, lm, tokenizer, reward, queries, answers = build(args.group, args.run, Path(tmp), args.variant)
        trainer = Trainer(replace(cfg, samples_to_log=0), lm, tokenizer, reward, seed=0)
        compiled = CompileCount()
        for iteration in range(args.iterations):
            start = time.perf_counter()
            trainer.step(queries, answers)
            so_far = compiled.fields()
            print(f"iteration {iteration}: {time.perf_counter() - start:.1f} s, "
                  f"graphs so far {so_far['compiled_graphs']}, graph breaks {so_far['graph_breaks']}", flush=True)


if __name__ == "__main__":
    main()
