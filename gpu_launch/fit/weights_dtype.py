"""The weights as a tensor-parallel engine holds them: in the model dtype it resolves, not the file's.

vLLM 0.33.0 builds every parameter in the model dtype (``set_default_torch_dtype(model_config.dtype)``
in its model loaders) and casts the checkpoint's tensors into them as it loads. ``--dtype auto``
resolves that dtype with ``_resolve_auto_dtype`` (vllm/config/model.py): a float32 config is run
in the platform's first supported dtype ("Downcast for float32 models": bf16 on CUDA, 2 bytes), a
16-bit one in its own; ``--dtype float32`` keeps 4 bytes a parameter (and upcasts a 16-bit file),
``--dtype bfloat16``/``half`` 2. SGLang, TGI and MLC-LLM run float32 checkpoints in half precision
too. The Mamba mixers keep their ``A`` in float32 whatever the dtype (vllm/model_executor/layers/
mamba/mamba_mixer.py: ``nn.Parameter(torch.empty(..., ssm_state_size, dtype=torch.float32))``).

Exact where the file's tensors are of one floating type (a float32 or a bf16 checkpoint); with
several types (quantized weights beside 16-bit scales, float32 norms beside bf16 matrices) the
file's bytes stand when the engine casts down, and are scaled by the largest factor when it casts
up: never under what the engine holds.
"""

from __future__ import annotations

from gpu_launch.fit.kv_units import MODEL_DTYPES
from gpu_launch.modelfile.facts import ModelFacts
from gpu_launch.base.records import replace

__all__ = ["FLOAT_BYTES", "as_run"]

#: safetensors' floating types and their bytes an element.
FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


def _target(model: ModelFacts, dtype: str) -> int:
    """The engine's model dtype in bytes: --dtype as given, else auto's rule on the config's dtype."""
    return MODEL_DTYPES.get(dtype, 0) or (2 if model.hyper.dtype_bytes >= 4 else model.hyper.dtype_bytes)


def as_run(model: ModelFacts, dtype: str) -> tuple[ModelFacts, str]:
    """(the model with its weights in the engine's dtype, a note saying so; "" when nothing changes)."""
    w = model.weights
    if not dtype or model.format != "safetensors" or not w.by_type:
        return model, ""
    target = _target(model, dtype)
    floats = {FLOAT_BYTES.get(t) for t in w.by_type}
    if None in floats or len(floats) != 1:  # several types: the bound (never under)
        sizes = [b for b in floats if b]
        if not sizes or target <= min(sizes):
            return model, ""
        num, den = target, min(sizes)
    else:
        only = floats.pop()
        num, den = target, only if only else target  # (None was ruled out above; mypy cannot see it)
    if num == den:
        return model, ""

    def scaled(n: int) -> int:
        return -(-n * num // den)

    h = model.hyper
    # Mamba-1 mixers hold A (inner x state values) in float32 whatever the model dtype
    a_f32 = h.ssm.get("inner_size", 0) * h.ssm.get("state_size", 0) if h.state_kind == "mamba" else 0
    layers = []
    for il, n in enumerate(w.layers):
        kept = a_f32 * den if a_f32 and h.is_recurrent(il) and n >= a_f32 * den else 0
        layers.append(scaled(n - kept) + (a_f32 * 4 if kept else 0))
    new = replace(w, layers=tuple(layers), token_embedding=scaled(w.token_embedding), output=scaled(w.output),
                  other=scaled(w.other), nextn=scaled(w.nextn))
    # by type as held (idempotent: a second pass finds one type of the target's size and changes nothing)
    new = replace(new, by_type={{2: "BF16", 4: "F32", 8: "F64"}.get(target, "BF16"): new.total + new.nextn})
    word = {2: "16-bit", 4: "float32", 8: "float64"}.get(target, f"{target}-byte")
    why = f"--dtype {dtype}" + (" (vLLM's _resolve_auto_dtype)" if dtype == "auto" else "")
    note = (f"weights in {word} as the engine loads them ({why}): {w.total / (1 << 30):.2f} GiB in the files, "
            f"{new.total / (1 << 30):.2f} GiB on the GPUs")
    return replace(model, weights=new), note
