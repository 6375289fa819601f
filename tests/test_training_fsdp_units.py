"""One FSDP rank's gathered units late in backward and in the untied embedding's backward
(fit/training/memory_sharding.py fsdp), unit by unit (issue 37, seed 38 mut-c)."""

from __future__ import annotations

from gpu_launch.fit.training.memory_sharding import fsdp

LAYER, HEAD, EMBED = 1000, 300, 700


def _rank(layers: int, embed: int = EMBED):  # noqa: ANN202
    return fsdp(sharding="fsdp_full", divisor=4, mixed=False, e=2, te=2, weights=10 ** 6, trainable=10 ** 6,
                states_of=lambda b: 0, temp_of=lambda b: 0, total=10 ** 6, layer=LAYER, layers=layers,
                head=HEAD, embed=embed, offload=False)


def test_from_three_layers_a_layers_backward_waits_on_the_next_layers_reduce_scatter_input():
    # the layer gathered, the unit before it prefetched, its gradient and the reduce-scatter input of the unit
    # after it: a layer's (the larger) with three layers, the tail's with two
    assert _rank(3).gathered_late == 2 * (LAYER + max(LAYER, HEAD) + LAYER + LAYER)
    assert _rank(2).gathered_late == 2 * (LAYER + HEAD + LAYER + LAYER)


def test_the_untied_embeddings_backward_holds_it_gathered_with_its_gradient_beside_a_layer():
    assert _rank(3).gathered_embed == 2 * (2 * EMBED + LAYER)
    assert _rank(3, embed=0).gathered_embed == 0
