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
    if options.get("engine") is None:  # a training launch is sized by its step, never as inference
        from gpu_launch.fit.training.sizing_training import training_sizing

        trained = training_sizing(ref, argv, options, env, _read)
        if trained is not None:
            return trained
    engine = options.get("engine") or (engines.detect(argv) if argv else None)
    said = fit_command.read_command(argv, engine, env) if argv and engine is not None else fit_command.CommandFacts()
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
        said = fit_command.read_command(argv, engine, env) if argv else said
    ctx, ctx_from = options.get("ctx"), "--ctx"
    if ctx is None and said.ctx:
        ctx, ctx_from = said.ctx, f"{said.said.engine}'s default" if said.ctx_default and said.said else "the command"
    if ctx is None and model.hyper.context_length:
        ctx, ctx_from = model.hyper.context_length, "the model's trained context"
    if ctx is None:
        ctx, ctx_from = DEFAULT_CTX, "gpulaunch's default"
    for given, what in ((said.kv_type, "KV"), (said.v_type, "V")):
        if given is not None and not given.strip():  # `--kv-cache-dtype=`: the engine refuses it (no such choice)
            raise UsageError(f"the command's {what} cache type is empty",
                             hint="give the engine a type (e.g. --kv-cache-dtype fp8) or leave the flag out")
    kv_type = options.get("kv_type") or (kv.parse_kv_type(said.kv_type, "the command's KV cache type")
                                         if said.kv_type is not None and not said.kv_type.startswith("{")
                                         else "f16")  # (an empty --kv-cache-dtype= is refused, not taken for f16)
    # llama.cpp's -ctk types only K: V stays f16 unless -ctv says otherwise (--kv-type sets both)
    v_type = None if options.get("kv_type") else (
        kv.parse_kv_type(said.v_type, "the command's V cache type") if said.v_type is not None
        and not said.v_type.startswith("{")
        else "f16" if engine.name == "llama.cpp" else None)
    # llama-server with no -np runs 4 slots over one unified cache ("n_parallel is set to auto, using
    # n_parallel = 4 and kv_unified = true", tools/server); with -np N the cache is split N ways unless -kvu.
    auto_slots = engine.name == "llama.cpp" and bool(argv) and os.path.basename(argv[0]) == "llama-server" \
        and said.parallel is None
    seqs = options.get("parallel") or said.parallel or (4 if auto_slots else 1)
    unified = said.kv_unified if said.kv_unified is not None else (auto_slots or seqs == 1)
    reserve = options.get("reserve")
    util = said.said.number("gpu_mem_util") if said.said is not None else None
    ngl = (said.gpu_layers or "").strip().lower()
    word = said.said.word("gpu_layers") if said.said is not None else None
    units = model.hyper.n_layers + 1 + model.hyper.nextn_layers  # llama.cpp's -ngl units: all of them offloads all
    # -ngl N below that keeps the rest on the CPU by request: size what it asks for, not the whole model
    number = said.said.number("gpu_layers") if said.said is not None and not word else None
    cap = int(number) if engine.layout == "layers" and number is not None and number < units else None
    self_fit = engine.name == "llama.cpp" and bool(argv) and (ngl == "" or word == "auto")
    partial = engine.layout == "layers" and (ngl == "" or word == "auto" or ngl == _PLACEHOLDER or cap is not None)
    # llama-cpp-python (python -m llama_cpp.server, Llama()) keeps llama.cpp's C API defaults where
    # llama-server changes them: flash attention off (Llama(flash_attn=False)) and the full-size
    # sliding cache (llama_context_default_params: swa_full = true; the binding's server has no option)
    binding = "llama-cpp-python" if engine.name == "llama.cpp" and said.said is not None \
        and said.said.engine == "llama-cpp-python" else ""
    flash_attn = said.flash_attn or ("off" if binding else "auto")
    swa_full = bool(said.swa_full) or bool(binding)
    # the tensor-parallel engines run a float32 checkpoint in 16 bits unless --dtype says otherwise
    dtype = kv.parse_model_dtype(said.dtype) if said.dtype and not said.dtype.startswith("{") else (
        "auto" if engine.layout == "tensor" else "")
    off = _offload(said)
    settings = plan.Settings(ctx=ctx, offload=off, seqs=seqs, unified=unified, kv_type=kv_type, v_type=v_type,
                             flash_attn=flash_attn, swa_full=swa_full, binding=binding, dtype=dtype,
                             layers_default=said.said is not None and cap is not None
                             and said.said.defaulted("gpu_layers"),
                             ubatch=said.ubatch or plan.Settings.ubatch, batch=said.batch or plan.Settings.batch,
                             reserve=int(reserve.mib * (1 << 20)) if reserve else None,
                             partial=partial, gpu_mem_util=float(util) if util is not None else None,
                             util_placeholder=said.gpu_mem_util == "{gpu_mem_util}",
                             host_free=memory_available() if partial or engine.layout == "sequential" or off.active
                             else None,
                             batched_tokens=said.batched_tokens, block_size=said.block_size,
                             prefix_caching=said.prefix_caching, gpu_layers_cap=cap,
                             ctx_from=ctx_from,
                             self_fit=self_fit, gpus_per_node=options.get("gpus_per_node"),
                             **_parallel(said, engine, model, bool(argv), env))
    if dtype:  # the weights in the engine's dtype too, not only the cache (a float32 file: half the bytes)
        from gpu_launch.base.records import replace
        from gpu_launch.fit import weights_dtype

        model, note = weights_dtype.as_run(model, dtype)
        settings = replace(settings, weights_note=note)
    return plan.sizing(model, engine, settings)


def _offload(said: Any) -> Any:
    """The command's offload options as the plan reads them (fit/offload.py), in llama.cpp's order."""
    from gpu_launch.fit import offload

    patterns: list[tuple[str, str]] = []
    written: list[str] = []
    choose = False
    for _, meaning, value, how in said.offload:
        if meaning == "override_tensor":
            patterns += offload.parse_overrides(value, how)
        elif meaning == "cpu_moe":
            patterns.append((offload.EXPS, "CPU"))
        elif value == "{n_cpu_moe}":
            choose = True
            continue
        elif value.startswith("{"):
            continue
        elif meaning == "n_cpu_ffn":
            patterns += offload.ffn_patterns(int(value))
        else:
            patterns += offload.moe_patterns(int(value))
        written.append(how)
    return offload.Offload(tuple(patterns), kv_on_host=said.kv_offload is False, choose_moe=choose,
                           cpu_offload_gb=said.cpu_offload_gb or 0.0, said=tuple(written))


#: Engines that run one GPU unless the command says more (vLLM's and SGLang's tp default is 1); TGI
#: shards over every GPU it sees, and MLC-LLM reads its compiled config: gpulaunch picks for those.
_TP_DEFAULT_ONE = ("vllm", "sglang")
_SHOWN = {"vllm": "vLLM", "sglang": "SGLang"}
_SPELLING = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "tgi": "--num-shard",
             "mlc": "tensor_parallel_shards"}


def _parallel(said: Any, engine: Engine, model: ModelFacts, has_command: bool, environ: Mapping[str, str]
              ) -> dict[str, Any]:
    """The parallel sizes the command fixes, checked as the engine checks them (one line, exit 2, with
    the valid choice), as Settings fields. A placeholder leaves the size to gpulaunch."""
    from gpu_launch.fit import stages

    if engine.layout != "tensor" or said.said is None:
        return {}
    ss = said.said

    def fixed(meaning: str) -> int | None:
        value = ss.number(meaning)
        return int(value) if value is not None else None

    tp_text = said.tp  # TGI's --sharded false already made it 1
    tp = int(tp_text) if tp_text is not None and not tp_text.startswith("{") else None
    pp, dp = fixed("pp") or 1, fixed("dp_local") or fixed("dp") or 1
    explicit = tp is not None
    written = [ss.get(m).written for m in ("tp", "pp", "dp_local", "dp", "pcp")
               if ss.get(m) is not None and not ss.get(m).placeholder]
    if engine.name == "tgi" and tp_text == "1" and ss.get("sharded") is not None:
        written.insert(0, ss.get("sharded").written)
    given = " ".join(written)
    fixed_by = f"as the command's {given} says" if given else ""
    if tp is None and ss.get("tp") is None and has_command and engine.name in _TP_DEFAULT_ONE:
        tp = 1
        fixed_by = f"{_SHOWN[engine.name]}'s default with no {_SPELLING[engine.name]}" + (
            f"; the command's {given}" if given else "")
    if tp is not None:
        problem = stages.tp_problem(model, tp)
        if problem:
            choices = ", ".join(str(t) for t in stages.tp_choices(model, 64))
            raise UsageError(f"{engine.name} refuses tensor parallelism {tp} ({ss.get('tp').written}) for "
                             f"{model.name or model.source}: {problem}",
                             hint=f"the sizes it accepts for this model: {choices}; or "
                                  f"{_SPELLING.get(engine.name, 'its tensor-parallel option')} "
                                  "{tp} to let gpulaunch pick")
    if pp > 1:
        why = stages.pp_problem(model, engine.name) or (
            f"the model has {model.hyper.n_layers} layers" if pp > model.hyper.n_layers else None)
        if why:
            raise UsageError(f"{engine.name} refuses {pp} pipeline stages for {model.name or model.source}: {why}",
                             hint="drop the pipeline-parallel option, or use more tensor parallelism")
    nnodes = said.nnodes if said.nnodes and said.nnodes > 1 else 1
    factor = said.ranks_factor
    if nnodes > 1 and (tp or 1) * pp * dp * factor % nnodes:
        raise UsageError(f"the command's ranks ({given or 'tp 1'}) do not split evenly over its --nnodes {nnodes}",
                         hint="make tp × pp a multiple of the nodes")
    return {"tp": tp, "tp_explicit": explicit, "pp": pp, "dp": dp, "ranks_factor": factor,
            "fixed_by": fixed_by, "nnodes": nnodes,
            "node_rank": min(said.node_rank or 0, nnodes - 1),
            "environ": tuple((k, environ[k]) for k in ("VLLM_PP_LAYER_PARTITION",) if k in environ)}
