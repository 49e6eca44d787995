"""GPU-only checks: every test here is marked `gpu` and skipped where torch sees no CUDA device (this CPU machine, CI).
Run them on a GPU machine with `python -m pytest tests/gpu`."""

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.path.parent.name == "gpu":
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)
