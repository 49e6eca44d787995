"""The optimisation pieces that pretraining, the reward classifier and the benchmarks share: CUDA setup, AdamW with
GPT-2's weight-decay groups, warmup then cosine decay, the optimizer step, and a device sync; and the record every
trained model's folder keeps (`write_record`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from cory.files import folder_records, write_json
from cory.tracking.tags import provenance


def is_cuda(device: str) -> bool:
    return torch.device(device).type == "cuda"


def setup(device: str) -> bool:
    """Fast CUDA matmuls; returns whether bf16 autocast is on (CUDA only: CPU runs are the tiny test configs)."""
    cuda = is_cuda(device)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return cuda


def adamw(model, lr: float, weight_decay: float, betas: tuple[float, float], cuda: bool) -> torch.optim.AdamW:
    # GPT-2/nanoGPT practice: decay matrices and embeddings, not biases and layer-norm gains
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=cuda)


def warmup_cosine(optimizer, warmup: int, total: int, min_ratio: float) -> torch.optim.lr_scheduler.LambdaLR:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def optimizer_step(model, optimizer, schedule, grad_clip: float | None) -> None:
    """Optional gradient-norm clip, optimizer and schedule step, after the backward (LM and classifier training)."""
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)


def sync(device: str) -> None:
    if is_cuda(device):
        torch.cuda.synchronize()


def write_record(path: Path, fields: dict[str, Any], device: str, fingerprint: str | None) -> dict[str, Any]:
    """Write a trained model's record to `path`, a file in the model's folder, and return it: `fields` (what was
    trained: its source, settings, loss history), where and with what (provenance), the `fingerprint` of what it was
    made from, and every other file of the folder as written (what a rerun checks before it keeps the model)."""
    record = {
        **fields,
        **provenance(device),
        "fingerprint": fingerprint,
        "files": folder_records(path.parent, leave_out=(path.name,)),
    }
    write_json(path, record)
    return record
