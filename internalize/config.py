"""Typed experiment configs: YAML files, dotted `key=value` overrides, unknown keys rejected."""
from __future__ import annotations

import copy
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
    n: int = 30
    k: int = 16
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
        """20,000 samples a stage (the spec's reference prototype); e2e gets the internalization
        route's budget, one step per support bit."""
        return 20_000, self.k


class GPTModel(Strict):
    name: Literal["gpt"] = "gpt"
    width: int = 128
    depth: int = 2
    heads: int = 4
    keep_positions: bool = False  # removed CoT tokens keep their positions as blanks instead of being deleted
    # with every CoT token removed, the answer follows <sep> directly (no <ans>): the one-pass answer
    # is then written where each removal stage wrote its first state (decided here: off, the spec's format)
    bare_answer: bool = False

    @model_validator(mode="after")
    def _shape(self):
        if min(self.width, self.depth, self.heads) < 1 or self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be a positive multiple of model.heads ({self.heads})")
        return self


class LogICoTModel(Strict):
    name: Literal["logicot"] = "logicot"
    link: Literal["cos", "quadratic"] = "cos"
    mask: Literal["lower_levels", "previous_level"] = "lower_levels"
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
    name: Literal["log_icot", "stepwise", "left", "right", "inductive", "mixture", "full_cot", "e2e"] = "log_icot"
    per_stage: int = 1  # tokens removed per stage (stepwise, left, right)
    smoothing: float = 0.0  # Deng et al.'s removal smoothing lambda (0: off; they use 4)


class TheoryConfig(Strict):
    samples: Optional[int] = None  # the one batch per stage; None: round(n ** (2 + eps)) for the
    # parity tree, 20,000 for sparse parity (the spec's reference prototype)
    eps: float = 0.9
    row_step: float = 9.0  # each row moves until its largest entry changes by this much


class TrainConfig(Strict):
    mode: Literal["experiment", "theory"] = "experiment"
    optimizer: Literal["adam", "adamw", "row_step"] = "adam"
    lr: float = 0.1
    weight_decay: float = 0.0  # adamw only
    batch_size: int = 1024  # decided here: 256 (the spec's reference) stalls at k=32, n>=80
    reset_optimizer: bool = True  # a fresh optimizer each stage
    warmup_steps: int = 0  # each stage's learning rate rises linearly from lr/warmup_steps to lr (adam, adamw)
    advance: Literal["threshold", "steps"] = "threshold"  # decided here: threshold
    threshold: float = 3e-4  # advance once the stage's validation loss is below this
    steps_per_stage: int = 150  # used when advance = steps
    first_stage_steps: Optional[int] = None  # the first stage's budget when it differs (full-CoT training)
    first_stage_advance: Optional[Literal["threshold", "steps"]] = None  # its rule when it differs (None: advance)
    max_steps_per_stage: int = 1000  # the cap under advance = threshold
    eval_every: int = 2
    val_size: int = 2048
    checkpoint_every: int = 50  # steps between mid-stage checkpoints (0: stage ends only)
    theory: TheoryConfig = TheoryConfig()


class LogConfig(Strict):
    tensorboard: bool = False  # also write every metric as TensorBoard scalars (needs tensorboard)


class EvalConfig(Strict):
    test_size: int = 4096


MODEL_FOR = {"parity_tree": "logicot", "automaton": "gpt", "sparse_parity": "linear_attention"}


class Config(Strict):
    experiment: str
    description: str = ""
    seed: int = 0
    device: Literal["cpu", "cuda"] = "cpu"
    scale: str = "default"
    task: Annotated[Union[ParityTreeTask, AutomatonTask, SparseParityTask],
                    Field(discriminator="name")] = ParityTreeTask()
    model: Annotated[Union[LogICoTModel, GPTModel, LinearAttentionModel], Field(discriminator="name")] = LogICoTModel()
    curriculum: CurriculumConfig = CurriculumConfig()
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    log: LogConfig = LogConfig()

    @model_validator(mode="before")
    @classmethod
    def _default_names(cls, raw):
        """A task without a name is the parity tree; a model without one (or none) is the one its task needs."""
        if not isinstance(raw, dict):
            return raw
        task, model = raw.get("task"), raw.get("model")
        if isinstance(task, dict) and "name" not in task:
            raw["task"] = task = {"name": "parity_tree", **task}
        task_name = task.get("name") if isinstance(task, dict) else "parity_tree"
        if model is None:
            model = {}
        if isinstance(model, dict) and "name" not in model:
            raw["model"] = {"name": MODEL_FOR.get(task_name, "gpt"), **model}
        return raw

    @model_validator(mode="after")
    def _pairs(self):
        if self.model.name != MODEL_FOR[self.task.name]:
            raise ValueError(f"model {self.model.name} cannot learn task {self.task.name}; "
                             f"use model.name={MODEL_FOR[self.task.name]}")
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
        for key in ("checkpoint_every", "warmup_steps"):
            if getattr(self.train, key) < 0:
                raise ValueError(f"train.{key} must be 0 or more")
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
    tags = set(MODEL_FOR) | set(MODEL_FOR.values())  # the union's branch names are not keys
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
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format(err)) from None


def to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
