"""benchmark/pretrain.py on the CPU at a tiny shape: it trains, times and profiles pretrain_lm's step."""

from cory.tasks.config import LMConfig, PretrainConfig
from benchmark.pretrain import kind_of, profile_pretraining


def test_kernel_kinds():
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert kind_of("pytorch_flash::flash_fwd_kernel") == "attention"
    assert kind_of("triton_per_fused_add_native_layer_norm_0") == "triton (compiled)"
    assert kind_of("void at::native::vectorized_elementwise_kernel") == "other (eager)"


def test_a_tiny_model_is_timed_and_profiled_on_the_cpu():
    lm = LMConfig(n_layer=1, n_embd=32, n_head=2, n_positions=32, dropout=0.0)
    pre = PretrainConfig(batch_tokens=64, micro_batches=2, seq_len=16, warmup_steps=1)
    result = profile_pretraining(lm, pre, vocab=100, steps=2, warmup=1, profile_steps=2, device="cpu")
    assert result["step_seconds"] > 0 and result["tokens_per_second"] == 64 / result["step_seconds"]
    assert result["peak_gpu_gib"] is None
    assert sum(result["busy_ms"].values()) > 0
    assert result["costliest"] and all(ms >= 0 and calls >= 1 for _, ms, calls in result["costliest"])
    assert any("mm" in name for name, _, _ in result["costliest"])  # the model's matmuls are among its operators
