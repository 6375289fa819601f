#!/usr/bin/env python3
"""The floor of reading a machine through NVML, for benchmarks/nvml_path.py: import pynvml, initialise
NVML, read each GPU's memory, shut NVML down. Nothing else: no model, no choice, no reservation."""

import pynvml

pynvml.nvmlInit()
for index in range(pynvml.nvmlDeviceGetCount()):
    pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
pynvml.nvmlShutdown()
