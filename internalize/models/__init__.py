"""Models every system may share: the GPT (hooks, KV cache, sampling, injection) and its GPT-2 twin."""
