"""MLC-LLM compiled model folders: ``mlc-chat-config.json`` and the JSON index of the weight shards.

The folder ``mlc_llm convert_weight`` + ``gen_config`` write holds ``mlc-chat-config.json``
(``model_type``, ``quantization``, ``model_config`` with the Transformers-style layer and head
counts, ``context_window_size``, ``prefill_chunk_size``, ``tensor_parallel_shards``...) and the
shards ``params_shard_N.bin`` indexed by ``tensor-cache.json`` (called ``ndarray-cache.json``
before mlc-llm 0.20 / web-llm 0.2.84): ``records`` = one per shard (``dataPath``, ``nbytes``)
each with its parameters' ``name``, ``shape``, ``dtype``, ``nbytes``, ``byteOffset``. Parameter
names follow the Transformers model (``model.layers.N...q_weight``), so they group the same way.
"""

from __future__ import annotations

from pathlib import Path

from gpu_launch.errors import ModelFileError
from gpu_launch.modelfile.bounded import MIB, load_json, overlap, plain_name, read_small, regular_size
from gpu_launch.modelfile.facts import ModelFacts
from gpu_launch.modelfile.grouping import group
from gpu_launch.modelfile.hfconfig import architecture, hyper_from_config, text_config
from gpu_launch.base.text import printable

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs a launch ~3 ms
    from typing import Any

__all__ = ["read_mlc", "INDEX_NAMES"]

INDEX_NAMES = ("tensor-cache.json", "ndarray-cache.json")
MAX_JSON = 64 * MIB
#: JSON objects, lists and items in either file: a parameter's record is ~10 (Llama-3.1-70B in q4f16_1
#: lists ~1,500 parameters), so this is room for 200,000 (counted before parsing: bounded.Cursor.take_json)
MAX_JSON_ITEMS = 1 << 21


def _json_object(path: Path) -> tuple[dict[str, Any], int]:
    label = f"{path.name} {printable(str(path))}"
    raw = read_small(str(path), label, MAX_JSON, MAX_JSON_ITEMS)
    data = load_json(raw, label)
    if not isinstance(data, dict):
        raise ModelFileError(f"{label}: a JSON {type(data).__name__}, not an object")
    return data, len(raw)


def _int(value: Any) -> int | None:
    """A byte count or offset: a whole number from 0 to 2^63 - 1 (no file is larger), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else None


def _params(index: dict[str, Any], folder: Path, label: str) -> list[tuple[str, str, int]]:
    shards = index.get("records")
    if not isinstance(shards, list):
        raise ModelFileError(f"{label}: no records list of weight shards")
    params: list[tuple[str, str, int]] = []
    spans: dict[str, list[tuple[int, int, str]]] = {}  # data file -> (begin, end, parameter)
    for shard in shards:
        if not isinstance(shard, dict) or not isinstance(shard.get("dataPath"), str) or \
                not isinstance(shard.get("records"), list):
            raise ModelFileError(f"{label}: a shard record without dataPath or records")
        data_path = plain_name(shard["dataPath"], label, "shard")
        file = folder / data_path
        if not file.exists():
            raise ModelFileError(f"{label}: weight shard {printable(data_path)} is missing",
                                 hint="download or convert the model again")
        size = regular_size(str(file), f"weight shard {printable(str(file))}")
        for p in shard["records"]:
            name = p.get("name") if isinstance(p, dict) else None
            nbytes, offset = (_int(p.get("nbytes")), _int(p.get("byteOffset"))) if isinstance(p, dict) else (None, None)
            if not isinstance(name, str) or nbytes is None or offset is None:
                raise ModelFileError(f"{label}: a parameter in {printable(data_path)} lacks name, nbytes or byteOffset")
            if offset + nbytes > size:
                raise ModelFileError(f"{label}: parameter {printable(name)} ends at byte {offset + nbytes} of "
                                     f"{printable(data_path)}, past its end ({size} bytes)",
                                     hint="the shard may be incomplete: download it again")
            dtype = p.get("dtype")
            params.append((name, printable(dtype) if isinstance(dtype, str) else "?", nbytes))
            spans.setdefault(data_path, []).append((offset, offset + nbytes, name))
    for data_path, found in spans.items():
        shared = overlap(found, "parameters")  # else one 1 GB shard could claim 30 GiB of weights
        if shared:
            raise ModelFileError(f"{label}: {shared} of {printable(data_path)}",
                                 hint="the index is damaged: convert the model again")
    return params


def read_mlc(source: str, folder: str | Path) -> ModelFacts:
    folder = Path(folder)
    config_path = folder / "mlc-chat-config.json"
    config, read = _json_object(config_path)
    label = f"MLC config {printable(str(config_path))}"
    model_config = config.get("model_config")
    if not isinstance(model_config, dict):
        model_config = {}
    merged: dict[str, Any] = {**{k: v for k, v in config.items() if k != "model_config"}, **model_config}
    merged.setdefault("model_type", config.get("model_type"))
    text = text_config(merged)
    window = _int(text.get("context_window_size"))
    if window:  # the compiled model's own limit: MLC-LLM cannot run past it, whatever the model was trained for
        text = {**text, "max_position_embeddings": window}
    if (_int(config.get("sliding_window_size")) or 0) > 0 and not text.get("sliding_window"):
        text = {**text, "sliding_window": config["sliding_window_size"]}
    hyper = hyper_from_config(text, label)
    index_path = next((folder / n for n in INDEX_NAMES if (folder / n).exists()), None)
    if index_path is None:
        raise ModelFileError(f"model directory {printable(str(folder))}: mlc-chat-config.json but no "
                             f"{' or '.join(INDEX_NAMES)}", hint="the folder lacks the converted weights' index")
    index, n = _json_object(index_path)
    read += n
    weights = group(_params(index, folder, f"{index_path.name} {printable(str(index_path))}"), hyper.n_layers)
    quant = config.get("quantization")
    return ModelFacts(source=source, files=(str(config_path), str(index_path)), format="mlc",
                      architecture=printable(architecture(text)), hyper=hyper, weights=weights, header_bytes=read,
                      name=printable(folder.name), dtype=printable(quant) if isinstance(quant, str) else None)
