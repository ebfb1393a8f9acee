"""The latent-strategies systems' config sections: the benchmark, the factorisation's model, its
objective and data, and their own train and eval keys."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from internalize.config import EvalConfig, Strict, TrainConfig
from internalize.models.gpt import GPTSection


def check_weights(weights: dict[str, float] | None, where: str) -> None:
    """Refuse task weights naming a task the benchmark lacks, or not positive (`where`: whose they are)."""
    from internalize.systems.strategies.benchmark import TASKS

    unknown = [t for t in weights or {} if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown task {unknown[0]!r} in {where}; the benchmark has {', '.join(TASKS)}")
    if any(not w > 0 for w in (weights or {}).values()):
        raise ValueError(f"{where} must be positive")


class StrategiesTaskConfig(Strict):
    name: Literal["strategies"] = "strategies"
    data: Optional[str] = None  # a directory from `internalize data strategies`; None: drawn in memory
    data_seed: int = 0  # draws the benchmark when task.data is None (apart from the training seed)
    per_task: int = 10000  # examples per task over the three splits, when drawn in memory
    tasks: list[str] = []  # a subset of the six tasks (empty: all of them)
    # draw every training example afresh from the tasks' generators (inputs of the validation and
    # test splits refused) instead of cycling through the train split
    fresh: bool = False
    # how often each task is drawn for training, relative to the others (a task not named: 1);
    # validation and test are untouched. Empty: every task alike.
    weights: dict[str, float] = {}
    # a task's trace format by name, where it has more than one (a task not named: "default"); e.g.
    # {linear_equation: columns} writes subtract-first's c - b column by column, {base_conversion: halving}
    # via-binary's halvings (docs/strategies.md)
    formats: dict[str, str] = {}

    @model_validator(mode="after")
    def _known(self):
        from internalize.systems.strategies.benchmark import TASKS, task_of

        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r}; the benchmark has {', '.join(TASKS)}")
        check_weights(self.weights, "task.weights")
        if self.tasks and set(self.weights) - set(self.tasks):
            raise ValueError(f"task.weights names {sorted(set(self.weights) - set(self.tasks))[0]!r}, "
                             "which task.tasks leaves out")
        for name, format in self.formats.items():
            task_of(name, format)
        return self

    def format_of(self, task: str) -> str:
        return self.formats.get(task, "default")


class StrategiesTrainConfig(TrainConfig):
    # batches mix lengths: split each batch into this many groups of rows of similar length, each cut to
    # its longest row: the same loss on fewer padded tokens (1: off)
    length_chunks: int = Field(1, ge=1)


class Phase(Strict):
    """One phase of a base run in phases: a stage of its own step budget, learning rate and task weights,
    its optimizer fresh (what continuing a finished run with other settings did, in one command)."""
    steps: int = Field(ge=1)
    lr: Optional[float] = None  # None: train.lr
    warmup_steps: int = Field(0, ge=0)  # the phase's learning rate rises linearly over its first steps
    weights: Optional[dict[str, float]] = None  # task.weights during this phase (None: task.weights)

    @model_validator(mode="after")
    def _known(self):
        check_weights(self.weights, "a phase's weights")
        if self.lr is not None and not self.lr > 0:
            raise ValueError("a phase's lr must be positive")
        return self

    def weights_or(self, default: dict[str, float]) -> dict[str, float]:
        """The task weights this phase draws with: its own, else `default` (task.weights)."""
        return default if self.weights is None else self.weights

    def train_keys(self) -> dict:
        """The train.* keys this phase sets (Stage.train)."""
        return dict(steps_per_stage=self.steps, warmup_steps=self.warmup_steps,
                    **({} if self.lr is None else {"lr": self.lr}))


class BaseTrainConfig(StrategiesTrainConfig):
    # train the base in phases, one stage each, evaluated at its end: each {steps, lr (null: train.lr),
    # warmup_steps (0), weights (null: task.weights)}, its optimizer fresh (empty: one stage of
    # train.steps_per_stage steps)
    phases: list[Phase] = []


class BaseModelConfig(GPTSection):
    """strategies_base: the toolkit GPT (width, depth, heads), or a Hugging Face causal LM adapted to
    the benchmark."""
    # a causal LM saved in this local directory, with its own tokenizer (the frame tokens added as special
    # tokens), adapted to the benchmark instead of training the GPT; needs the strategies extra
    hf_path: Optional[str] = None
    # how the Hugging Face model is adapted: lora, LoRA on the blocks' linear layers and the frame tokens'
    # embedding rows, the rest frozen (a pretrained model); full: every weight (a model trained from
    # scratch); None: lora. Refused without model.hf_path (the toolkit GPT trains every weight)
    adapt: Optional[Literal["lora", "full"]] = None
    lora_rank: int = Field(16, ge=1)
    lora_alpha: float = 32.0
    dtype: Literal["fp32", "bf16"] = "fp32"  # the Hugging Face model's weights (LoRA's stay fp32)

    @model_validator(mode="after")
    def _adapt(self):
        if self.adapt is not None and self.hf_path is None:
            raise ValueError(f"model.adapt={self.adapt} adapts a Hugging Face model: set model.hf_path too "
                             "(the toolkit GPT trains every weight)")
        return self


class LatentModelConfig(Strict):
    """strategies_factorize: router/generator and posterior, LoRA copies of a frozen base."""
    name: Literal["latent"] = "latent"
    base: Optional[str] = None  # a finished strategies_base run directory; None: train a base first
    # the base trained first when model.base is None (its width, depth, heads and steps)
    width: int = 128
    depth: int = 4
    heads: int = 4
    base_steps: int = 2000
    d_z: int = 16  # latent dimensions (the paper: 64)
    lora_rank: int = 8  # the paper: 16
    lora_alpha: float = 16.0  # the paper: 32
    # the layers LoRA adapts, by name; None: every linear layer of the blocks (the GPT's qkv, proj,
    # fc_in, fc_out; a Hugging Face model's Linear and Conv1D layers but its LM head)
    lora_targets: Optional[list[str]] = None
    # a Hugging Face causal LM saved in this local directory is the base, read through its own tokenizer
    # (needs the strategies extra); exclusive with model.base. A model adapted to the benchmark first
    # (strategies_base with model.hf_path) is given as model.base
    hf_path: Optional[str] = None
    dtype: Literal["fp32", "bf16"] = "fp32"  # a Hugging Face base's weights
    # where E(z) is added: the <z_empty> slot alone (the paper's), or that slot and every response
    # position after it. The paper's slot is the default; onward was tried and did not raise alignment
    z_injection: Literal["slot", "onward"] = "slot"

    @model_validator(mode="after")
    def _sizes(self):
        if min(self.d_z, self.lora_rank, self.base_steps) < 1:
            raise ValueError("model.d_z, model.lora_rank and model.base_steps must be positive")
        if self.base is not None and self.hf_path is not None:
            raise ValueError("set model.base or model.hf_path, not both")
        return self


class ObjectiveConfig(Strict):
    # what the generator and posterior minimise (docs/strategies.md)
    name: Literal["elbo", "beta_elbo", "model_directed", "token_weighting", "global_scale",
                  "token_inverse"] = "model_directed"
    alpha: float = 0.05  # the uniform share of each token's weight
    gamma: float = 0.25  # weights proportional to the base's surprisal ** gamma (token_inverse: ** -gamma)
    beta: float = 0.01  # the KL's weight (elbo: always 1)
    beta_warmup: float = 1.0  # beta rises linearly from 0 over this share of the training steps

    @model_validator(mode="after")
    def _ranges(self):
        if not (0 <= self.alpha <= 1 and self.gamma >= 0 and self.beta >= 0 and 0 <= self.beta_warmup <= 1):
            raise ValueError("alpha and beta_warmup must lie in [0, 1], gamma and beta must be >= 0")
        return self


class DataConfig(Strict):
    # train on the benchmark's traces (the released code) or on responses sampled from the frozen base
    # model at temperature 1 (the paper's manuscript); base_faithful: the base's samples with each one
    # the benchmark's validators refuse drawn again (its errors gone, its strategy shares and lean kept)
    response_source: Literal["benchmark", "base", "base_faithful"] = "benchmark"
    redraws: int = Field(8, ge=0)  # base_faithful: draws again before a refused sample takes the benchmark's trace


class FactorizeEvalConfig(EvalConfig):
    pairs: int = 1024  # same-task input pairs scored for alignment
    snapshots: int = 4  # evaluations during training (trajectories, PCA)
    # each snapshot measures the first this many test inputs (a random subset; every task in it) and
    # eval.pairs in proportion: a trajectory point at a fifth of the final evaluation's cost at 3,000
    snapshot_size: int = Field(600, ge=1)
