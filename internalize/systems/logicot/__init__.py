"""Log-ICoT: an L-layer gated transformer learns k-parity by internalizing its parity-tree chain of
thought one tree level a stage (docs/logicot.md). Importing this module registers the system."""
from internalize import registry
from internalize.curricula import CurriculumConfig
from internalize.systems.logicot.config import (
    LogICoTConfig,
    ParityTreeConfig,
    theory_budget,
)
from internalize.theory import TheoryConfig, check

registry.register("logicot", registry.SystemEntry(
    "internalize.systems.logicot.system:LogICoTSystem",
    sections=dict(task=ParityTreeConfig, model=LogICoTConfig, curriculum=CurriculumConfig, theory=TheoryConfig),
    stacked="internalize.systems.logicot.stacked:StackedLogICoT",
    check=check(theory_budget)))
