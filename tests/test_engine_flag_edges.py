"""The command's own engine flags at their edges, as gpulaunch reads them (issue 28: mutants of
gpu_launch/fit/cmdline/ that the suite let live; benchmarks/mutation.py finds them): what is read, and
the one-line refusal (a UsageError, exit 2) of what no engine would take. Each test says its slip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_launch.errors import UsageError
from gpu_launch.fit import cmdline

SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", "m"]


def test_a_value_flag_at_the_end_of_the_command_is_not_read() -> None:
    # Slip: the bound on the next word dropped: the last flag would read past the command (a crash).
    said = cmdline.read(["vllm", "serve", "m", "--max-model-len"])
    assert said.number("ctx") is None and said.text("model") == "m"


def test_numbers_longer_than_12_characters_are_refused_before_conversion() -> None:
    # Slip: the 12-character limit on a number's text moved by one.
    twelve = cmdline.read(["vllm", "serve", "m", "--gpu-memory-utilization", "0.9000000000"])
    assert twelve.number("gpu_mem_util") == 0.9
    with pytest.raises(UsageError) as exc:
        cmdline.read(["vllm", "serve", "m", "--gpu-memory-utilization", "0.90000000000"])
    assert exc.value.message == "the command's --gpu-memory-utilization 0.90000000000 is not a number for vllm"


def test_sglang_lengths_stop_at_int32() -> None:
    # Slip: the int32 bound of SGLang's --context-length one past 2**31 - 1.
    assert cmdline.read([*SGLANG, "--context-length", "2147483647"]).number("ctx") == 2147483647
    with pytest.raises(UsageError) as exc:
        cmdline.read([*SGLANG, "--context-length", "2147483648"])
    assert exc.value.message == "the command's --context-length 2147483648 is out of range for sglang"


def test_mlc_takes_a_memory_fraction_below_one() -> None:
    # Slip: MLC's gpu_memory_utilization bound moved above 1, so that no fraction is accepted.
    said = cmdline.read(["mlc_llm", "serve", "m", "--overrides", "gpu_memory_utilization=0.5"])
    assert said.number("gpu_mem_util") == 0.5


@pytest.mark.parametrize("text, tokens", [("2k", 2000), ("2K", 2048), ("1m", 1_000_000), ("1M", 1 << 20),
                                          ("1.5k", 1500), ("8.03k", 8029), ("25.6k", 25600)])
def test_vllm_lengths_take_its_decimal_and_binary_suffixes(text: str, tokens: int) -> None:
    # Slip: a suffix's multiplier changed (vLLM's human_readable_int: k m g t decimal, K M G T binary).
    # A decimal is read as vLLM reads it, int(float(number) * multiplier): 8.03k is 8029 tokens there.
    assert cmdline.read(["vllm", "serve", "m", "--max-model-len", text]).number("ctx") == tokens


def test_a_port_may_be_65535_and_no_more() -> None:
    # Slip: the last port refused.
    argv = ["vllm", "serve", "m", "--data-parallel-rpc-port"]
    assert cmdline.read([*argv, "65535"]).number("dp_rpc_port") == 65535
    with pytest.raises(UsageError):
        cmdline.read([*argv, "65536"])


def test_mlc_overrides_skip_keys_gpulaunch_does_not_read() -> None:
    # Slip: an override key gpulaunch has no use for taken as one of its own (a crash).
    said = cmdline.read(["mlc_llm", "serve", "m", "--overrides", "prefill_mode=chunked;gpu_memory_utilization=0.5"])
    assert said.number("gpu_mem_util") == 0.5


@pytest.mark.parametrize("argv, flag, meaning, least, most", [
    (["accelerate", "launch"], "--main_process_port", "master_port", 1, 65535),
    (["deepspeed"], "--num_nodes", "nnodes", 1, 1 << 20),
    (SGLANG, "--pp-size", "pp", 1, None),
    (["vllm", "serve", "m"], "-pp", "pp", 1, None),
    (["vllm", "serve", "m"], "--data-parallel-start-rank", "dp_start_rank", 0, 1 << 20),
    (["python", "-m", "llama_cpp.server", "--model", "m"], "--port", "port", 0, 65535),  # 0: any free port
])
def test_engine_numbers_are_read_up_to_their_bounds(argv: list[str], flag: str, meaning: str, least: int,
                                                    most: int | None) -> None:
    # Slips: a bound of an engine's flag table moved (one pipeline stage refused, a port or a rank too
    # many accepted or refused).
    tail = ["train.py"] if argv[0] in ("accelerate", "deepspeed") else []
    for value in (least, most):
        if value is not None:
            assert cmdline.read([*argv, flag, str(value), *tail]).number(meaning) == value
    if most is not None:
        with pytest.raises(UsageError) as exc:
            cmdline.read([*argv, flag, str(most + 1), *tail])
        engine = "llama-cpp-python" if "llama_cpp.server" in argv else argv[0]
        assert exc.value.message == f"the command's {flag} {most + 1} is out of range for {engine}"


def test_vllm_lengths_in_decimal_trillions_are_read() -> None:
    # Slip: the multiplier of "t" changed (vLLM's human_readable_int: 10**12): 0.002t is 2,000,000,000
    # tokens, within int32, and 0.003t past it.
    assert cmdline.read(["vllm", "serve", "m", "--max-model-len", "0.002t"]).number("ctx") == 2_000_000_000
    with pytest.raises(UsageError) as exc:
        cmdline.read(["vllm", "serve", "m", "--max-model-len", "0.003t"])
    assert exc.value.message == "the command's --max-model-len 0.003t is out of range for vllm"


@pytest.mark.parametrize("flags, sliding_cells", [
    ([], 1536),  # -ub 512 (llama-server's default): pad256(1024 + 512)
    (["-ub", "4096"], 3072),  # the default -b 2048 caps it: pad256(1024 + 2048)
    (["-b", "4096", "-ub", "4096"], 5120),  # a larger -b lets the micro-batch grow: pad256(1024 + 4096)
    (["-b", "256"], 1280),  # a smaller -b shrinks it below the default -ub: pad256(1024 + 256)
])
def test_llama_cpps_micro_batch_is_capped_by_its_batch(tmp_path: Path, flags: list[str], sliding_cells: int) -> None:
    # llama_context: n_ubatch = min(n_batch, n_ubatch); a sliding layer holds pad256(window + n_ubatch)
    # cells (llama-kv-cache.cpp). Gemma-3 4B at -c 8192: 29 sliding layers (window 1024) and 5 global
    # ones of 8192 cells; a row is 4 KV heads x 256 x K and V x f16. Slips: llama.cpp's default -b
    # (2048) moved; and, found by the mutation run, -b read but never used: `-b 4096 -ub 4096` was
    # planned at 3072 sliding cells, less than llama.cpp allocates.
    from tests.family_fixtures import write_family
    from tests.test_plan_cli import plan_json

    model = write_family(tmp_path, "gemma-3-4b")
    doc = plan_json("--snapshot", "dgx-h100", "plan", "--json", "--", "llama-server", "-m", str(model),
                    "-c", "8192", "-np", "1", *flags)
    assert doc["kv_cache_bytes"] == (5 * 8192 + 29 * sliding_cells) * 4 * 256 * 2 * 2


def test_launchers_and_mlc_range_edges() -> None:
    # Seed 39 slips: accelerate's --zero_stage up to 4, DeepSpeed's --num_nodes bound shifted to 0, MLC's
    # max_num_sequence from 0.
    assert cmdline.read(["accelerate", "launch", "--zero_stage", "3", "train.py"]).number("zero_stage") == 3
    with pytest.raises(UsageError) as exc:
        cmdline.read(["accelerate", "launch", "--zero_stage", "4", "train.py"])
    assert exc.value.message == "the command's --zero_stage 4 is out of range for accelerate"
    assert cmdline.read(["deepspeed", "--num_nodes", "2", "train.py"]).number("nnodes") == 2
    assert cmdline.read(["mlc_llm", "serve", "m", "--overrides", "max_num_sequence=1"]).number("parallel") == 1
    with pytest.raises(UsageError) as exc:
        cmdline.read(["mlc_llm", "serve", "m", "--overrides", "max_num_sequence=0"])
    assert exc.value.message == "the command's max_num_sequence=0 is out of range for mlc"
