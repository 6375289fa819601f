"""What a step keeps per parameter: the weights as loaded, the trainable parameters (full, LoRA/DoRA,
QLoRA's 4-bit base with its quantisation state), their gradients, the optimizer's states and the
optimizer step's own temporaries. Arithmetic only (no torch): each rule cites the code it follows."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_launch.base.records import dataclass
from gpu_launch.fit.training.setup import TrainingSetup
from gpu_launch.modelfile.facts import ModelFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Linear", "ParamCounts", "Shape", "shapes", "linears", "param_counts", "lora_targets", "element_bytes",
           "state_bytes",
           "step_temporary_bytes"]

#: Bits per element of the dtypes safetensors names (modelfile/safetensors.py DTYPE_BITS, repeated for the
#: ones a training checkpoint holds, so that sizing does not import the reader).
_BITS = {"BF16": 16, "F16": 16, "F32": 32, "F64": 64, "F8_E4M3": 8, "F8_E5M2": 8, "I8": 8, "U8": 8, "I32": 32,
         "I64": 64, "BOOL": 8, "F4": 4}
#: bitsandbytes 4-bit: blocks of 64 with an fp32 absmax each (bitsandbytes/functional.py quantize_4bit,
#: blocksize=64 by default); double quant packs the absmax to 8 bits with an fp32 absmax per 256 of them.
QUANT4_BLOCK = 64
QUANT4_NESTED_BLOCK = 256
#: bitsandbytes 8-bit optimizers: blockwise states, 256 elements a block with an fp32 absmax
#: (bitsandbytes/optim/optimizer.py Optimizer8bit: block_wise=True, blocksize 256); tensors under
#: min_8bit_size (4096 elements) keep 32-bit states.
OPT8_BLOCK = 256
OPT8_MIN_SIZE = 4096


@dataclass(frozen=True)
class Linear:
    """One linear layer of a decoder block: its module name (peft's target name), shape, how many a block."""

    name: str
    fan_in: int
    fan_out: int
    count: int = 1  # the same linear repeated in a block (MoE experts)
    expert: bool = False  # an expert's linear (transformers v5 keeps them as 3D parameters, not nn.Linear)


@dataclass(frozen=True)
class ParamCounts:
    """Elements of the model, and of what a step trains."""

    total: int  # every parameter (tied embeddings once)
    linear: int  # in the blocks' nn.Linear layers (what QLoRA quantises)
    largest: int  # the largest single trainable tensor (per-parameter optimizers' temporaries)
    trainable: int
    trainable_tensors: int


def _int(config: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def linears(facts: ModelFacts, config: Mapping[str, Any]) -> tuple[Linear, ...]:
    """The linear layers of one decoder block, by the family's modeling code (modeling_llama.py LlamaAttention /
    LlamaMLP; modeling_phi3.py fuses qkv_proj and gate_up_proj; modeling_qwen2_moe.py, modeling_mixtral.py,
    modeling_olmoe.py: routed experts, a router ``gate``, Qwen2-MoE's shared expert)."""
    hy = facts.hyper
    h = hy.hidden_size or hy.n_heads * hy.key_length
    d = hy.key_length
    q, kv = hy.n_heads * d, (hy.kv_heads[0] if hy.kv_heads else hy.n_heads) * d
    inter = _int(config, "intermediate_size", default=4 * h)
    model_type = str(config.get("model_type") or facts.architecture)
    if model_type == "phi3":
        attn = [Linear("qkv_proj", h, q + 2 * kv), Linear("o_proj", q, h)]
    else:
        attn = [Linear("q_proj", h, q), Linear("k_proj", h, kv), Linear("v_proj", h, kv), Linear("o_proj", q, h)]
    experts = hy.expert_count or 0
    if not experts:
        if model_type == "phi3":
            return (*attn, Linear("gate_up_proj", h, 2 * inter), Linear("down_proj", inter, h))
        return (*attn, Linear("gate_proj", h, inter), Linear("up_proj", h, inter), Linear("down_proj", inter, h))
    moe = _int(config, "moe_intermediate_size", default=inter)
    names = ("w1", "w3", "w2") if model_type == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    out = [*attn, Linear("gate", h, experts),
           Linear(names[0], h, moe, experts, True), Linear(names[1], h, moe, experts, True),
           Linear(names[2], moe, h, experts, True)]
    shared = _int(config, "shared_expert_intermediate_size")
    if shared:
        out += [Linear("shared_expert.gate_proj", h, shared), Linear("shared_expert.up_proj", h, shared),
                Linear("shared_expert.down_proj", shared, h), Linear("shared_expert_gate", h, 1)]
    return tuple(out)


def lora_targets(setup: TrainingSetup, block: tuple[Linear, ...]) -> tuple[Linear, ...]:
    """The block's linears a LoRA adapter wraps. peft's "all-linear" is every nn.Linear but the output layer
    (peft/tuners/tuners_utils.py _maybe_include_all_linear_layers); a name matches a module whose name ends
    with it (peft check_target_module_exists). No targets named: peft's default for the family, q_proj and
    v_proj for Llama-like models (peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING).
    transformers v5 keeps a routed MoE's experts as 3-D parameters of one ``experts`` module
    (modeling_qwen2_moe.py Qwen2MoeExperts), which target_modules never matches (peft's target_parameters
    would), and its router as a TopKRouter module (modeling_qwen2_moe.py Qwen2MoeTopKRouter; Mixtral's, OLMoE's,
    Qwen3-MoE's alike), no nn.Linear: neither is adapted, named or under all-linear."""
    targets = setup.lora_targets or (("qkv_proj",) if any(x.name == "qkv_proj" for x in block) else ("q_proj", "v_proj"))
    # (a routed MoE's experts are 3-D parameters of one module, its router a TopKRouter: no nn.Linear peft wraps)
    adaptable = tuple(x for x in block if not x.expert and not (x.name == "gate" and any(y.expert for y in block)))
    if "all-linear" in targets or "all_linear" in targets:
        return adaptable
    return tuple(x for x in adaptable if x.name in targets or x.name.rsplit(".", 1)[-1] in targets)


def _elements(facts: ModelFacts) -> int:
    bits = 0
    for dtype, nbytes in facts.weights.by_type.items():
        bits += nbytes * 8 // _BITS.get(dtype.upper(), 16) * 1
    if not bits:
        return facts.weights.total // 2
    return bits


def param_counts(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup) -> ParamCounts:
    total = _elements(facts)
    block = linears(facts, config)
    layers = facts.hyper.n_layers
    linear = layers * sum(x.fan_in * x.fan_out * x.count for x in block)
    hy = facts.hyper
    h = hy.hidden_size or 0
    vocab = hy.vocab_size or 0
    if setup.method == "full":
        largest = max(vocab * h, max((x.fan_in * x.fan_out for x in block), default=0))
        tensors = layers * (sum(x.count for x in block) + 2) + 3
        return ParamCounts(total, linear, largest, total, tensors)
    targets = lora_targets(setup, block)
    r = setup.lora_r or 8
    per_block = sum(r * (x.fan_in + x.fan_out) + (x.fan_out if setup.dora else 0) for x in targets)
    largest = max((r * max(x.fan_in, x.fan_out) for x in targets), default=0)
    return ParamCounts(total, linear, largest, layers * per_block, layers * len(targets) * (3 if setup.dora else 2))


def shapes(facts: ModelFacts, config: Mapping[str, Any], setup: TrainingSetup) -> tuple[Shape, ...]:
    """The trainable 2-D tensors of the model, by kind (per-tensor optimizers' states: bitsandbytes' 8-bit
    minimum size, Adafactor's factored moments); whatever the trainable count holds beyond them is 1-D (norms,
    biases, DoRA's magnitudes). The input embedding is an ``nn.Embedding``: Trainer keeps its 8-bit states in
    32 bits (trainer.py create_optimizer: ``register_module_override(module, "weight", {"optim_bits": 32})``)."""
    block = linears(facts, config)
    layers = facts.hyper.n_layers
    h, vocab = facts.hyper.hidden_size or 0, facts.hyper.vocab_size or 0
    if setup.method == "full":
        out = [Shape(x.fan_out * x.count, x.fan_in, layers) for x in block]
        out.append(Shape(vocab, h, 1, embedding=True))
        if not facts.weights.tied_embeddings:
            out.append(Shape(vocab, h, 1))
        return tuple(out)
    r = setup.lora_r or 8
    out = []
    for x in lora_targets(setup, block):
        out += [Shape(r, x.fan_in, layers), Shape(x.fan_out, r, layers)]
    return tuple(out)


@dataclass(frozen=True)
class Shape:
    """``count`` trainable tensors of ``rows`` × ``cols`` (an expert's 3-D weight as its rows stacked)."""

    rows: int
    cols: int
    count: int = 1
    embedding: bool = False


def element_bytes(precision: str) -> int:
    """Bytes of a weight as the step holds it: autocast keeps fp32 weights (torch.autocast casts per op)."""
    return 2 if precision in ("bf16", "fp16") else 4


def state_bytes(optimizer: str, trainable: int, tensors: int, dtype_bytes: int, kinds: tuple[Shape, ...] = ()) -> int:
    """The optimizer's states. torch AdamW: exp_avg and exp_avg_sq in the parameter's dtype (torch/optim/adamw.py
    _init_group: zeros_like(p)); its ``step`` lives on the host unless fused/capturable. SGD with momentum:
    one momentum_buffer a parameter (torch/optim/sgd.py: clone of the gradient); without (Trainer's "sgd"):
    none. The per-tensor ones by ``kinds`` (see :func:`shapes`; without them, every tensor taken as large):
    bitsandbytes 8-bit (bitsandbytes/optim/optimizer.py Optimizer8bit init_state): uint8 state1/state2 and an
    fp32 absmax a block of 256, the shared 256-entry fp32 qmaps, but fp32 states for a tensor under
    min_8bit_size (4096) and for the Trainer's embeddings; Adafactor (transformers/optimization.py Adafactor,
    Trainer's beta1=None): fp32 (the gradient upcast first) row and column second moments of a 2-D tensor,
    a whole fp32 second moment of a 1-D one."""
    if optimizer in ("adamw_8bit", "paged_adamw_8bit"):
        if not kinds:
            return 2 * (trainable + 4 * -(-trainable // OPT8_BLOCK))
        small = eight = blocks = 0
        for k in kinds:
            n = k.rows * k.cols
            if k.embedding or n < OPT8_MIN_SIZE:
                small += n * k.count
            else:
                eight += n * k.count
                blocks += -(-n // OPT8_BLOCK) * k.count
        rest = max(0, trainable - small - eight)  # 1-D: norms, biases
        return 2 * eight + 2 * 4 * blocks + 8 * (small + rest) + 2 * OPT8_BLOCK * 4
    if optimizer == "adafactor":
        two_d = sum(k.rows * k.cols * k.count for k in kinds)
        factored = sum((k.rows + k.cols) * k.count for k in kinds)
        return 4 * (factored + max(0, trainable - two_d))
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd_momentum":
        return trainable * dtype_bytes
    return 2 * trainable * dtype_bytes


def step_temporary_bytes(optimizer: str, counts: ParamCounts, dtype_bytes: int) -> int:
    """The optimizer step's own temporaries. foreach AdamW (torch/optim/adamw.py _multi_tensor_adamw:
    ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)``) allocates a sqrt as large as every
    trainable parameter at once; the for-loop and fused kernels one parameter's worth or nothing."""
    if optimizer in ("adamw_torch", "adamw_torch_foreach"):
        return counts.trainable * dtype_bytes
    if optimizer in ("adamw_torch_fused", "sgd", "sgd_momentum"):
        # the fused kernel works in place; SGD adds -lr·grad (or the momentum buffer, updated in place) in place
        # (torch/optim/sgd.py _multi_tensor_sgd: _foreach_mul_, _foreach_add_)
        return 0
    if optimizer == "adafactor":
        # a parameter at a time (Adafactor.step): the gradient and the parameter upcast to fp32 when 16-bit
        # (``grad.float()``, ``p.float()``), ``grad**2 + eps`` and the factored estimate that replaces it
        return (4 if dtype_bytes == 2 else 2) * counts.largest * 4
    return counts.largest * dtype_bytes
