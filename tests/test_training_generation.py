"""``trl grpo`` as TRL 1.16's GRPOTrainer runs it, as a user planning it sees it, no torch: TRL 1.16's defaults
(completions of 512 tokens, no prompt cap: the prompt's length an assumption the plan states), the generation
(``model.generate`` on the training GPU: its KV cache for the whole generation batch) as its own moment, the
reference model when beta > 0, vLLM's server and colocate modes. PyTorch's count of GRPOTrainer's real steps
is tests/test_training_memory_grpo.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit.training import memory_generation
from gpu_launch.fit.training.forms import read_launch
from gpu_launch.fit.training.forms_common import to_setup
from gpu_launch.fit.training.memory import peak, phases
from test_training_memory_rules import CONFIG, GiB, L, V, llama8b
from tests.cli_run import clean_env
from tests.docs_fixtures import llama_8b_safetensors

#: Llama-3.1-8B's K and V a token in bf16: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes
KV_TOKEN = L * 8 * 128 * 2 * 2


def grpo(*words: str, **options: object):
    launch = read_launch(["trl", "grpo", "--model_name_or_path", "./M", *words], {})
    return to_setup(launch, "./M", "bfloat16", options)


def test_trl_grpo_takes_trl_1_16s_defaults_and_says_the_prompt_is_assumed() -> None:
    s = grpo("--use_peft")
    # GRPOConfig: max_completion_length 512, no max_prompt_length; the Trainer's batch 8; TRL's fused head
    assert (s.completion_len, s.seq_len, s.micro_batch, s.loss, s.reference_model, s.vllm) == \
        (512, 1024, 8, "fused", False, "")
    assert memory_generation.rows(s) == 8  # per_device_train_batch_size × steps_per_generation (1)
    assert any("prompts of 512 tokens" in a and "--train-seq" in a for a in s.assumed), s.assumed


def test_the_generation_batch_is_the_accumulated_batch_or_what_the_launch_says() -> None:
    assert memory_generation.rows(grpo("--gradient_accumulation_steps", "4")) == 32
    assert memory_generation.rows(grpo("--steps_per_generation", "2", "--per_device_train_batch_size", "4")) == 8
    # generation_batch_size is over all ranks: each of 4 GPUs generates a quarter
    assert memory_generation.rows(grpo("--generation_batch_size", "64"), world=4) == 16
    with pytest.raises(UsageError, match="cannot both be set"):
        grpo("--generation_batch_size", "64", "--steps_per_generation", "2")
    with pytest.raises(UsageError, match="2 generations"):
        grpo("--num_generations", "1")


def test_the_lengths_come_from_the_launch_or_train_seq_never_from_trls_old_defaults() -> None:
    s = grpo("--max_completion_length", "256")
    assert (s.completion_len, s.seq_len) == (256, 768)
    said = grpo("--max_completion_length", "256", train_seq=2048)
    assert (said.seq_len, said.completion_len) == (2048, 256)
    assert not any("prompts of" in a for a in said.assumed), said.assumed
    old = grpo("--max_prompt_length", "128")  # an older trl capped prompts: that is the prompt
    assert old.seq_len == 640 and not any("prompts of" in a for a in old.assumed), old.assumed
    with pytest.raises(UsageError, match="the completion alone is 512 tokens"):
        grpo(train_seq=300)


def test_beta_above_zero_keeps_a_reference_copy_of_the_weights_unless_peft() -> None:
    s = grpo("--beta", "0.04")
    peft = grpo("--beta", "0.04", "--use_peft")
    assert s.reference_model and peft.reference_model  # PEFT scores against its base, adapter disabled
    assert not grpo("--beta", "0.0").reference_model
    with_ref, without = phases(llama8b(), CONFIG, s, 1), phases(llama8b(), CONFIG, replace(s, reference_model=False), 1)
    for moment in ("generation", "backward", "optimizer step"):
        assert with_ref[moment]["weights"] - without[moment]["weights"] == llama8b().weights.total
    peft_ref = phases(llama8b(), CONFIG, peft, 1)
    peft_none = phases(llama8b(), CONFIG, replace(peft, reference_model=False), 1)
    for moment in ("generation", "backward", "optimizer step"):  # no copy: the same bytes
        assert peft_ref[moment] == peft_none[moment]


def test_the_cache_is_k_and_v_of_every_layer_for_prompt_and_completion_of_every_generated_row() -> None:
    s = grpo("--use_peft", "--gradient_accumulation_steps", "8")  # 64 completions at once
    assert memory_generation.kv_bytes_per_token(llama8b(), s) == KV_TOKEN == 131072
    gen = memory_generation.generation_bytes(llama8b(), CONFIG, s)
    cache = 64 * 1023 * KV_TOKEN  # the last decode step feeds the last token but one: 8.0 GiB
    assert cache < gen["decode"] < cache + 0.2 * GiB and gen["prefill"] < gen["decode"]
    p = peak(llama8b(), CONFIG, s, 1)
    # no activations and no gradients then: weights, the adapters' states and the cache
    assert p.peak_at == "generation" and p.moment == "the generation" and p.generation_bytes == gen["decode"]
    assert (p.activations_bytes, p.gradients_bytes) == (0, 0) and p.peak_bytes > 23 * GiB
    assert "64 completions at once" in p.rules[-1] and "131,072 bytes a token" in p.rules[-1]


def test_a_small_generation_batch_leaves_the_peak_in_the_step() -> None:
    p = peak(llama8b(), CONFIG, grpo("--use_peft"), 1)
    assert p.peak_at == "backward" and p.generation_bytes == 0
    assert "1.0" in p.rules[-1] and "GiB with generate's temporaries" in p.rules[-1]  # 8 rows: 1.0 GiB of cache


def test_an_fp32_model_caches_fp32_and_a_sliding_layer_only_its_window() -> None:
    s = grpo("--use_peft")
    assert memory_generation.kv_bytes_per_token(llama8b(), replace(s, precision="amp_bf16")) == 2 * KV_TOKEN
    m = llama8b()
    hy = replace(m.hyper, sliding_window=128, sliding=(True, False) * (L // 2))
    windowed = replace(m, hyper=hy)
    assert memory_generation.kv_bytes_per_token(windowed, s) == KV_TOKEN // 2
    assert memory_generation.cache_bytes(windowed, s, 1000, 2) == 2 * (1000 * KV_TOKEN // 2 + 128 * KV_TOKEN // 2)


def test_vllm_server_generates_elsewhere_and_colocate_is_read_with_its_share() -> None:
    server = grpo("--use_vllm", "--vllm_mode", "server")
    assert server.vllm == "server" and "generation" not in phases(llama8b(), CONFIG, server, 1)
    colocate = grpo("--use_vllm", "true")
    assert (colocate.vllm, colocate.vllm_share) == ("colocate", 0.3)
    assert memory_generation.vllm_reserved(colocate, 80 * GiB) == int(0.3 * 80 * GiB)
    with pytest.raises(UsageError, match="share of the GPU's memory"):
        grpo("--use_vllm", "--vllm_gpu_memory_utilization", "1.5")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grpo")
    llama_8b_safetensors(root / "Llama-3.1-8B")
    return root


def plan(work: Path, *words: str) -> subprocess.CompletedProcess[str]:
    argv = ["trl", "grpo", "--model_name_or_path", "./Llama-3.1-8B", "--use_peft", *words]
    return subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "plan", "--json", "--",
                           *argv], capture_output=True, text=True, env=clean_env(), timeout=120, cwd=work)


def test_the_plan_json_names_the_generation_and_colocated_vllms_share(work: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from gpu_launch.views import schemas

    proc = plan(work, "--gradient_accumulation_steps", "8")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.Draft202012Validator(schemas.PLAN).validate(doc)
    t = doc["per_gpu"][0]["training"]
    assert (t["peak_at"], doc["training"]["completion_len"], doc["training"]["vllm"]) == ("generation", 512, None)
    assert t["generation_bytes"] > 8 * GiB and sum(t[k] for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                                                                   "activations_bytes", "loss_bytes", "other_bytes",
                                                                   "generation_bytes")) == t["peak_bytes"]
    colocated = json.loads(plan(work, "--use_vllm", "--vllm_gpu_memory_utilization", "0.5").stdout)
    jsonschema.Draft202012Validator(schemas.PLAN).validate(colocated)
    gpu = colocated["per_gpu"][0]
    # vLLM's half of the H100 (80 GiB total) sits in the allowance, and the plan says so
    assert gpu["allowance_bytes"] - gpu["training"]["allowance_bytes"] == int(0.5 * 81559 * (1 << 20))
    assert colocated["training"]["vllm"] == "colocate" and gpu["training"]["generation_bytes"] == 0
    assert any("vLLM (colocate) reserves" in n for n in colocated["notes"])


def test_the_plan_says_it_sizes_a_padding_mask_and_what_that_means_for_a_batch_without_one(work: Path) -> None:
    """A GRPO step attends through a padding mask (memory_activations._padding_mask): the plan says so, in its text
    and its --json ``assumed``, with what it means for a batch that has none; flash_attention_2 keeps no mask, and
    the line goes."""
    doc = json.loads(plan(work, "--max_completion_length", "256").stdout)
    line = next(a for a in doc["training"]["assumed"] if a.startswith("a padding mask in every step"))
    assert "(batch, 1, s, s) mask a layer" in line and "the plan is over for it, never under" in line, line
    text = subprocess.run([sys.executable, "-m", "gpu_launch", "--snapshot", "dgx-h100", "plan", "--", "trl", "grpo",
                           "--model_name_or_path", "./Llama-3.1-8B", "--use_peft"], capture_output=True, text=True,
                          env=clean_env(), timeout=120, cwd=work)
    assert f"  assumed: {line}" in text.stdout.splitlines(), text.stdout
    flash = json.loads(plan(work, "--attn_implementation", "flash_attention_2").stdout)
    assert not any("padding mask" in a for a in flash["training"]["assumed"]), flash["training"]["assumed"]
    unpadded = peak(llama8b(), CONFIG, replace(grpo("--use_peft"), attention="flash_attention_2"), 1)
    assert unpadded.peak_bytes < peak(llama8b(), CONFIG, grpo("--use_peft"), 1).peak_bytes  # the mask is sized
