"""Transformers-style tensor names (safetensors, MLC-LLM parameters) grouped into :class:`Weights`.

``model.layers.N.``, ``language_model.model.layers.N.``, ``backbone.layers.N.``, ``transformer.h.N.``
and kin are layer N; the input embedding (``embed_tokens``, ``wte``, ``backbone.embeddings``...) is
the token embedding; ``lm_head`` and the final norm are the output; vision and audio towers,
projectors and layers past the model's count (multi-token-prediction heads) are ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpu_launch.modelfile.facts import Weights, layer_number

__all__ = ["group", "layer_number"]

#: Parts of multimodal models that are not the language model's layers, whatever their numbering.
_TOWER = re.compile(r"(^|\.)(vision|visual|vision_tower|vision_model|audio|audio_tower|speech|image|"
                    r"multi_modal_projector|mm_projector|multimodal_projector|embed_vision|embed_audio|"
                    r"vpm|resampler)(_[a-z]+)?\.")
_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|layer|decoder_layers)\.(\d+)\.")
_EMBED = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|tok_embeddings|embeddings|embedding|embed_in|"
                    r"token_embedding|tok_embd)\.")
_HEAD = re.compile(r"(^|\.)(lm_head|embed_out|output)\.")
_FINAL_NORM = re.compile(r"(^|\.)(norm|norm_f|ln_f|final_layernorm|final_layer_norm|final_norm|output_norm)\."
                         r"[a-z_]*$")


def group(tensors: Iterable[tuple[str, str, int]], n_layers: int, nextn: int = 0) -> Weights:
    """``tensors``: (name, dtype name, bytes) for every tensor of the model; layers ``n_layers`` up to
    ``n_layers + nextn`` are the MTP blocks, which vLLM's loaders skip (e.g. DeepseekV2ForCausalLM
    .load_weights: ``get_spec_layer_idx_from_weight_name``): counted apart, placed nowhere."""
    layers = [0] * n_layers
    embedding = output = other = skipped = 0
    by_type: dict[str, int] = {}
    has_head = False
    for name, dtype, nbytes in tensors:
        by_type[dtype] = by_type.get(dtype, 0) + nbytes
        if _TOWER.search(name):
            other += nbytes
            continue
        m = _LAYER.search(name)
        if m:
            index = layer_number(m.group(1), n_layers + nextn)
            if index < n_layers:
                layers[index] += nbytes
            elif index < n_layers + nextn:
                skipped += nbytes
            else:
                other += nbytes
        elif _HEAD.search(name):
            output += nbytes
            has_head = True
        elif _FINAL_NORM.search(name):
            output += nbytes
        elif _EMBED.search(name):
            embedding += nbytes
        else:
            other += nbytes
    return Weights(layers=tuple(layers), token_embedding=embedding, output=output, other=other,
                   tied_embeddings=not has_head and embedding > 0, by_type=by_type, nextn=skipped)
