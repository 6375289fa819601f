"""What an engine's command line says about the model it will load: the model, the context, the
sequences, the KV cache type, and the placement the user fixed (or left as placeholders).

The command is read through its engine's table (:mod:`gpu_launch.fit.cmdline`): every spelling the
engine's parser accepts, a repeated option as the engine reads it, its environment variables, and
its valid ranges (a value outside them is one error line, exit 2). A value that is a placeholder
(``-c {ctx}``) is no number: gpulaunch decides it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_launch.fit import cmdline
from gpu_launch.fit.engines import Engine
from gpu_launch.fit.kv_units import FLASH_ATTN
from gpu_launch.base.records import dataclass

__all__ = ["CommandFacts", "read_command"]


@dataclass(frozen=True)
class CommandFacts:
    """What the command names (None: not named). Numbers as written are kept as text where gpulaunch
    must know whether the user left a placeholder (``gpu_layers``, ``gpu_mem_util``, ``tp``, ``pp``...)."""

    model: str | None = None
    ctx: int | None = None
    parallel: int | None = None
    kv_type: str | None = None
    v_type: str | None = None  # llama.cpp -ctv
    ubatch: int | None = None
    batch: int | None = None  # llama.cpp -b: the micro-batch is at most this (n_ubatch = min(n_batch, n_ubatch))
    gpu_layers: str | None = None
    gpu_mem_util: str | None = None
    tp: str | None = None
    kv_unified: bool | None = None  # llama.cpp -kvu / -no-kvu as written; None: not written
    batched_tokens: int | None = None  # vLLM --max-num-batched-tokens
    block_size: int | None = None  # vLLM --block-size (None: its attention backend's choice)
    prefix_caching: bool | None = None  # vLLM --[no-]enable-prefix-caching as written; None: not written
    pp: str | None = None  # pipeline stages (vLLM -pp, SGLang --pp-size, MLC pipeline_parallel_stages)
    dp: str | None = None  # data-parallel replicas (vLLM -dp, SGLang --dp-size)
    ranks_factor: int = 1  # other factors of the GPU count the engine starts (vLLM -pcp)
    nnodes: int | None = None  # the nodes the command itself spreads over (vLLM/SGLang --nnodes)
    node_rank: int | None = None
    notes: tuple[str, ...] = ()
    said: cmdline.Said | None = None  # everything the engine's table read
    flash_attn: str | None = None  # llama.cpp -fa/--flash-attn: "on", "off" or "auto" (a bare -fa: on)
    swa_full: bool | None = None  # llama.cpp --swa-full (-swa-full): True when written
    dtype: str | None = None  # vLLM/SGLang --dtype as written
    offload: tuple[tuple[int, str, str, str], ...] = ()  # llama.cpp (index, meaning, value, as written): -ot, --cpu-moe, --n-cpu-moe
    kv_offload: bool | None = None  # llama.cpp -nkvo (False) / -kvo (True) as written
    cpu_offload_gb: float | None = None  # vLLM --cpu-offload-gb
    ctx_default: bool = False  # ctx is the engine's own default, not written (llama-cpp-python's n_ctx 2048)


def _int(said: cmdline.Said, meaning: str) -> int | None:
    value = said.number(meaning)
    return int(value) if value is not None else None


def read_command(argv: Sequence[str], engine: Engine, environ: Mapping[str, str] | None = None) -> CommandFacts:
    """The facts ``argv`` (the whole command, program first) states for ``engine``, with the
    engine's own variables read from ``environ`` (the environment the command will run with)."""
    own = cmdline.engine_of(argv)  # a form with its own table for this engine (llama-cpp-python's server)
    table = own if own in cmdline.TABLES and cmdline.sized_as(own) == engine.name else \
        engine.name if engine.name in cmdline.TABLES else None
    if table is None:
        return CommandFacts()
    said = cmdline.read(argv, table, environ)
    ctx = _int(said, "ctx")
    if engine.name == "vllm" and said.word("ctx"):  # --max-model-len -1/auto: as long as fits; the model's own
        ctx = None
    unified = said.text("kv_unified")
    tp = said.text("tp")
    if engine.name == "tgi" and (said.text("sharded") or "").strip().lower() == "false":
        tp = "1"  # --sharded false: TGI runs one shard whatever --num-shard says
    pcp = _int(said, "pcp")
    nnodes = _int(said, "nnodes")
    flash = said.word("flash_attn") or said.text("flash_attn")
    caching = said.text("prefix_caching")  # vLLM: "1" --enable-prefix-caching, "0" --no-enable-prefix-caching
    return CommandFacts(model=said.text("model"), ctx=ctx or None, ctx_default=said.defaulted("ctx"),
                        parallel=_int(said, "parallel"),
                        kv_type=said.word("kv_type") or said.text("kv_type"),
                        v_type=said.word("v_type") or said.text("v_type"), ubatch=_int(said, "ubatch"),
                        batch=_int(said, "batch"),
                        gpu_layers=said.text("gpu_layers"), gpu_mem_util=said.text("gpu_mem_util"),
                        tp=tp, pp=said.text("pp"), dp=said.text("dp_local") or said.text("dp"),
                        kv_unified=None if unified is None else unified == "1",
                        batched_tokens=_int(said, "batched_tokens"), block_size=_int(said, "block_size"),
                        prefix_caching=None if caching is None else caching == "1",
                        ranks_factor=pcp or 1,
                        nnodes=nnodes, node_rank=_int(said, "node_rank"), notes=said.notes, said=said,
                        flash_attn=None if flash is None else FLASH_ATTN.get(flash.strip().lower(), "on"),
                        swa_full=True if said.text("swa_full") == "1" else None,
                        dtype=said.text("dtype"),
                        offload=tuple(sorted((st.index, m, st.text, st.written) for m in ("override_tensor", "cpu_moe",
                                                                                          "n_cpu_moe", "n_cpu_ffn")
                                             if (st := said.get(m)) is not None)),
                        kv_offload=None if said.text("kv_offload") is None else said.text("kv_offload") == "1",
                        cpu_offload_gb=float(v) if (v := said.number("cpu_offload_gb")) is not None else None)

