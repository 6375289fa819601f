"""From a request to a sizing: which model, which engine, what context, sequences and KV type.

``--fit`` names a model (a path, a cached Hugging Face id, or the word ``model`` for the one the
command names), and the engine's command line says the rest. Explicit gpulaunch options win over
what the command says (``--ctx`` over ``-c``/``--max-model-len``, ``--kv-type`` over
``-ctk``/``--kv-cache-dtype``...), which win over the model's own trained context. Imported only
when a model is involved, so a launch without one pays nothing for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from gpu_launch.errors import ModelFileError, UsageError

# Annotations only: importing typing costs ~3 ms of every launch (docs/performance.md).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpu_launch.fit.engines import Engine
    from gpu_launch.fit.plan import Sizing
    from gpu_launch.modelfile.facts import ModelFacts

__all__ = ["MODEL_WORD", "is_model_ref", "sizing_of", "DEFAULT_CTX"]

MODEL_WORD = "model"  # --fit model: the model the command names
DEFAULT_CTX = 4096  # when neither gpulaunch, the command nor the model says (a model file always should)
_PLACEHOLDER = "{gpu_layers}"


def is_model_ref(value: Any) -> bool:
    """``--fit`` was given a model (text), not a size."""
    return isinstance(value, str)


def _default_engine(model: ModelFacts) -> Engine:
    from gpu_launch.fit.engines import ENGINES

    return ENGINES["llama.cpp" if model.format == "gguf" else "mlc" if model.format == "mlc" else "vllm"]


def _read(source: str, environ: Mapping[str, str]) -> ModelFacts:
    try:
        from gpu_launch.modelfile.read import read_model
    except ImportError:  # the readers are another stage; say so rather than fail on an import
        raise ModelFileError(f"cannot read {source!r}: this build has no model-file readers",
                             hint="give a size instead, e.g. --fit 60GiB") from None
    return read_model(source, environ=environ)


def sizing_of(ref: str, argv: Sequence[str], options: Mapping[str, Any],
              environ: Mapping[str, str] | None = None) -> Sizing:
    """The sizing for model ``ref`` run by ``argv`` (may be empty), with gpulaunch's ``options``
    (``ctx``, ``parallel``, ``kv_type``, ``engine``, ``reserve``) winning over the command's own."""
    from gpu_launch.fit import command as fit_command
    from gpu_launch.fit import engines, kv, plan
    from gpu_launch.hardware.host import memory_available

    env = os.environ if environ is None else environ
    engine = options.get("engine") or (engines.detect(argv) if argv else None)
    said = fit_command.read_command(argv, engine) if argv and engine is not None else fit_command.CommandFacts()
    source = ref
    if ref == MODEL_WORD:
        if not argv:
            raise UsageError("--fit model: there is no command to read the model from",
                             hint="name the model: --fit ./model.gguf, or put the engine's command after --")
        if said.model is None:
            raise UsageError(f"the command ({os.path.basename(argv[0])!r}) names no model gpulaunch can read",
                             hint="name it: --fit ./model.gguf (or -m/--model in the command)")
        source = said.model
    model = _read(source, env)
    if engine is None:
        engine = _default_engine(model)
        said = fit_command.read_command(argv, engine) if argv else said
    ctx, ctx_from = options.get("ctx"), "--ctx"
    if ctx is None and said.ctx:
        ctx, ctx_from = said.ctx, "the command"
    if ctx is None and model.hyper.context_length:
        ctx, ctx_from = model.hyper.context_length, "the model's trained context"
    if ctx is None:
        ctx, ctx_from = DEFAULT_CTX, "gpulaunch's default"
    kv_type = options.get("kv_type") or (kv.parse_kv_type(said.kv_type, "the command's KV cache type")
                                         if said.kv_type and not said.kv_type.startswith("{") else "f16")
    # llama.cpp's -ctk types only K: V stays f16 unless -ctv says otherwise (--kv-type sets both)
    v_type = None if options.get("kv_type") else (
        kv.parse_kv_type(said.v_type, "the command's V cache type") if said.v_type and not said.v_type.startswith("{")
        else "f16" if engine.name == "llama.cpp" else None)
    # llama-server with no -np runs 4 slots over one unified cache ("n_parallel is set to auto, using
    # n_parallel = 4 and kv_unified = true", tools/server); with -np N the cache is split N ways unless -kvu.
    auto_slots = engine.name == "llama.cpp" and bool(argv) and os.path.basename(argv[0]) == "llama-server" \
        and said.parallel is None
    seqs = options.get("parallel") or said.parallel or (4 if auto_slots else 1)
    unified = said.kv_unified if said.kv_unified is not None else (auto_slots or seqs == 1)
    reserve = options.get("reserve")
    util = _float(said.gpu_mem_util)
    ngl = (said.gpu_layers or "").strip().lower()
    units = model.hyper.n_layers + 1 + model.hyper.nextn_layers  # llama.cpp's -ngl units: all of them offloads all
    # -ngl N below that keeps the rest on the CPU by request: size what it asks for, not the whole model
    cap = int(ngl) if engine.layout == "layers" and ngl.isascii() and ngl.isdigit() and int(ngl) < units else None
    self_fit = engine.name == "llama.cpp" and bool(argv) and ngl in ("", "auto")
    partial = engine.layout == "layers" and (ngl in ("", "auto", _PLACEHOLDER) or cap is not None)
    # llama-cpp-python (python -m llama_cpp.server, Llama()) keeps llama.cpp's C API defaults where
    # llama-server changes them: flash attention off (Llama(flash_attn=False)) and the full-size
    # sliding cache (llama_context_default_params: swa_full = true; the binding's server has no option)
    binding = "llama-cpp-python" if engine.name == "llama.cpp" and argv and engines.detect(argv) is engine \
        and os.path.basename(argv[0]).startswith("python") else ""
    flash_attn = said.flash_attn or ("off" if binding else "auto")
    swa_full = bool(said.swa_full) or bool(binding)
    settings = plan.Settings(ctx=ctx, seqs=seqs, unified=unified, kv_type=kv_type, v_type=v_type,
                             flash_attn=flash_attn, swa_full=swa_full, binding=binding,
                             ubatch=said.ubatch or 512, reserve=int(reserve.mib * (1 << 20)) if reserve else None,
                             partial=partial, gpu_mem_util=util, util_placeholder=said.gpu_mem_util == "{gpu_mem_util}",
                             host_free=memory_available() if partial or engine.layout == "sequential" else None,
                             batched_tokens=said.batched_tokens, gpu_layers_cap=cap, ctx_from=ctx_from,
                             self_fit=self_fit)
    return plan.sizing(model, engine, settings)


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 < value <= 1 else None
