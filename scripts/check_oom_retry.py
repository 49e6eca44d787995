"""On a GPU: calls that run out of GPU memory beside others run again fewer at once (pipeline.gpus.run_at_once).

    python -m scripts.check_oom_retry [--calls 4] [--fraction 0.4] [--mps]

Each call takes `fraction` of the GPU's memory in one tensor and holds it for a few seconds, so that at most
1/fraction of them fit at once: with --calls 4 and 0.4, the first pass (4 processes at once) leaves some out of memory,
and those run again, 2 at once. Prints the pool's own lines and then each call's result; exits 1 if any failed.
Run on one H200 (2026-11-29, branch next/oom-retry as this script came to it, 55.9 GiB a call): without and with --mps alike,
2 of the 4 ran out of memory beside the 2 that fit, ran again 2 at once, and all 4 ended (34.0 s, 31.4 s).
"""

from __future__ import annotations

import argparse
import time


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


def main() -> None:
    from pipeline.gpus import run_at_once, visible_gpus

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--fraction", type=float, default=0.4)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--mps", action="store_true")
    args = parser.parse_args()
    calls = {f"call{i}": (hold, (f"call{i}", args.fraction, args.seconds)) for i in range(args.calls)}
    started = time.perf_counter()
    results, failed = run_at_once(calls, args.calls, visible_gpus()[:1], args.mps, "check")
    print("\n".join(sorted(results)))
    print(f"{len(results)} ended, {len(failed)} failed {failed or ''} in {time.perf_counter() - started:.1f} s")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
