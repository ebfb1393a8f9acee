"""internalize: train transformers that reason silently, and find the strategies they use."""
__version__ = "0.1.0"
