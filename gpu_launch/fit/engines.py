"""The engines gpulaunch sizes for: which one a command runs, how it lays a model out, and what it
needs beyond weights and KV cache (an allowance, stated as one: it cannot be read from a file).

* ``llama.cpp`` (llama-server, llama-cli...): layers, offloaded from the last one; the output layer
  is one unit; the token embedding stays on the host; the rest of a model that does not fit runs on
  the CPU. Several GPUs share the offloaded layers in proportion (``--tensor-split``).
* ``vllm``, ``sglang``, ``mlc``, ``tgi``: tensor parallelism: every GPU holds 1/tp of the weights and of the KV
  heads; tp must divide the attention heads.
* ``transformers`` (Accelerate's ``device_map="auto"``): layers in order over the GPUs, then the CPU,
  bounded by a ``max_memory`` map.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpu_launch.errors import UsageError
from gpu_launch.base.records import dataclass

__all__ = ["Engine", "ENGINES", "TRAINING", "engine_named", "detect"]

GiB = 1 << 30


@dataclass(frozen=True)
class Engine:
    name: str
    layout: str  # "layers" (llama.cpp), "tensor" (vLLM, SGLang, MLC, TGI) or "sequential" (Transformers)
    allowance: int  # bytes per GPU: compute buffers, CUDA context, graphs (an allowance, not a measurement)
    allowance_why: str
    kv_rule: str  # which engine's KV rules fit/kv.py applies ("llama.cpp" or "vllm")


ENGINES: dict[str, Engine] = {
    "llama.cpp": Engine("llama.cpp", "layers", 1 * GiB,
                        "llama.cpp's own --fit-target margin (1 GiB per device), plus the logits buffer where "
                        "the output layer is (without flash attention: the attention scores, if larger)", "llama.cpp"),
    "vllm": Engine("vllm", "tensor", 6 * GiB, "activations and CUDA graphs (deployments measure 4.8-8 GiB per GPU)",
                   "vllm"),
    "sglang": Engine("sglang", "tensor", 6 * GiB, "activations and CUDA graphs, as for vLLM (outside "
                     "--mem-fraction-static)", "vllm"),
    "mlc": Engine("mlc", "tensor", 2 * GiB, "MLC-LLM's prefill workspace and CUDA context", "vllm"),
    "tgi": Engine("tgi", "tensor", 6 * GiB, "text-generation-inference's warm-up batch and CUDA graphs", "vllm"),
    "transformers": Engine("transformers", "sequential", 2 * GiB, "activations and the CUDA context", "vllm"),
}
#: A training launch (fit/training/): sized by its step's per-GPU peak; its allowance is the step's own.
TRAINING = Engine("training", "training", 0, "the CUDA context, workspaces, NCCL and allocator rounding, per process "
                  "(fit/training/memory.py)", "vllm")
_SPELLINGS = {"llama": "llama.cpp", "llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "vllm": "vllm",
              "mlc": "mlc", "mlc-llm": "mlc", "mlc_llm": "mlc", "tgi": "tgi", "text-generation-inference": "tgi",
              "sglang": "sglang",
              "transformers": "transformers", "accelerate": "transformers", "hf": "transformers"}


def engine_named(text: str, option: str = "--engine") -> Engine:
    key = _SPELLINGS.get(text.strip().lower(), text.strip().lower())
    if key not in ENGINES:
        raise UsageError(f"{option}: {text!r} is not an engine gpulaunch sizes for",
                         hint="one of llama.cpp, vllm, sglang, mlc, tgi, transformers")
    return ENGINES[key]


def detect(argv: Sequence[str]) -> Engine | None:
    """The engine a command runs, from its command word (and, for ``python -m``, the module): the
    same reading as the engines' command-line tables (fit/cmdline); launchers run Transformers scripts."""
    from gpu_launch.fit.cmdline import engine_of, sized_as

    name = sized_as(engine_of(argv))
    if name in ("torchrun", "accelerate", "deepspeed"):
        return ENGINES["transformers"]
    return ENGINES.get(name or "")
