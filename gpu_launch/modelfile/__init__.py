"""Model files read without their weights: GGUF, safetensors (+ config.json), MLC-LLM folders and the
local Hugging Face cache, turned into :class:`~gpu_launch.modelfile.facts.ModelFacts`.

The one entry point is :func:`gpu_launch.modelfile.read.read_model` (imported from there, so that
importing this package costs nothing at start-up). ``bounded`` holds the bounded reads every reader
uses; ``gguf``, ``safetensors``, ``mlc`` the formats; ``hfconfig`` and ``grouping`` the Transformers
conventions (config.json keys, tensor names) that safetensors and MLC share; ``hfcache`` the cache.
"""
