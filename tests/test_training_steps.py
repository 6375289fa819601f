"""A training step on a set of GPUs (fit/training/steps.py) as a plan decides it: fits exactly when the peak
and its allowance fit the tightest GPU, the model's config read, one GPU sized as one process, the host's
free memory in the note as it is, and the fewest nodes found up to MAX_NODES (issue 37, seed 38 mut-c)."""

from __future__ import annotations

import json
from dataclasses import replace

from gpu_launch.fit.training import memory
from gpu_launch.fit.training.steps import MAX_NODES, TrainingRun, nodes_needed, step_on

from test_training_memory_rules import BASE, CONFIG, llama8b

GiB = 1 << 30
RUN = TrainingRun(setup=replace(BASE, gradient_checkpointing=True), config_json=json.dumps(CONFIG))


def _need(p) -> int:  # noqa: ANN001
    return p.peak_bytes + p.allowance_bytes


def test_one_gpu_is_one_process_sized_with_the_models_config():
    model = llama8b()
    run = TrainingRun(setup=replace(BASE, micro_batch=4), config_json=json.dumps(CONFIG))  # peaks in backward
    step = step_on(model, run, [80 * GiB], None)
    assert step.peak == memory.peak(model, CONFIG, run.setup, 1)
    assert step.peak != memory.peak(model, None, run.setup, 1)  # the config's MLP matters to this setup
    assert step.peak != memory.peak(model, CONFIG, replace(run.setup, sharding="ddp"), 2)


def test_fits_exactly_when_peak_and_allowance_fit_the_tightest_gpu():
    model = llama8b()
    need = _need(step_on(model, RUN, [80 * GiB], None).peak)
    assert step_on(model, RUN, [need], None).fits
    assert not step_on(model, RUN, [need - 1], None).fits
    assert not step_on(model, RUN, [need + GiB, need - 1], None).fits


def test_the_host_note_shows_the_hosts_free_memory_to_a_tenth_of_a_gib():
    model = llama8b()
    run = replace(RUN, setup=replace(RUN.setup, sharding="zero3", offload_optimizer=True))
    step = step_on(model, run, [80 * GiB, 80 * GiB], 3 * GiB // 2)
    assert step.host_short and not step.fits
    assert step.notes[0].endswith("the host has 1.5 GiB available")


def test_the_fewest_nodes_are_found_up_to_max_nodes_and_no_further():
    model = llama8b()
    run = replace(RUN, setup=replace(RUN.setup, sharding="zero3"))
    assert MAX_NODES == 64
    at_most = _need(step_on(model, replace(run, nnodes=MAX_NODES), [1] * 8, None).peak)
    assert nodes_needed(model, run, [at_most] * 8, None) == MAX_NODES
    assert nodes_needed(model, run, [at_most - 1] * 8, None) is None
