"""Tasks: seeded batch samplers that know their ground-truth intermediate values."""
from internalize.tasks.parity_tree import ParityTree, TreeLayout, build_layout, check_sizes

__all__ = ["ParityTree", "TreeLayout", "build_layout", "check_sizes"]
