"""An RL iteration phase by phase, for the benchmarks: seconds, kernel launches, GPU-busy time, model FLOPs and MFU.

The phases: `generation` and `scoring` (cory.rl.trainer's own timers), `experience` (cory.rl.learner.make_experience
of each agent: the policy's and the reference's forward passes, KL, rewards, GAE) and `epochs` (the PPO epochs: the
rest of the trainer's `update`). `Phases` splits the trainer's update and marks each phase for the profiler in a
benchmark's process only (it replaces two names of cory.rl.trainer there); `profile_phases` then counts one
iteration's work per phase: on a GPU the CUDA kernels that ran (inside CUDA graphs too), the host's launch calls of
the CUDA runtime (a graph replay is one; launches through the driver API, as Triton's, may not be recorded: the kernel
count is the one to read) and the kernels' busy time; on any device the aten operators that launch work (views and
allocations left out, as benchmark.launches counts them; nested ones each: an upper bound of the kernels), and on a
CPU the kernels inductor compiled.

FLOPs are the model FLOPs of the real tokens (padding not counted), PaLM's convention: a forward pass costs 2 x the
weights a token multiplies per token (its body for every token, the output layer for the positions whose logits are
taken) plus 4 L d n for its attention over n tokens (no causal halving); a backward pass twice the forward. Per row
of n = prompt + response tokens, response t: generation one forward (the output layer at t positions), the experience
two (policy and reference), the epochs ppo_epochs x 3. MFU is those FLOPs per second of the phase over a peak (bf16
dense): a floor of what the phase must compute against what it took.
"""

from __future__ import annotations

import collections
import contextlib
import time

from benchmark.launches import NO_LAUNCH

PHASES = ("generation", "scoring", "experience", "epochs")
LAUNCH_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
                "cudaMemcpyAsync", "cudaMemsetAsync"}
"""The CUDA runtime and driver calls that put work on the GPU (a CUDA graph's replay is one call)."""


def matmul_weights(config) -> tuple[int, int, int, int]:
    """(body weights a token multiplies, output-layer weights, layers, width) of a GPT-2 or Llama config: GPT-2's 12 d^2
    per block, Llama's q, k, v, o and three MLP matrices (grouped keys and values), the output layer's V x d."""
    from benchmark.common import llama_matmul_params

    if hasattr(config, "intermediate_size"):  # Llama
        shape = {k: getattr(config, k) for k in ("hidden_size", "num_attention_heads", "num_key_value_heads",
                                                 "intermediate_size", "num_hidden_layers", "vocab_size")}
        body, head = llama_matmul_params(shape)
        return body, head, config.num_hidden_layers, config.hidden_size
    layers, width = config.n_layer, config.n_embd
    return 12 * layers * width * width, config.vocab_size * width, layers, width


def forward_flops(weights: tuple[int, int, int, int], prompt: int, response: int) -> float:
    """Model FLOPs of one forward pass over a row of `prompt` + `response` real tokens, logits at the response's."""
    body, head, layers, width = weights
    n = prompt + response
    return 2.0 * body * n + 2.0 * head * response + 4.0 * layers * width * n * n


def iteration_flops(weights, sequences: list[list[tuple[int, int]]], epochs: int) -> dict[str, float]:
    """Per phase, the model FLOPs of one iteration whose sampling calls made `sequences` (per call, each row's real
    (prompt, response) tokens: the pioneer's, then the observer's)."""
    forward = sum(forward_flops(weights, p, t) for rows in sequences for p, t in rows)
    return {"generation": forward, "scoring": 0.0, "experience": 2 * forward, "epochs": 3 * epochs * forward}


class Phases:
    """Splits a trainer's iterations by phase and marks the phases for torch.profiler, in this process (a benchmark's):
    cory.rl.trainer's make_experience is timed (synchronised on a GPU) and its PhaseTimer marks each of its phases;
    `sequences` holds the current iteration's rows per sampling call. Call `start_iteration` before each step, and
    `close` at the end."""

    def __init__(self, trainer):
        import torch

        from cory.rl import trainer as module

        self.cuda = trainer.agents[0].device.type == "cuda"
        self.experience_seconds = 0.0
        self.sequences: list[list[tuple[int, int]]] = []
        self.peak_gib: dict[str, float] = {}  # per phase, the most GPU memory its tensors held (all iterations)
        self._open: list[str] = []
        self._process_peak = torch.cuda.max_memory_allocated() / 2**30 if self.cuda else 0.0  # the build's
        make_experience, timer = module.make_experience, module.PhaseTimer
        phases = self

        def timed_experience(*args, **kwargs):
            self._sync()
            start = time.perf_counter()
            with torch.profiler.record_function("phase:experience"), self._peak("experience"):
                out = make_experience(*args, **kwargs)
            self._sync()
            self.experience_seconds += time.perf_counter() - start
            return out

        class MarkedTimer(timer):
            @contextlib.contextmanager
            def __call__(self, name: str):
                with (torch.profiler.record_function(f"phase:{name}"), timer.__call__(self, name),
                      phases._peak("epochs" if name == "update" else name)):
                    yield

        self._restore = (module, make_experience, timer)
        module.make_experience, module.PhaseTimer = timed_experience, MarkedTimer
        generate = trainer._generate

        def recorded(*args, **kwargs):
            rollout = generate(*args, **kwargs)
            self.sequences.append(list(zip(rollout.prompt_mask.sum(1).tolist(), rollout.response_mask.sum(1).tolist())))
            return rollout

        trainer._generate = recorded

    @contextlib.contextmanager
    def _peak(self, name: str):
        """Record in `peak_gib[name]` the most GPU memory the tensors held during the block (blocks may nest)."""
        if not self.cuda:
            yield
            return
        import torch

        self._fold()
        torch.cuda.reset_peak_memory_stats()
        self._open.append(name)
        try:
            yield
        finally:
            self._fold()
            self._open.pop()
            torch.cuda.reset_peak_memory_stats()

    def _fold(self) -> None:
        """The peak since the last reset into every open block's and the process's."""
        import torch

        now = torch.cuda.max_memory_allocated() / 2**30
        for name in self._open:
            self.peak_gib[name] = max(self.peak_gib.get(name, 0.0), now)
        self._process_peak = max(self._process_peak, now)

    def process_peak_gib(self) -> float | None:
        """The most GPU memory this process's tensors held so far (None without a GPU)."""
        if not self.cuda:
            return None
        self._fold()
        return self._process_peak

    def close(self) -> None:
        """Put cory.rl.trainer's names back (the trainer keeps its recording of the rows)."""
        module, make_experience, timer = self._restore
        module.make_experience, module.PhaseTimer = make_experience, timer

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def start_iteration(self) -> None:
        self.experience_seconds, self.sequences = 0.0, []

    def seconds(self, metrics: dict[str, float]) -> dict[str, float]:
        """The iteration's seconds per phase (and in all) from its trainer metrics and the experience's timer."""
        timing = {k.removeprefix("timing/"): v for k, v in metrics.items() if k.startswith("timing/")}
        return {"generation": timing["generation"], "scoring": timing["scoring"],
                "experience": self.experience_seconds, "epochs": timing["update"] - self.experience_seconds,
                "iteration": timing["iteration"]}


def profile_cpu_kernels() -> None:
    """Have the kernels inductor compiles for the CPU from now on show in torch.profiler (as the aten operators do),
    so that a compiled pass's operators are counted on a CPU too."""
    import torch._inductor.config as inductor

    inductor.cpp.enable_kernel_profile = True


def profile_phases(step, trace=None) -> tuple[dict[str, dict[str, float]], str]:
    """Run `step` (one iteration of a trainer with `Phases` installed) under torch.profiler: per phase its GPU kernels,
    the host's launch calls, the kernels' busy milliseconds and the aten operators that launch work (CPU: only the
    last); and the profiler's tables of the most GPU time and the most host time. With `trace`, its Chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    windows = [(e.name.removeprefix("phase:"), e.time_range.start, e.time_range.end)
               for e in events if e.name.startswith("phase:")]

    def phase_at(t: float) -> str | None:
        inside = [name for name, start, end in windows if start <= t <= end]
        if "experience" in inside:
            return "experience"
        return "epochs" if "update" in inside else next(iter(inside), None)

    counts = {key: collections.Counter() for key in ("kernels", "launches", "busy_ms", "operators")}
    for e in events:
        kernel = e.device_type == torch.autograd.DeviceType.CUDA
        key = ("kernels" if kernel else "launches" if e.name in LAUNCH_CALLS
               else "operators" if (e.name.startswith("aten::") and e.name not in NO_LAUNCH) or "cpp_fused" in e.name
               else None)  # cpp_fused: a kernel inductor compiled for the CPU (profile_cpu_kernels)
        if key is None or (phase := phase_at(e.time_range.start)) is None:
            continue
        counts[key][phase] += 1
        if kernel:
            counts["busy_ms"][phase] += e.time_range.elapsed_us() / 1e3
    if trace is not None:
        trace.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace))
    averages = prof.key_averages()
    tables = (averages.table(sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=15) + "\n"
              + averages.table(sort_by="self_cpu_time_total", row_limit=15))
    result = {key: {p: round(c[p], 3) if key == "busy_ms" else c[p] for p in PHASES}
              for key, c in counts.items() if cuda or key == "operators"}
    return result, tables


def held_memory(trainer) -> dict[str, float]:
    """GiB of the tensors a trainer holds between iterations, by kind, each storage counted once (in the first kind
    that holds it): the agents' fp32 weights, Adam's moments, gradients left between iterations (none), the bf16
    copies the passes run on, the reference, the sampling's caches and buffers (cory.rl.decoding), the reward model."""
    import torch

    from cory.rl.decoding import GRAPH_DECODERS, STATIC_CACHES

    seen: set[int] = set()
    held: dict[str, float] = {}

    def add(kind: str, tensors) -> None:
        total = 0
        for t in tensors:
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen and storage.nbytes():
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        held[kind] = held.get(kind, 0.0) + total / 2**30

    def tensors_in(obj, depth: int = 6):
        if isinstance(obj, torch.Tensor):
            yield obj
        elif isinstance(obj, torch.nn.Module):
            yield from obj.parameters()
            yield from obj.buffers()
        elif depth and isinstance(obj, (list, tuple, dict)):
            for item in obj.values() if isinstance(obj, dict) else obj:
                yield from tensors_in(item, depth - 1)
        elif depth and hasattr(obj, "__dict__") and not callable(obj):
            yield from tensors_in(vars(obj), depth - 1)

    agents = trainer.agents
    add("weights", (p for a in agents for p in a.lm_weights().values()))
    add("optimizer", (t for a in agents for state in a.optimizer.state.values() for t in state.values()
                      if isinstance(t, torch.Tensor)))
    add("gradients", (p.grad for a in agents for p in a.parameters() if p.grad is not None))
    add("bf16 copies", (p for a in agents if a.compute_lm is not a.lm for p in a.compute_lm.parameters()))
    add("value heads", (p for a in agents for p in a.value_head.parameters()))
    reference = trainer.ref_lm
    reference = getattr(reference, "body", reference)  # BodyAndHead
    reference = getattr(reference, "lm", reference)  # RegionalForward
    add("reference", reference.parameters())
    add("sampling", (t for a in agents for attribute in (GRAPH_DECODERS, STATIC_CACHES)
                     for kept in a.compute_lm.__dict__.get(attribute, {}).values()
                     for t in tensors_in({k: v for k, v in vars(kept).items() if k != "model"}
                                         if hasattr(kept, "__dict__") else kept)))
    model = getattr(trainer.reward_fn, "model", None)
    if isinstance(model, torch.nn.Module):
        add("reward model", model.parameters())
    return held
