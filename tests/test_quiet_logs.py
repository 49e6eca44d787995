"""A stage's log reads top to bottom: progress bars only on a terminal, and the warnings the pipeline expects (a
classifier's new head, a forward pass without an attention mask on purpose) dropped where they arise, any other
warning still shown. The whole smoke log: tests/test_walkthrough.py."""

import logging
import subprocess
import sys

import pytest
import torch

from cory.hf import NO_ATTENTION_MASK, expected_warnings, fresh_head_report
from pipeline.paths import ROOT

from tiny import tiny_lm, tiny_tokenizer


@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lm")
    tiny_lm().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


LOAD = """
import sys
from cory.hf import progress_bars_on_terminal_only
if sys.argv[2] == "quiet":
    progress_bars_on_terminal_only()
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(sys.argv[1]).save_pretrained(sys.argv[1] + "-copy")
"""


@pytest.mark.parametrize("mode, bars", [("loud", True), ("quiet", False)])
def test_progress_bars_show_on_a_terminal_only(lm_folder, mode, bars):
    result = subprocess.run([sys.executable, "-c", LOAD, str(lm_folder), mode], cwd=ROOT, capture_output=True,
                            text=True, check=True)  # stderr is a pipe here, as in a captured log
    assert ("it/s]" in result.stderr) is bars, result.stderr[-2000:]


def test_a_classifiers_new_head_is_expected_and_any_other_load_report_still_shows(lm_folder, caplog):
    from transformers import AutoModelForSequenceClassification

    with caplog.at_level(logging.WARNING, logger="transformers.modeling_utils"):
        with expected_warnings(fresh_head_report("score")):
            AutoModelForSequenceClassification.from_pretrained(lm_folder, num_labels=2)
        assert not any("LOAD REPORT" in r.getMessage() for r in caplog.records)
        with expected_warnings(fresh_head_report("classifier")):  # another head: not the expected report
            AutoModelForSequenceClassification.from_pretrained(lm_folder, num_labels=2)
        assert any("LOAD REPORT" in r.getMessage() and "score.weight" in r.getMessage() for r in caplog.records)
    assert not logging.getLogger("transformers.modeling_utils").filters  # the filter goes with its block


def test_a_forward_pass_without_a_mask_on_purpose_is_quiet(caplog):
    model = tiny_lm()
    padded = torch.tensor([[2, 3, 0, 0]])  # the tiny model's pad id is 0
    warned = lambda: any(r.getMessage().startswith(NO_ATTENTION_MASK) for r in caplog.records)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="transformers.modeling_utils"):
        logging.Logger.warning_once.cache_clear()  # transformers warns once per process and message
        with expected_warnings(NO_ATTENTION_MASK):
            model(input_ids=padded)
        assert not warned()
        logging.Logger.warning_once.cache_clear()
        model(input_ids=padded)
        assert warned()  # outside the block it is the warning it was
