"""Typed experiment configs: YAML files, dotted `key=value` overrides, unknown keys rejected."""
from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from internalize.tasks import check_sizes, check_support

CONFIG_DIR = Path(__file__).parent / "configs"


class ConfigError(ValueError):
    """Bad user input: reported as one line, exit code 2."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParityTreeTask(Strict):
    name: Literal["parity_tree"] = "parity_tree"
    n: int = 30  # input bits
    k: int = 16  # bits in the hidden parity, a power of two (L = log2 k layers and stages)
    pairing: Literal["sorted", "random"] = "sorted"  # decided here: sorted leaves, paired in order

    @model_validator(mode="after")
    def _sizes(self):
        check_sizes(self.n, self.k)
        return self

    def theory_budget(self, eps: float) -> tuple[int, Optional[int]]:
        """Theory mode's samples per stage (Theorem 1: n^(2+eps)) and e2e steps (None: the default)."""
        return round(self.n ** (2 + eps)), None


class AutomatonTask(Strict):
    name: Literal["automaton"] = "automaton"
    automaton: str = "cyclic"  # cyclic, symmetric, dihedral, alternating, flip_flop, or a YAML table's path
    n: int = 6  # the order of a cyclic or dihedral automaton
    actions: Literal["increment", "all"] = "increment"  # the cyclic automaton's action set
    length: int = 16  # T, the number of actions (decided here: 16)
    ood: list[float] = [0.1, 0.9]  # skewed test distributions: mass on the last action

    @model_validator(mode="after")
    def _table(self):
        from internalize.tasks.automata import action_distribution, make

        automaton = make(self.automaton, self.n, self.actions)  # a bad table is refused here, on load
        if self.length < 2:
            raise ValueError(f"task.length must be at least 2 (got {self.length})")
        for skew in self.ood:
            action_distribution(len(automaton.actions), skew)
        return self


class SparseParityTask(Strict):
    name: Literal["sparse_parity"] = "sparse_parity"
    d: int = 64  # input bits
    k: int = 8  # size of the hidden support
    order: Literal["sorted", "random"] = "sorted"  # decided here: the chain visits the support left to right

    @model_validator(mode="after")
    def _sizes(self):
        check_support(self.d, self.k)
        return self

    def theory_budget(self, eps: float) -> tuple[int, Optional[int]]:
        """20,000 samples a stage; e2e gets the internalization
        route's budget, one step per support bit."""
        return 20_000, self.k


class StrategiesTask(Strict):
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
        from internalize.tasks.strategies import TASKS, task_of

        unknown = [t for t in [*self.tasks, *self.weights] if t not in TASKS]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r}; the benchmark has {', '.join(TASKS)}")
        if self.tasks and set(self.weights) - set(self.tasks):
            raise ValueError(f"task.weights names {sorted(set(self.weights) - set(self.tasks))[0]!r}, "
                             "which task.tasks leaves out")
        if any(not w > 0 for w in self.weights.values()):
            raise ValueError("task.weights must be positive")
        for name, format in self.formats.items():
            task_of(name, format)
        return self

    def format_of(self, task: str) -> str:
        return self.formats.get(task, "default")


class GPTModel(Strict):
    name: Literal["gpt"] = "gpt"
    width: int = 128  # residual stream width
    depth: int = 2  # transformer blocks
    heads: int = 4  # attention heads per block (width must be a multiple)
    keep_positions: bool = False  # removed CoT tokens keep their positions as blanks instead of being deleted
    # with every CoT token removed, the answer follows <sep> directly (no <ans>): the one-pass answer
    # is then written where each removal stage wrote its first state (decided here: off, the paper's format)
    bare_answer: bool = False
    # a finished run directory whose trained weights this run starts from (the same model shape;
    # a continuation with a schedule of its own). None: random initialisation.
    init: Optional[str] = None

    @model_validator(mode="after")
    def _shape(self):
        if min(self.width, self.depth, self.heads) < 1 or self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be a positive multiple of model.heads ({self.heads})")
        return self


class LatentModel(Strict):
    """strategies_factorize: router/generator and posterior, LoRA copies of a frozen base GPT."""
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
    # a Hugging Face causal LM saved in this local directory is the base (it reads the benchmark's
    # token ids; needs the strategies extra); exclusive with model.base
    hf_path: Optional[str] = None
    # where E(z) is added: the <z_empty> slot alone (the paper's), or that slot and every response
    # position after it (decided here: slot)
    z_injection: Literal["slot", "onward"] = "slot"

    @model_validator(mode="after")
    def _sizes(self):
        if min(self.d_z, self.lora_rank, self.base_steps) < 1:
            raise ValueError("model.d_z, model.lora_rank and model.base_steps must be positive")
        if self.base is not None and self.hf_path is not None:
            raise ValueError("set model.base or model.hf_path, not both")
        return self


class LogICoTModel(Strict):
    name: Literal["logicot"] = "logicot"
    link: Literal["cos", "quadratic"] = "cos"  # phi: -cos(pi t), or Kim & Suzuki's quadratic
    mask: Literal["lower_levels", "previous_level"] = "lower_levels"  # which levels a layer may attend to
    gate: Literal["frontier", "fixed", "none"] = "frontier"  # decided here: frontier
    # where a target is read: just above its padded children (per_node), or all at the frontier
    readout: Literal["per_node", "frontier"] = "per_node"
    quantize: bool = False  # round W to integers after every update


class LinearAttentionModel(Strict):
    name: Literal["linear_attention"] = "linear_attention"
    nudge: float = 0.8  # each loss is taken at A + (nudge / d) * U(0, 1): integer weights have zero gradient
    nonnegative: bool = True  # clamp the weights at 0 after every update
    quantize: bool = True  # round the weights to integers after every update


class CurriculumConfig(Strict):
    # which thinking tokens each stage hides: log_icot one tree level a stage; stepwise one token;
    # left / right from that end; inductive doubling strides; mixture one stage over every removal
    # length with a length hint; full_cot nothing; e2e everything from the start (answer-only loss)
    name: str = "log_icot"
    per_stage: int = 1  # tokens removed per stage (stepwise, left, right)
    smoothing: float = 0.0  # Deng et al.'s removal smoothing lambda (0: off; they use 4)

    @model_validator(mode="after")
    def _known(self):
        from internalize.curricula import CURRICULA

        if self.name not in CURRICULA:
            raise ValueError(f"name {self.name!r} is not a curriculum; choose from {', '.join(CURRICULA)}")
        return self


class TheoryConfig(Strict):
    # the one batch per stage; None: round(n ** (2 + eps)) for the parity tree, 20,000 for sparse
    # parity
    samples: Optional[int] = None
    eps: float = 0.9  # the default sample count is n^(2 + eps)
    row_step: float = 9.0  # each row moves until its largest entry changes by this much


class TrainConfig(Strict):
    # theory: one normalised row_step step per stage on train.theory.samples, then integer weights
    mode: Literal["experiment", "theory"] = "experiment"
    optimizer: Literal["adam", "adamw", "row_step"] = "adam"  # row_step: the theory regime's step
    lr: float = 0.1  # learning rate (adam, adamw)
    weight_decay: float = 0.0  # adamw only
    batch_size: int = 1024  # decided here: 1024; the reference 256 stalls Log-ICoT at k=32, n>=80
    reset_optimizer: bool = True  # a fresh optimizer each stage
    warmup_steps: int = 0  # each stage's learning rate rises linearly from lr/warmup_steps to lr (adam, adamw)
    run_warmup_steps: int = 0  # the learning rate also rises linearly over the run's first steps (global)
    # within each stage the learning rate falls from lr to lr * min_lr_ratio along a cosine over the
    # stage's step budget (none: constant)
    lr_decay: Literal["none", "cosine"] = "none"
    min_lr_ratio: float = 0.1
    # bf16: the training loss (forward and backward) runs under torch.autocast in bfloat16; weights,
    # optimizer and evaluation stay fp32. Slower on CPUs without bfloat16 instructions (benchmarks/)
    precision: Literal["fp32", "bf16"] = "fp32"
    # systems whose batches mix lengths (strategies) split each batch into this many groups of rows of
    # similar length, each cut to its longest row: the same loss on fewer padded tokens (1: off)
    length_chunks: int = Field(1, ge=1)
    grad_clip: Optional[float] = None  # clip the gradient's global norm to this (None: off); logged as train_grad_norm
    advance: Literal["threshold", "steps"] = "threshold"  # decided here: threshold
    threshold: float = 3e-4  # advance once the stage's validation loss is below this
    steps_per_stage: int = 150  # used when advance = steps
    first_stage_steps: Optional[int] = None  # the first stage's budget when it differs (full-CoT training)
    first_stage_advance: Optional[Literal["threshold", "steps"]] = None  # its rule when it differs (None: advance)
    max_steps_per_stage: int = 1000  # the cap under advance = threshold
    eval_every: int = 2  # steps between validation losses (and threshold checks)
    val_size: int = 2048  # examples in the fixed validation set (seeded apart from training)
    checkpoint_every: int = 50  # steps between mid-stage checkpoints (0: stage ends only)
    theory: TheoryConfig = TheoryConfig()


class ObjectiveConfig(Strict):
    # strategies_factorize: what the generator and posterior minimise (docs/strategies.md)
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
    # strategies_factorize: train on the benchmark's traces (the released code) or on responses
    # sampled from the frozen base model at temperature 1 (the paper's manuscript)
    response_source: Literal["benchmark", "base"] = "benchmark"


class LogConfig(Strict):
    tensorboard: bool = False  # also write every metric as TensorBoard scalars (needs tensorboard)


class EvalConfig(Strict):
    test_size: int = 4096  # examples in each fixed test set (ID and every OOD skew)
    pairs: int = 1024  # strategies_factorize: same-task input pairs scored for alignment
    snapshots: int = 4  # strategies_factorize: evaluations during training (trajectories, PCA)


# The task and model configs a Config may hold; a new one is its class plus one entry here.
TASKS = (ParityTreeTask, AutomatonTask, SparseParityTask, StrategiesTask)
MODELS = (LogICoTModel, GPTModel, LinearAttentionModel, LatentModel)


def _names(classes) -> set[str]:
    return {c.model_fields["name"].default for c in classes}


def register(part: str, cls: type[Strict]) -> None:
    """Make a task or model config class (its `name` default is its key) selectable in every config."""
    global TASKS, MODELS
    if part not in ("task", "model"):
        raise ValueError(f"register a 'task' or a 'model', not {part!r}")
    name = cls.model_fields["name"].default
    union = (*[c for c in (TASKS if part == "task" else MODELS) if c.model_fields["name"].default != name], cls)
    if part == "task":
        TASKS = union
    else:
        MODELS = union
    Config.model_fields[part].annotation = Annotated[Union[union], Field(discriminator="name")]
    Config.model_rebuild(force=True)


class Config(Strict):
    experiment: str  # the name runs are filed under (default: the YAML file's name)
    system: str  # which system trains it: a name in internalize.experiments.SYSTEMS
    imports: list[str] = []  # modules imported first: where a user's own systems, tasks and models register
    description: str = ""  # one line for `internalize list`
    seed: int = 0  # seeds training, and the task's hidden choices (the secret support)
    device: Literal["cpu", "cuda"] = "cpu"
    scale: str = "default"  # the named scale applied (--smoke, --scale NAME): its keys come from the YAML's scales
    task: Annotated[Union[TASKS], Field(discriminator="name")] = ParityTreeTask()
    model: Annotated[Union[MODELS], Field(discriminator="name")] = LogICoTModel()
    curriculum: CurriculumConfig = CurriculumConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    objective: ObjectiveConfig = ObjectiveConfig()
    data: DataConfig = DataConfig()
    log: LogConfig = LogConfig()

    @model_validator(mode="before")
    @classmethod
    def _default_names(cls, raw):
        """The system is named explicitly; a task or model without a name is its system's default."""
        from internalize.experiments import SYSTEMS

        if not isinstance(raw, dict):
            return raw
        system = raw.get("system")
        if system is None:
            raise ValueError(f"the config names no system; add 'system: NAME' (one of: {', '.join(SYSTEMS)})")
        if system not in SYSTEMS:
            raise ValueError(f"unknown system {system!r}; available: {', '.join(SYSTEMS)}")
        entry = SYSTEMS[system]
        for key, default in (("task", entry.tasks[0]), ("model", entry.models[0])):
            part = raw.get(key)
            if part is None:
                part = {}
            if isinstance(part, dict) and "name" not in part:
                raw[key] = {"name": default, **part}
        return raw

    @model_validator(mode="after")
    def _pairs(self):
        from internalize.experiments import SYSTEMS

        entry = SYSTEMS[self.system]
        for key, name, allowed in (("task", self.task.name, entry.tasks), ("model", self.model.name, entry.models)):
            if name not in allowed:
                raise ValueError(f"system {self.system} cannot train {key} {name}; "
                                 f"use {key}.name={' or '.join(allowed)}")
        return self

    @model_validator(mode="after")
    def _theory(self):
        """The Theorem-1 regime: one normalised step per stage on n^(2+eps) samples, then rounding."""
        if self.train.mode == "theory":
            t = self.train
            if not hasattr(self.task, "theory_budget"):
                raise ValueError(f"train.mode=theory needs the parity_tree or sparse_parity task, not {self.task.name}")
            samples, e2e_steps = self.task.theory_budget(t.theory.eps)
            samples = t.theory.samples or samples
            if self.curriculum.name == "e2e" and t.first_stage_steps is None:
                t.first_stage_steps = e2e_steps
            t.optimizer, t.advance, t.steps_per_stage, t.batch_size = "row_step", "steps", 1, samples
            if self.model.name in ("logicot", "linear_attention"):
                self.model.quantize = True
        for key in ("checkpoint_every", "warmup_steps", "run_warmup_steps"):
            if getattr(self.train, key) < 0:
                raise ValueError(f"train.{key} must be 0 or more")
        if not 0 <= self.train.min_lr_ratio <= 1:
            raise ValueError("train.min_lr_ratio must be between 0 and 1")
        if self.train.grad_clip is not None and self.train.grad_clip <= 0:
            raise ValueError("train.grad_clip must be positive (or null: off)")
        for key in ("batch_size", "steps_per_stage", "max_steps_per_stage", "eval_every", "val_size"):
            if getattr(self.train, key) < 1:
                raise ValueError(f"train.{key} must be at least 1")
        return self


def available() -> dict[str, str]:
    """Experiment name -> one-line description, from the bundled configs."""
    out = {}
    for path in sorted(CONFIG_DIR.glob("*.yaml")):
        out[path.stem] = yaml.safe_load(path.read_text()).get("description", "")
    return out


def set_dotted(raw: dict, key: str, value: Any) -> None:
    node = raw
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {key}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key=value")
    key, value = text.split("=", 1)
    if not key:
        raise ConfigError(f"override {text!r} has no key")
    parsed = yaml.safe_load(value) if value else ""
    if isinstance(parsed, str):
        try:  # YAML 1.1 reads 1e-3 as a string
            parsed = float(parsed)
        except ValueError:
            pass
    return key.strip(), parsed


def _format(err: ValidationError) -> str:
    first = err.errors()[0]
    tags = _names(TASKS) | _names(MODELS)  # the union's branch names are not keys
    where = ".".join(str(p) for i, p in enumerate(first["loc"]) if not (i == 1 and p in tags))
    if first["type"] == "extra_forbidden":
        return f"unknown config key '{where}'"
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load(name_or_path: str, overrides: list[str] = (), scale: Optional[str] = None) -> Config:
    """Resolve an experiment by name (bundled config) or YAML path, then a scale, then overrides."""
    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") and path.exists()):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            names = ", ".join(available())
            raise ConfigError(f"unknown experiment {name_or_path!r}; available: {names}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a config must be a mapping")
    raw = copy.deepcopy(raw)
    raw.setdefault("experiment", path.stem)
    scales = raw.pop("scales", {}) or {}
    if scale and scale != "default":
        if scale not in scales:
            raise ConfigError(f"experiment {raw['experiment']!r} has no scale {scale!r}; it has: "
                              + (", ".join(scales) or "none"))
        for key, value in scales[scale].items():
            set_dotted(raw, key, value)
        raw["scale"] = scale
    for text in overrides:
        set_dotted(raw, *parse_override(text))
    for module in raw.get("imports") or []:  # before validation: they register task and model configs
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"imports: cannot import {module!r} ({err})") from None
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format(err)) from None


def to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
