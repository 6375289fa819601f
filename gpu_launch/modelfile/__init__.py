"""Model files read without their weights: GGUF, safetensors (+ config.json), MLC-LLM folders and the
local Hugging Face cache, turned into :class:`~gpu_launch.modelfile.facts.ModelFacts`."""
