"""Tasks: seeded batch samplers that know their ground-truth intermediate values."""
from internalize.tasks.parity_tree import ParityTree, TreeLayout, build_layout, check_sizes
from internalize.tasks.sparse_parity import SparseParity, check_support

__all__ = ["ParityTree", "SparseParity", "TreeLayout", "build_layout", "check_sizes", "check_support"]
