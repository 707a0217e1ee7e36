"""Qwen3-Omni's speech path: the thinker (MoE LLM), the MoE talker, and the talker's prompt."""
