"""On a GPU: a text longer than the sentiment classifier's positions scores without CUDA's device-side assert (the
position embedding's gather read past its table before the reward cut texts to the classifier's positions), and in
the same process the GPU keeps working afterwards (an assert would leave its CUDA context unusable)."""

import torch
from transformers import GPT2Config, GPT2ForSequenceClassification

from cory.tasks.rewards import SentimentReward
from cory.tasks.tokenizer import load_tokenizer


def test_a_text_beyond_the_classifiers_positions_scores_on_the_gpu(tmp_path):
    torch.manual_seed(0)
    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=16, num_labels=2, pad_token_id=50256)
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path)
    load_tokenizer("offline-gpt2").save_pretrained(tmp_path)
    # SmolLM2 writes runs of up to 80 spaces as one token; GPT-2's tokenizer splits them into up to 81
    responses = [" was" + " " * 80 + "\n" + " " * 80 + "great", " liked it"]
    for truncation in ("head", "tail"):
        reward = SentimentReward(str(tmp_path), device="cuda", max_length=256, truncation=truncation)
        scores = reward(["The movie", "I"], responses)
        torch.cuda.synchronize()
        assert scores.shape == (2,) and torch.isfinite(scores).all()
    assert torch.ones(4, device="cuda").sum().item() == 4.0  # the context is still usable
