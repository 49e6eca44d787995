"""On a GPU: calls that run out of GPU memory beside others run again, fewer at once (pipeline.gpus.run_at_once).

Each call takes `FRACTION` of the GPU's memory in one tensor and holds it for a few seconds, so that at most
1/FRACTION of them fit at once: 4 processes at once leave some out of memory, and those run again as the others
end; every call ends, with and without an MPS daemon (docs/architecture.md has the measured run).
"""

from __future__ import annotations

import time

import pytest

CALLS, FRACTION, SECONDS = 4, 0.4, 8.0


def hold(name: str, fraction: float, seconds: float) -> str:
    """Allocate `fraction` of this process's GPU and hold it: the unit of work."""
    import torch

    free, total = torch.cuda.mem_get_info()
    started = time.perf_counter()
    block = torch.empty(int(total * fraction), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    time.sleep(seconds)
    return f"{name}: held {block.numel() / 2**30:.1f} GiB of {total / 2**30:.1f} ({free / 2**30:.1f} free at start) " \
           f"for {time.perf_counter() - started:.1f} s"


@pytest.mark.parametrize("mps", [False, True])
def test_calls_out_of_memory_beside_others_run_again_fewer_at_once(mps):
    from pipeline.gpus import run_at_once, visible_gpus

    calls = {f"call{i}": (hold, (f"call{i}", FRACTION, SECONDS)) for i in range(CALLS)}
    results, failed = run_at_once(calls, CALLS, visible_gpus()[:1], mps, "check")
    assert not failed, failed
    assert len(results) == CALLS


@pytest.mark.parametrize("fails", [False, True])
def test_a_call_gives_back_the_gpu_memory_it_held(fails):
    """After release_memory_after, nothing of the call stays reserved in the process, whether it returned or ran out of
    memory with its tensors in its frames: the idle worker holds no memory the next call, in another worker, needs."""
    import torch

    from pipeline.gpus import release_memory_after

    def unit():
        block = torch.ones(2**28, dtype=torch.uint8, device="cuda")  # 256 MiB
        if fails:
            raise torch.OutOfMemoryError(f"CUDA out of memory (holding {block.numel()} bytes)")
        return block.sum().item()

    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()  # what other tests of this process still hold
    if fails:
        with pytest.raises(torch.OutOfMemoryError):
            release_memory_after(unit)
    else:
        assert release_memory_after(unit) == 2**28
    assert torch.cuda.memory_reserved() == before
