"""Sizing by the model: KV cache per family, layout per engine, and the plan that the choice uses."""
