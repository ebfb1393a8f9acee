"""The provable one-layer linear-attention model that internalizes sparse parity one support bit a
stage (docs/sparse_parity.md). Importing this module registers the system."""
from internalize import registry
from internalize.curricula import CurriculumConfig
from internalize.systems.sparse_parity.config import (
    LinearAttentionConfig,
    SparseParityConfig,
    theory_budget,
)
from internalize.theory import TheoryConfig, check

registry.register("sparse_parity", registry.SystemEntry(
    "internalize.systems.sparse_parity.system:SparseParitySystem",
    sections=dict(task=SparseParityConfig, model=LinearAttentionConfig, curriculum=CurriculumConfig,
                  theory=TheoryConfig),
    check=check(theory_budget)))
