"""The backward's moments (fit/training/memory_backward.py) one at a time: each rule's bytes exactly, with the
other terms held at zero so that the moment under test is the peak a user is shown (issue 37, seed 38 mut-c:
the final norm's five fp32 tensors, Gemma's closing norm, the head's gradient summed chunk by chunk under
autocast and the end of backward's MLP were all free to change without a test noticing)."""

from __future__ import annotations

from dataclasses import replace

from gpu_launch.fit.training.memory_backward import NORM_BACKWARD_FP32, backward_peak
from gpu_launch.fit.training.setup import TrainingSetup

from test_training_memory_rules import H, I, llama8b

T = 4096  # tokens: micro batch 1 × 4096
SMALL_I = 1024  # an MLP small enough that the norms' fp32 backward is the backward's largest moment
SETUP = TrainingSetup(model="M", launcher="trainer", precision="bf16", micro_batch=1, seq_len=T)


class _NoActivations:
    """Saved activations of nothing: the moments differ only in their own tensors."""
    outside = rope = squared_backward = lora_forward = masks = down_saved = down_adapter = adapter_grad = 0

    def total(self, setup, layers):  # noqa: ANN001, ANN201
        return 0

    def one_layer(self, setup, first=False):  # noqa: ANN001, ANN201
        return 0


def _peak(config, setup=SETUP, model=None, **terms):  # noqa: ANN001, ANN003, ANN202
    args = {"weights": 0, "states": 0, "grads": 0, "head": 0, "loss": 0, "e": 2} | terms
    return backward_peak(model or llama8b(), config, setup, _NoActivations(), **args)


def test_the_final_norms_backward_is_five_fp32_tensors_of_every_token():
    at, terms = _peak({"model_type": "llama", "intermediate_size": SMALL_I})
    assert NORM_BACKWARD_FP32 == 5
    assert (at, terms["other"]) == ("backward", 5 * 4 * H * T)


def test_gemmas_closing_norm_adds_the_gradient_arriving_at_the_layer():
    gemma = replace(llama8b(), architecture="gemma2")
    at, terms = _peak({"model_type": "gemma2", "intermediate_size": SMALL_I}, model=gemma)
    assert (at, terms["other"]) == ("backward", 2 * H * T + 5 * 4 * H * T)


def test_the_heads_gradient_summed_over_chunks_under_autocast_is_one_and_a_half():
    head = 10 ** 11  # a head's gradient larger than anything else alive
    amp = replace(SETUP, precision="amp_bf16", loss="chunked", loss_chunk_tokens=1024)
    at, terms = _peak({"model_type": "llama", "intermediate_size": SMALL_I}, amp, head=head, grads=head, e=4)
    assert at == "backward"
    assert terms["other"] == head + head // 2 + 4 * H * T + 4 * 1024 * H


def test_the_end_of_backward_holds_the_mlps_gradients_of_the_configs_intermediate_size():
    grads = 10 ** 11  # every gradient there: the end of backward is the peak
    at, terms = _peak({"model_type": "llama", "intermediate_size": SMALL_I}, grads=grads)
    assert at == "end of backward"
    assert terms["gradients"] == grads
    assert terms["other"] == 2 * 2 * H * T + 2 * SMALL_I * T


def test_an_fsdp_ranks_first_layer_ends_in_its_input_norm_with_the_whole_unsharded_gradient():
    # issue 34: the layer's gradient (10**11, larger than anything else) is whole only once autograd reaches the
    # layer's first op, when its MLP's and attention's saved tensors are gone: the norm's fp32 input and rsqrt,
    # its five fp32 backward tensors and the gradient arriving, not the MLP's (1.044 of PyTorch's count when
    # both were counted at once)
    unit = 10 ** 11
    at, terms = _peak({"model_type": "llama", "intermediate_size": SMALL_I}, late_weights=7, late_grads=3,
                      late_unit_grads=(unit // 10, unit))
    assert at == "end of backward"
    assert terms["weights"] == 7 + unit
    assert terms["gradients"] == 3
    assert terms["activations"] == (4 * H + 4) * T
    assert terms["other"] == NORM_BACKWARD_FP32 * 4 * H * T + 2 * H * T


def test_an_fsdp_ranks_first_layer_in_its_mlp_holds_only_down_projs_gradient():
    # LoRA: the frozen norm's backward is not run, so the MLP's moment is the layer's: the gradient arriving,
    # down_proj's input's and the product's first gradient (two of e·I a token)
    lora = replace(SETUP, method="lora")
    down = 10 ** 11
    at, terms = _peak({"model_type": "llama", "intermediate_size": SMALL_I}, lora, late_weights=7, late_grads=3,
                      late_unit_grads=(down, 10 * down))
    assert at == "end of backward"
    assert terms["weights"] == 7 + down
    assert terms["other"] == 2 * H * T + 2 * 2 * SMALL_I * T


class _OneLayer(_NoActivations):
    """One layer's saved tensors (the recomputed one under checkpointing), its checkpointed input and RoPE's."""
    rope = 40
    checkpointed_layer = 2 * H
    down_saved = 2 * I  # the product down_proj saves (bf16), released by MulBackward0

    def one_layer(self, setup, first=False):  # noqa: ANN001, ANN201
        return 3 * 10 ** 9


GC = replace(SETUP, gradient_checkpointing=True)


def test_the_last_layers_mlp_backward_has_released_the_product_down_proj_saved():
    # issue 34: by MulBackward0 down_proj's node has run and its saved input (the product, e·I a token) is gone;
    # counted there, a checkpointed step came out 1.081 of PyTorch's count (trl sft, 4,200 tokens)
    head = 10 ** 11  # the head's gradient: the last layer's moments are the backward's largest
    at, terms = backward_peak(llama8b(), {"model_type": "llama", "intermediate_size": I}, GC, _OneLayer(),
                              weights=0, states=0, grads=head, head=head, loss=0, e=2)
    assert at == "backward"
    assert terms["activations"] == 3 * 10 ** 9 + 40 * T - 2 * I * T  # with what every layer reads
    assert terms["other"] == 2 * H * T + 3 * 2 * I * T


def test_the_first_layers_mlp_backward_holds_every_gradient_but_that_layers_and_its_checkpointed_input():
    # issue 34: TRL's DPOTrainer step (checkpointing, 2 x 128 tokens) peaked there, 1.3 % above the end of
    # backward's moment once the product was no longer counted in the last layer's
    grads = 10 ** 9
    model = llama8b()
    at, terms = backward_peak(model, {"model_type": "llama", "intermediate_size": I}, GC, _OneLayer(),
                              weights=0, states=0, grads=grads, head=0, loss=0, e=2)
    layer = grads * model.weights.layers[0] // model.weights.total
    assert at == "end of backward"
    assert terms["gradients"] == grads - layer + 2 * H * I  # down_proj's made, the rest of that layer's to come
    assert terms["activations"] == 3 * 10 ** 9 - 2 * I * T + (2 * H + 40) * T
    assert terms["other"] == 2 * H * T + 3 * 2 * I * T


def test_the_first_layers_mlp_backward_holds_the_masks_the_checkpoint_keeps():
    # issue 34: a checkpointed GRPOTrainer step, its prompts padded, peaked there with the boolean padding mask
    # (batch, 1, s, s), an input of every checkpointed layer, still alive: 0.982 of PyTorch's count without it
    class Masked(_OneLayer):
        masks = 1  # a byte a sequence × position²: sdpa's boolean padding mask

    grads = 10 ** 9
    args = {"weights": 0, "states": 0, "grads": grads, "head": 0, "loss": 0, "e": 2}
    config = {"model_type": "llama", "intermediate_size": I}
    _, bare = backward_peak(llama8b(), config, GC, _OneLayer(), **args)
    at, terms = backward_peak(llama8b(), config, GC, Masked(), **args)
    assert at == "end of backward"
    assert terms["activations"] == bare["activations"] + T * T  # micro-batch 1: one (1, 1, s, s) boolean mask


def test_an_fp32_recomputed_layers_first_norm_saves_the_checkpointed_input_itself():
    # issue 34: in fp32 the norm's upcast is its input, the tensor the checkpoint keeps: counted once (TRL's
    # DPOTrainer, fp32, checkpointing: 1.021 of PyTorch's count with it counted twice, 1.004 once)
    class Fp32(_OneLayer):
        down_saved = 4 * I

    fp32 = replace(GC, precision="fp32")
    at, terms = backward_peak(llama8b(), {"model_type": "llama", "intermediate_size": I}, fp32, Fp32(),
                              weights=0, states=0, grads=10 ** 9, head=0, loss=0, e=4)
    assert at == "end of backward"
    assert terms["activations"] == 3 * 10 ** 9 - 4 * I * T + 40 * T


def test_one_rule_for_the_recomputed_first_norms_input_a_lora_model_under_autocast_at_the_end_of_backward():
    # issue 34: under autocast (fp32 weights) a recomputed layer's first norm saves the checkpoint's own fp32 input,
    # for a LoRA model as for a full fine-tune, in the first layer's MLP at the end of backward as in the last
    # layer's: counted once. Measured (the plain oracle's first-layer window, q,v to all-linear, checkpointing): the
    # first layer's MLP moment 1.006 to 1.009 of PyTorch's count; the generic end of backward (the gradients through
    # the MLP, the checkpoint's input uncounted) was 0.937 for q,v
    class Lora(_OneLayer):
        checkpointed_layer = 4 * H  # the fp32 residual stream
        down_saved = 2 * I + 2 * 8  # down_proj's adapter's 16-bit casts of its input and of lora_A's output
        down_adapter = 8 * (I + H)

    amp = replace(GC, method="lora", precision="amp_bf16")
    grads = 32 * 10 ** 6  # the adapters' gradients, as many in every layer
    model = llama8b()
    at, terms = backward_peak(model, {"model_type": "llama", "intermediate_size": I}, amp, Lora(),
                              weights=0, states=0, grads=grads, head=0, loss=0, e=2)
    assert at == "end of backward"
    assert terms["gradients"] == grads - grads // 32 + 4 * 8 * (I + H)  # down_proj's adapter's made already
    # the recomputed layer but what down_proj's nodes saved, what every layer reads; the checkpoint's input once
    assert terms["activations"] == 3 * 10 ** 9 - (2 * I + 16) * T + 40 * T
    assert terms["other"] == 2 * H * T + 3 * 2 * I * T


def test_the_last_layers_mlp_counts_the_recomputed_first_norms_input_once_for_a_lora_model_in_fp32_too():
    # the same fact in fp32 (the norm's upcast is no copy): the last layer's MLP moment without the checkpoint's
    # input twice (fp32 all-linear LoRA, checkpointing: 1.009 of PyTorch's count, 1.001 since)
    class Fp32(_OneLayer):
        checkpointed_layer = 4 * H
        down_saved = 4 * I  # the product, which down_proj's adapter keeps as it is in fp32

    fp32 = replace(GC, method="lora", precision="fp32")
    head = 10 ** 11  # a large gradient there keeps the last layer's moments the largest
    at, terms = backward_peak(llama8b(), {"model_type": "llama", "intermediate_size": I}, fp32, Fp32(),
                              weights=0, states=0, grads=head, head=head, loss=0, e=4)
    assert at == "backward"
    assert terms["activations"] == 3 * 10 ** 9 - 4 * H * T - 4 * I * T + 40 * T  # with what every layer reads
    assert terms["other"] == 4 * H * T + 3 * 4 * I * T


def test_a_gate_or_up_adapters_backward_holds_its_fp32_output_gradients_after_the_product():
    # issue 34: fp32 adapters on bf16 weights (peft casts the sum back to bf16): after MulBackward0 (its saved
    # tensors and down_proj's input's gradient gone) up_proj's adapter holds its output's gradient in fp32 twice,
    # 8·I a token, more than the product's three e·I: the first layer's window of a checkpointed bf16 all-linear
    # LoRA step was 0.966 of PyTorch's count without it (MLP-only 0.957), 1.001 with it
    class Adapted(_OneLayer):
        adapter_grad = 8 * I

    lora = replace(GC, method="lora")
    head = 10 ** 11  # a large gradient there keeps the last layer's moments the largest
    at, terms = backward_peak(llama8b(), {"model_type": "llama", "intermediate_size": I}, lora, Adapted(),
                              weights=0, states=0, grads=head, head=head, loss=0, e=2)
    assert at == "backward"
    assert terms["activations"] == 3 * 10 ** 9 - 2 * I * T - 2 * 2 * I * T + 40 * T
    assert terms["other"] == 2 * H * T + 2 * 2 * I * T + 8 * I * T
