"""What an engine's command line says about the model it will load: the model, the context, the
sequences, the KV cache type, and the placement options the user wrote (or left as placeholders).

Only the spellings each engine documents are read; anything else is left alone. A value that is a
placeholder (``-c {ctx}``) is no number: gpulaunch decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_launch.fit.engines import Engine

__all__ = ["CommandFacts", "read_command"]


@dataclass(frozen=True)
class CommandFacts:
    """What the command names (None: not named). Numbers as written are kept as text where gpulaunch
    must know whether the user left a placeholder (``gpu_layers``, ``gpu_mem_util``, ``tp``)."""

    model: str | None = None
    ctx: int | None = None
    parallel: int | None = None
    kv_type: str | None = None
    v_type: str | None = None  # llama.cpp -ctv
    ubatch: int | None = None
    gpu_layers: str | None = None
    gpu_mem_util: str | None = None
    tp: str | None = None
    kv_unified: bool | None = None  # llama.cpp -kvu / -no-kvu as written; None: not written
    batched_tokens: int | None = None  # vLLM --max-num-batched-tokens
    flash_attn: str | None = None  # llama.cpp -fa/--flash-attn: "on", "off" or "auto" (a bare -fa: on)
    swa_full: bool | None = None  # llama.cpp --swa-full (-swa-full): True when written


_FIELDS: dict[str, dict[str, str]] = {
    "llama.cpp": {"-m": "model", "--model": "model", "-c": "ctx", "--ctx-size": "ctx", "-np": "parallel",
                  "--parallel": "parallel", "-ctk": "kv_type", "--cache-type-k": "kv_type",
                  "-ctv": "v_type", "--cache-type-v": "v_type", "-ub": "ubatch",
                  "--ubatch-size": "ubatch", "-ngl": "gpu_layers", "--gpu-layers": "gpu_layers",
                  "--n-gpu-layers": "gpu_layers"},
    "vllm": {"--model": "model", "--max-model-len": "ctx", "--kv-cache-dtype": "kv_type", "--max-num-seqs": "parallel",
             "--gpu-memory-utilization": "gpu_mem_util", "--tensor-parallel-size": "tp", "-tp": "tp",
             "--max-num-batched-tokens": "batched_tokens"},
    "mlc": {"--model": "model"},
    "tgi": {"--model-id": "model", "--max-total-tokens": "ctx", "--num-shard": "tp"},
    # Transformers scripts have no one spelling; these are the examples' and most scripts' own
    "transformers": {"--model": "model", "--model_name_or_path": "model", "--model-name-or-path": "model",
                     "--model_id": "model", "--model-id": "model"},
}
_NUMBERS = {"ctx", "parallel", "ubatch", "batched_tokens"}
_UNIFIED = {"-kvu": True, "--kv-unified": True, "-no-kvu": False, "--no-kv-unified": False}
#: llama.cpp's flash-attention option takes on/off/auto (common/arg.cpp; older builds: a bare flag)
_FLASH = {"-fa", "--flash-attn"}
_SWA_FULL = {"--swa-full", "-swa-full"}
_MLC_OVERRIDES = {"context_window_size": "ctx", "tensor_parallel_shards": "tp", "max_num_sequence": "parallel"}


#: vLLM's numbers may carry a suffix: lowercase decimal (``25.6k``), uppercase binary (``32K``)
#: (human_readable_int in vllm/engine/arg_utils.py, in newer releases vllm/utils/argparse_utils.py).
_VLLM_SUFFIX = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _int(text: str, suffixes: bool = False) -> int | None:
    text = text.strip()
    if suffixes and text[-1:] in _VLLM_SUFFIX and text.isascii() and len(text) <= 12:
        number, mult = text[:-1], _VLLM_SUFFIX[text[-1]]
        whole, dot, frac = number.partition(".")
        if whole.isdigit() and (not dot or (frac.isdigit() and text[-1].islower())):
            value = int(whole) * mult + (int(frac) * mult // 10 ** len(frac) if dot else 0)
            return value if value < 10**9 else None
        return None
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 9 else None


def read_command(argv: Sequence[str], engine: Engine) -> CommandFacts:
    """The facts ``argv`` (the whole command, program first) states for ``engine``."""
    table = _FIELDS.get(engine.name, {})
    found: dict[str, str] = {}
    args = list(argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=")
        if arg.startswith("-") and name in table:
            if eq:
                value, i = inline, i + 1
            elif i + 1 < len(args):
                value, i = args[i + 1], i + 2
            else:
                break
            found.setdefault(table[name], value)
            continue
        if engine.name == "llama.cpp" and name in _FLASH:
            from gpu_launch.fit.kv_units import FLASH_ATTN

            value = inline if eq else args[i + 1] if i + 1 < len(args) else ""
            mode = FLASH_ATTN.get(value.strip().lower())
            found.setdefault("flash_attn", mode or "on")
            i += 1 if eq or mode is None else 2
            continue
        if engine.name == "llama.cpp" and arg in _SWA_FULL:
            found.setdefault("swa_full", "1")
            i += 1
            continue
        if engine.name == "llama.cpp" and arg in _UNIFIED:
            found.setdefault("kv_unified", "1" if _UNIFIED[arg] else "")
            i += 1
            continue
        if engine.name == "mlc" and name == "--overrides" and (eq or i + 1 < len(args)):
            text = inline if eq else args[i + 1]
            for part in text.split(";"):
                key, _, value = part.partition("=")
                if key.strip() in _MLC_OVERRIDES:
                    found.setdefault(_MLC_OVERRIDES[key.strip()], value.strip())
            i += 1 if eq else 2
            continue
        i += 1
    model = found.get("model")
    if model is None and engine.name in ("vllm", "mlc") and args[:1] in (["serve"], ["chat"]) and len(args) > 1 \
            and not args[1].startswith("-"):
        model = args[1]  # `vllm serve MODEL`, `mlc_llm serve MODEL`, `mlc_llm chat MODEL`: the word after the verb
    numbers = {k: _int(v, suffixes=engine.name == "vllm") for k, v in found.items() if k in _NUMBERS}
    return CommandFacts(model=model, ctx=numbers.get("ctx"), parallel=numbers.get("parallel"),
                        kv_type=found.get("kv_type"), v_type=found.get("v_type"), ubatch=numbers.get("ubatch"), gpu_layers=found.get("gpu_layers"),
                        gpu_mem_util=found.get("gpu_mem_util"), tp=found.get("tp"),
                        batched_tokens=numbers.get("batched_tokens"), flash_attn=found.get("flash_attn"),
                        swa_full=True if "swa_full" in found else None,
                        kv_unified=None if "kv_unified" not in found else bool(found["kv_unified"]))
