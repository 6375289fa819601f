"""What an engine's defaults depend on in the GPUs themselves: vLLM's batched-token tier by memory, and
the GPU generation its hybrid-Mamba kernels differ by (read from the GPUs' names, which is all a
snapshot or NVML gives before anything runs)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["VLLM_BATCHED_HUGE", "VLLM_BATCHED_BIG", "VLLM_BATCHED_SMALL", "vllm_batched_default", "gpu_arch"]

#: ``vllm serve``'s default --max-num-batched-tokens, which sizes its sliding-window layers: 16384 on GPUs
#: of 160 GiB or more (B200/B300), 8192 on GPUs of 70 GiB or more other than the A100, else 2048
#: (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, UsageContext.OPENAI_API_SERVER, vLLM 0.33.0).
#: Where the GPUs are not known yet, the H100 tier.
VLLM_BATCHED_HUGE, VLLM_BATCHED_BIG, VLLM_BATCHED_SMALL = 16384, 8192, 2048


def vllm_batched_default(gpus: Sequence[tuple[str, int | None]]) -> int:
    """vLLM's default batched tokens on these GPUs, as (name, total MiB): the largest tier any GPU takes."""
    if not gpus:
        return VLLM_BATCHED_BIG
    if any((mib or 0) >= 160 * 1024 for _, mib in gpus):
        return VLLM_BATCHED_HUGE
    big = any((mib or 0) >= 70 * 1024 and "a100" not in name.lower() for name, mib in gpus)
    return VLLM_BATCHED_BIG if big else VLLM_BATCHED_SMALL


def gpu_arch(names: Sequence[str]) -> str:
    """The GPU generation vLLM's hybrid-Mamba kernels depend on, from the GPUs' names."""
    text = " ".join(names).lower()
    for arch, marks in (("blackwell", ("b100", "b200", "b300", "gb200", "gb300", "rtx pro 6000", "blackwell")),
                        ("hopper", ("h100", "h200", "h800", "h20", "gh200")), ("ampere", ("a100", "a800", "a10", "a30", "a40"))):
        if any(m in text for m in marks):
            return arch
    return ""
