"""Latent reasoning strategies: a six-task multi-strategy benchmark, a base model trained with the
strategy never shown, and the router / generator / posterior factorisation (docs/strategies.md).
Importing this module registers both systems and the benchmark's dataset."""
from internalize import registry
from internalize.systems.strategies.config import (
                                                   BaseModelConfig,
                                                   BaseTrainConfig,
                                                   DataConfig,
                                                   FactorizeEvalConfig,
                                                   LatentModelConfig,
                                                   ObjectiveConfig,
                                                   StrategiesTaskConfig,
                                                   StrategiesTrainConfig,
)

registry.register("strategies_base", registry.SystemEntry(
    "internalize.systems.strategies.base:StrategiesBaseSystem",
    sections=dict(task=StrategiesTaskConfig, model=BaseModelConfig, train=BaseTrainConfig)))
registry.register("strategies_factorize", registry.SystemEntry(
    "internalize.systems.strategies.factorize:FactorizeSystem",
    stacked="internalize.systems.strategies.stacked:StackedFactorize",
    sections=dict(task=StrategiesTaskConfig, model=LatentModelConfig, train=StrategiesTrainConfig,
                  eval=FactorizeEvalConfig, objective=ObjectiveConfig, data=DataConfig)))
registry.register_dataset("strategies", "internalize.systems.strategies.benchmark.dataset:write_command")
