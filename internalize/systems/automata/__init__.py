"""Learning through internalization on semiautomata: a GPT internalizes the simulation of an
automaton as chain-of-thought tokens are removed (docs/automata.md). Importing this module
registers the system."""
from internalize import registry
from internalize.curricula import CurriculumConfig
from internalize.systems.automata.config import (
    AutomataEvalConfig,
    AutomataGPTConfig,
    AutomatonConfig,
)

registry.register("automata", registry.SystemEntry(
    "internalize.systems.automata.system:AutomataSystem",
    sections=dict(task=AutomatonConfig, model=AutomataGPTConfig, curriculum=CurriculumConfig, eval=AutomataEvalConfig)))
