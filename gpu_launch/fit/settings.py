"""How the engine will run the model, as the command and gpulaunch's options say: the settings a plan
sizes the KV cache and the allowances with (:class:`Settings`), and what of them the KV rules read
(:func:`run_of`). Kept apart from :mod:`gpu_launch.fit.plan`, which places a model with them."""

from __future__ import annotations

from gpu_launch.fit import kv as kv_rules
from gpu_launch.fit.engines import Engine
from gpu_launch.fit.gpu_tiers import VLLM_BATCHED_BIG, VLLM_BATCHED_SMALL
from gpu_launch.fit.offload import Offload
from gpu_launch.base.records import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Settings", "run_of"]


@dataclass(frozen=True)
class Settings:
    """How the engine will run the model: context, sequences, KV type, and what the command leaves to gpulaunch.

    ``partial``: layers may stay on the CPU (llama.cpp with ``-ngl {gpu_layers}`` or no ``-ngl``).
    ``gpu_mem_util``: vLLM's utilisation as the command fixes it; None with ``util_placeholder``
    means gpulaunch picks it (``{gpu_mem_util}``), else vLLM's default 0.9.
    """

    ctx: int
    seqs: int = 1
    kv_type: str = "f16"
    v_type: str | None = None  # llama.cpp's V cache type when it differs from K's (-ctv); None: as K
    ubatch: int = kv_rules.LLAMA_UBATCH
    batch: int = kv_rules.LLAMA_BATCH  # llama.cpp -b: caps the micro-batch
    reserve: int | None = None  # bytes per GPU instead of the engine's allowance (--reserve)
    partial: bool = False
    gpu_mem_util: float | None = None
    util_placeholder: bool = False
    host_free: int | None = None  # bytes of host memory available (None: not checked)
    ctx_from: str = "default"  # where ctx came from: "--ctx", "the command", "the model's trained context"
    self_fit: bool = False  # llama.cpp given no -ngl: it fits the layers itself (its --fit, on by default)
    unified: bool = True  # llama.cpp: one KV cache shared by the sequences (-kvu; llama-server's automatic 4 slots)
    batched_tokens: int | None = None  # vLLM --max-num-batched-tokens; None: vLLM's default (see sizing)
    block_size: int | None = None  # vLLM --block-size; None: its attention backend's choice
    prefix_caching: bool | None = None  # vLLM --[no-]enable-prefix-caching; None: vLLM's default
    gpu_layers_cap: int | None = None  # llama.cpp -ngl N below the model's units: N offloaded, the rest on the CPU
    tp: int | None = None  # tensor parallelism the engine will run (None: gpulaunch picks it, {tp})
    tp_explicit: bool = False  # the command writes tp (else tp is the engine's default: vLLM and SGLang run 1)
    pp: int = 1  # pipeline stages the command asks for (vLLM -pp, SGLang --pp-size, MLC pipeline_parallel_stages)
    dp: int = 1  # data-parallel replicas on these GPUs, each a whole copy of the model
    ranks_factor: int = 1  # other factors of the GPU count (vLLM -pcp)
    nnodes: int = 1  # the command spreads its ranks over this many nodes (vLLM/SGLang --nnodes): this one holds a share
    node_rank: int = 0
    gpus_per_node: int | None = None  # the kind of node a several-node answer counts in (--gpus-per-node)
    fixed_by: str = ""  # how the command fixes the GPU count, for messages ("as the command's -tp 2 says")
    environ: tuple[tuple[str, str], ...] = ()  # the command's own variables that move layers (VLLM_PP_LAYER_PARTITION)

    @property
    def ngl(self) -> str:
        """How the command spells llama.cpp's -ngl (llama-cpp-python's server: --n_gpu_layers)."""
        return "--n_gpu_layers" if self.binding == "llama-cpp-python" else "-ngl"

    @property
    def group(self) -> int:
        """The GPU count over tp: pp × dp × the other factors (tp × group GPUs run the command)."""
        return self.pp * self.dp * self.ranks_factor
    flash_attn: str = "auto"  # llama.cpp -fa: "on", "off" or "auto" (resolved as on a CUDA device)
    swa_full: bool = False  # llama.cpp --swa-full: sliding layers get the whole context
    binding: str = ""  # a Python binding whose defaults differ from llama-server's ("llama-cpp-python")
    layers_default: bool = False  # gpu_layers_cap is the binding's own default (llama-cpp-python: 0), not written
    offload: Offload = Offload()  # what the command keeps on the host (-ot, --cpu-moe, --n-cpu-moe, -nkvo, --cpu-offload-gb)
    dtype: str = ""  # the model dtype the engine runs: vLLM/SGLang --dtype ("auto" their rule; "": the file's)
    weights_note: str = ""  # how the weights were converted to that dtype (fit/weights_dtype.py), shown with the rules
    gpu_arch: str = ""  # vLLM: "hopper", "blackwell", "ampere" (its hybrid-Mamba kernels differ); "": unknown
    training: Any = None  # a training launch (fit/training/steps.py TrainingRun): sized by its step, no KV cache


def run_of(engine: Engine, settings: Settings, tp: int = 1) -> kv_rules.Run:
    """The engine settings the KV rules read (fit/kv.py ``Run``)."""
    batched = settings.batched_tokens or (VLLM_BATCHED_BIG if engine.name == "vllm" else VLLM_BATCHED_SMALL)
    return kv_rules.Run(ubatch=settings.ubatch, batch=settings.batch, unified=settings.unified,
                        flash_attn=settings.flash_attn, swa_full=settings.swa_full, v_type=settings.v_type,
                        batched_tokens=batched, block=settings.block_size, prefix_caching=settings.prefix_caching,
                        gpu=settings.gpu_arch, tp=tp, dtype=settings.dtype)
