"""MLC-LLM's command line (``mlc_llm serve|chat M``, ``python -m mlc_llm serve M``).

Read in mlc-ai/mlc-llm ``python/mlc_llm/cli/serve.py``: the model is the positional after the verb;
runtime settings go in one ``--overrides "k=v;k=v"`` value, which ``EngineConfigOverride.from_str``
parses with argparse again (``--tensor_parallel_shards``, ``--pipeline_parallel_stages``,
``--context_window_size``, ``--max_num_sequence``, ``--gpu_memory_utilization``...), so within it the
last key wins, and a second ``--overrides`` replaces the first whole (argparse: last wins).
"""

from gpu_launch.fit.cmdline import Flag, Table

INT32 = 2**31 - 1
_IN = "--overrides"

TABLE = Table("mlc", (
    Flag("overrides", ("--overrides",)),
    Flag("ctx", ("context_window_size",), "int", low=1, high=INT32, within=_IN),
    Flag("tp", ("tensor_parallel_shards",), "int", low=1, high=1 << 20, within=_IN),
    Flag("pp", ("pipeline_parallel_stages",), "int", low=1, high=1 << 20, within=_IN),
    Flag("parallel", ("max_num_sequence",), "int", low=1, high=INT32, within=_IN),
    Flag("gpu_mem_util", ("gpu_memory_utilization",), "float", low=1e-9, high=1.0, within=_IN,
         valid="a fraction of each GPU's memory above 0 and at most 1"),
    Flag("device", ("--device",)),
    Flag("host", ("--host",)),
    Flag("port", ("--port",), "int", low=1, high=65535),
), source="mlc-ai/mlc-llm python/mlc_llm/cli/serve.py (EngineConfigOverride.from_str)", abbreviations=True,
    model_verbs=("serve", "chat"))

#: on a several-node run: refused, with the reason
NODES_REFUSED = ("MLC-LLM shards a model over one machine's GPUs (tensor_parallel_shards) and documents no "
                 "multi-node mode")
