"""The paper's numbers (its text's and those read off its figures): shown beside ours in the report, never part of a
verdict. PAPER_VALUES: claim key -> label of our quantity or effect -> the paper's value with its source."""

from __future__ import annotations

from cory.report.verdicts import PaperValue


READ = "read off the authors' figure"
FIG3C_END = {
    "PPO start combined reward": PaperValue((0.4, 0.5), f"Fig. 3c, every run at the start, {READ}"),
    "PPO final combined reward": PaperValue(-8.7, f"Fig. 3c, PPO-GPT-2-l at iteration ~100, {READ}"),
    "PPO-2x final combined reward": PaperValue(-9.5, f"Fig. 3c, PPO-GPT-2-xl at iteration ~100, {READ}"),
    "CORY-LLM1 final combined reward": PaperValue(-1.1, f"Fig. 3c, at iteration ~100, {READ}"),
    "CORY-LLM2 final combined reward": PaperValue(-1.3, f"Fig. 3c, at iteration ~100, {READ}"),
}
DERIVED = "derived from the Fig. 3c readings (start +0.45, the middle of +0.4..+0.5)"
INFERRED_KL = ("an order-of-magnitude inference from Fig. 3c's combined reward (task reward ~2.5, η ≈ 0.3-0.4), "
               "not a number the paper states")
PASSK_READ = "Fig. 5, GSM8K test, 4-bit Llama-2-7b-chat, read off the authors' figure"
PAPER_PASSK = {"base": (0.123, 0.206, 0.265, 0.300, 0.331), "PPO": (0.145, 0.222, 0.279, 0.317, 0.344),
               "CORY": (0.179, 0.260, 0.315, 0.358, 0.387)}
ABLATION_READ = f"Fig. 6c, combined reward at iteration ~101, {READ}"

PAPER_VALUES: dict[str, dict[str, PaperValue]] = {
    "imdb_similar_reward": {
        f"{who} final task reward{' (as pioneer)' if who != 'PPO' else ''}": PaperValue(
            2.5, f"Fig. 3a, about 2.5 for every method, {READ}") for who in ("PPO", "CORY-LLM1", "CORY-LLM2")},
    "imdb_kl_ratio": {
        **{f"PPO / CORY-{x} final KL": PaperValue(2.0, "§4, Fig. 3b: 'more than 2x' (a lower bound)")
           for x in ("LLM1", "LLM2")},
        "PPO final KL": PaperValue((28.0, 37.0), f"PPO-GPT-2-l at iteration 100: {INFERRED_KL}"),
        **{f"CORY-{x} final KL (as pioneer)": PaperValue((9.0, 12.0), f"at iteration 100: {INFERRED_KL}")
           for x in ("LLM1", "LLM2")},
    },
    "imdb_combined_reward": {k: v for k, v in FIG3C_END.items() if "final" in k},
    "imdb_combined_fall": {
        **FIG3C_END,
        **{f"{who} start combined reward": PaperValue((0.4, 0.5), f"Fig. 3c, every run at the start, {READ}")
           for who in ("PPO-2x", "CORY-LLM1", "CORY-LLM2")},
        "PPO fall (start - final)": PaperValue(9.15, DERIVED),
        "PPO-2x fall (start - final)": PaperValue(9.95, DERIVED),
        "CORY-LLM1 fall (start - final)": PaperValue(1.55, DERIVED),
        "CORY-LLM2 fall (start - final)": PaperValue(1.75, DERIVED),
        "PPO's fall / CORY-LLM1's fall": PaperValue(5.9, f"{DERIVED}; about 7x as the end values' ratio"),
        "PPO's fall / CORY-LLM2's fall": PaperValue(5.2, f"{DERIVED}; about 7x as the end values' ratio"),
    },
    "imdb_collapse": {
        "PPO final KL (as pioneer)": PaperValue((28.0, 37.0), f"PPO-GPT-2-l at iteration 100: {INFERRED_KL}"),
        **{f"CORY-{x} final KL (as pioneer)": PaperValue((9.0, 12.0), f"at iteration 100: {INFERRED_KL}")
           for x in ("LLM1", "LLM2")},
    },
    "imdb_2x_model": {"PPO-2x final combined reward": FIG3C_END["PPO-2x final combined reward"]},
    "math_ppo_peak": {"PPO peak iteration (smoothed task reward)": PaperValue(
        50.0, "§4, Fig. 4a: 'peaks near iteration 50' (GSM8K, the paper's own run length)")},
    "passk": {
        **{f"pass@{k} {who}": PaperValue(v, PASSK_READ) for who in ("base", "PPO") for k, v in
           zip(range(1, 6), PAPER_PASSK[who])},
        **{f"pass@{k} CORY-{x}": PaperValue(v, f"{PASSK_READ}; one CORY curve") for x in ("LLM1", "LLM2")
           for k, v in zip(range(1, 6), PAPER_PASSK["CORY"])},
        "pass@1 CORY (text)": PaperValue(0.18, "§4 text, the only number it states"),
    },
    "no_kt_kl": {
        "w/o KT LLM1 final combined reward": PaperValue(-5.2, ABLATION_READ),
        "w/o KT LLM2 final combined reward": PaperValue(-4.4, ABLATION_READ),
        "CORY LLM1 final combined reward": PaperValue(-1.1, ABLATION_READ),
        "CORY LLM2 final combined reward": PaperValue(-1.3, ABLATION_READ),
    },
    "no_rex_kl": {
        "w/o REx pioneer (LLM1) final combined reward": PaperValue(-10.2, f"{ABLATION_READ} (LLM1)"),
        "w/o REx observer (LLM2) final combined reward": PaperValue(-6.3, f"{ABLATION_READ} (LLM2)"),
        "CORY LLM1 final combined reward": PaperValue(-1.1, ABLATION_READ),
        "CORY LLM2 final combined reward": PaperValue(-1.3, ABLATION_READ),
    },
}
PAPER_VALUES["no_kt_unstable"] = PAPER_VALUES["no_kt_kl"]
PAPER_VALUES["no_rex_observer"] = {k: v for k, v in PAPER_VALUES["no_rex_kl"].items() if "w/o REx" in k}
"""Claim key (without its group) -> the paper's numbers, by the label of our quantity or effect they go beside."""
