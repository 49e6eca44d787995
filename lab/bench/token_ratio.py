"""Measure: how many more tokens a CORY iteration's forward and backward passes process than a PPO iteration's, on the
IMDB task as the profiles set it (GPT-2's tokenizer; a query of 2-8 tokens, a response of 4-16, both uniform; the
observer's prompt from tasks.imdb.observer_template of params.yaml, or of $CORY_PARAMS). Real reviews stand in for
the responses: a query is a review's first tokens and its response the tokens after them.

    python -m lab.bench.token_ratio [--samples 2000]

A PPO iteration runs its one model over pioneer sequences (query + response); a CORY iteration runs the pioneer over
the same and the observer over its prompt (the template with the query twice and the pioneer's response) + its own
response. Sampling is one decoding step per response token for each model, 2x PPO's, so where the GPU is the bound a
CORY iteration costs between about 2x and this ratio of a PPO one (lab/notebook/scale.md has the measured ratio).
"""

from __future__ import annotations

import argparse
import random

from cory.tasks.config import IMDBDataConfig
from cory.tasks.imdb import load_imdb
from cory.tasks.tokenizer import OFFLINE_GPT2, load_tokenizer
from pipeline.params import load_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    template = load_params().tasks["imdb"].observer_template
    tokenizer = load_tokenizer(OFFLINE_GPT2)
    rng = random.Random(0)
    reviews = rng.sample(load_imdb(IMDBDataConfig())["text"], args.samples)  # the offline reviews, cleaned
    pioneer, observer = [], []
    for review in reviews:
        ids = tokenizer(review, add_special_tokens=False)["input_ids"]
        query_tokens, response_tokens = rng.randint(2, 8), rng.randint(4, 16)
        if len(ids) < query_tokens + response_tokens:
            continue
        query = tokenizer.decode(ids[:query_tokens])
        response = tokenizer.decode(ids[query_tokens : query_tokens + response_tokens])
        prompt = template.format(query=query, response=response)
        pioneer.append(query_tokens + response_tokens)
        observer.append(len(tokenizer(prompt, add_special_tokens=False)["input_ids"]) + response_tokens)
    mean_pioneer, mean_observer = sum(pioneer) / len(pioneer), sum(observer) / len(observer)
    print(f"observer template: {template!r}")
    print(f"{len(pioneer)} samples: pioneer sequence {mean_pioneer:.1f} tokens, observer {mean_observer:.1f}; "
          f"CORY / PPO tokens in the forward and backward passes {(mean_pioneer + mean_observer) / mean_pioneer:.2f}x")


if __name__ == "__main__":
    main()
