"""One FSDP rank's gathered units late in backward and in the untied embedding's backward
(fit/training/memory_sharding.py fsdp), unit by unit (issue 37, seed 38 mut-c; issue 34: the layer's own gradient
apart, a tied tail's, offload's)."""

from __future__ import annotations

from gpu_launch.fit.training.memory_sharding import fsdp

LAYER, HEAD, EMBED = 1000, 300, 700


def _rank(layers: int, embed: int = EMBED, offload: bool = False):  # noqa: ANN202
    return _rank_down(layers, 0, embed, offload)


def _rank_down(layers: int, down: int, embed: int = EMBED, offload: bool = False):  # noqa: ANN202
    return fsdp(sharding="fsdp_full", divisor=4, mixed=False, e=2, te=2, weights=10 ** 6, trainable=10 ** 6,
                states_of=lambda b: 0, temp_of=lambda b: 0, total=10 ** 6, layer=LAYER, layers=layers,
                head=HEAD, embed=embed, offload=offload, down=down)


def test_from_three_layers_a_layers_backward_waits_on_the_next_layers_reduce_scatter_input():
    # the layer gathered, the unit before it prefetched and the reduce-scatter input of the unit after it: with
    # three layers a middle layer's (the layer before it, the layer after it); with two the first layer's (the
    # untied embedding prefetched, the second layer's input), larger than the last's (the tail's input)
    assert _rank(3).gathered_late == 2 * (LAYER + LAYER + LAYER)
    assert _rank(2).gathered_late == 2 * (LAYER + EMBED + LAYER)
    # its own unsharded gradient is counted by moment (memory_backward.py): whole, or down_proj's in its MLP
    assert _rank(2).unit_grad == 2 * LAYER
    assert _rank(2).unit_grad_mlp == 0
    assert _rank_down(2, 400).unit_grad_mlp == 2 * 400


def test_tied_the_tail_stays_gathered_and_its_gradient_waits_for_the_embeddings_backward():
    # accelerate groups final norm, embedding and head; nothing to prefetch before the first layer, no
    # reduce-scatter after the last: the layer, one more layer, the tail gathered and its gradient
    assert _rank(2, embed=0).gathered_late == 2 * (LAYER + LAYER + HEAD + HEAD)


def test_under_offload_a_rank_holds_the_same_units_late_in_backward():
    # _fsdp_collectives.py foreach_reduce: the reduce-scatter's output leaves the GPU at once, its input stays
    assert _rank(2, offload=True).gathered_late == _rank(2).gathered_late


def test_the_untied_embeddings_backward_holds_it_gathered_with_its_gradient_beside_a_layer():
    assert _rank(3).gathered_embed == 2 * (2 * EMBED + LAYER)
    assert _rank(3, embed=0).gathered_embed == 0
