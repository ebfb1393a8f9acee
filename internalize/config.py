"""Typed experiment configs: YAML files, dotted `key=value` overrides, unknown and unread keys refused.

The core declares the top-level keys and the sections every system shares (train, eval, log); a
system's own sections (task, model, curriculum, objective, ...) come from its registry entry, so a
config of one system holds exactly the sections that system reads.
"""
from __future__ import annotations

import copy
import importlib
import typing
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)

from internalize import registry

CONFIG_DIR = Path(__file__).parent / "configs"
SHARED = ("train", "eval", "log")


class ConfigError(ValueError):
    """Bad user input: reported as one line, exit code 2."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TrainConfig(Strict):
    optimizer: Literal["adam", "adamw"] = "adam"  # a system may bring its own (the theory regime's row step)
    lr: float = 0.1  # learning rate (adam, adamw)
    weight_decay: float = 0.0  # adamw only
    # 1024: the reference 256 stalls Log-ICoT at k=32, n>=80 (docs/logicot.md)
    batch_size: int = 1024
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
    grad_clip: Optional[float] = None  # clip the gradient's global norm to this (None: off); logged as train_grad_norm
    # threshold: a stage ends once its validation loss is under train.threshold (a stage takes as long as it
    # needs); steps: after train.steps_per_stage steps
    advance: Literal["threshold", "steps"] = "threshold"
    threshold: float = 3e-4  # advance once the stage's validation loss is below this
    steps_per_stage: int = 150  # used when advance = steps
    first_stage_steps: Optional[int] = None  # the first stage's budget when it differs (full-CoT training)
    first_stage_advance: Optional[Literal["threshold", "steps"]] = None  # its rule when it differs (None: advance)
    max_steps_per_stage: int = 1000  # the cap under advance = threshold
    eval_every: int = 2  # steps between validation losses (and threshold checks)
    val_size: int = 2048  # examples in the fixed validation set (seeded apart from training)
    checkpoint_every: int = 50  # steps between mid-stage checkpoints (0: stage ends only)
    # rows per forward pass: each batch is trained in micro-batches of at most this many rows, their
    # gradients accumulated into one step of the same loss (a large model's memory); None: whole batches
    micro_batch: Optional[int] = None

    @model_validator(mode="after")
    def _ranges(self):
        for key in ("checkpoint_every", "warmup_steps", "run_warmup_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"train.{key} must be 0 or more")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("train.min_lr_ratio must be between 0 and 1")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError("train.grad_clip must be positive (or null: off)")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError("train.micro_batch must be at least 1 (or null: whole batches)")
        for key in ("batch_size", "steps_per_stage", "max_steps_per_stage", "eval_every", "val_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"train.{key} must be at least 1")
        return self


class LogConfig(Strict):
    tensorboard: bool = False  # also write every metric as TensorBoard scalars (needs tensorboard)


class EvalConfig(Strict):
    test_size: int = 4096  # examples in each fixed test set (ID and every OOD skew)


class Config(Strict):
    experiment: str  # the name runs are filed under (default: the YAML file's name)
    system: str  # which system trains it: a registered system's name
    imports: list[str] = []  # modules imported first: where a user's own systems register
    description: str = ""  # one line for `internalize list`
    seed: int = 0  # seeds training, and the task's hidden choices (the secret support)
    device: Literal["cpu", "cuda"] = "cpu"
    scale: str = "default"  # the named scale applied (--smoke, --scale NAME): its keys come from the YAML's scales
    train: TrainConfig = TrainConfig()
    eval: EvalConfig = EvalConfig()
    log: LogConfig = LogConfig()

    @model_validator(mode="after")
    def _system_check(self):
        check = registry.get(self.system).check
        if check is not None:
            check(self)
        return self


_classes: dict[tuple[str, int], type[Config]] = {}


def config_class(system: str) -> type[Config]:
    """The Config class of one system: the shared keys and that system's own sections."""
    entry = registry.get(system)
    key = (system, id(entry))
    if key not in _classes:
        fields = {name: (cls, Field(default_factory=cls)) for name, cls in entry.sections.items()}
        _classes[key] = create_model(f"{system.title().replace('_', '')}Config", __base__=Config, **fields)
    return _classes[key]


def sections(system: str) -> dict[str, type[BaseModel]]:
    """Every section system `system` reads, shared ones included, name -> class."""
    cls = config_class(system)
    return {k: f.annotation for k, f in cls.model_fields.items()
            if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)}


def part_name(cls: type[BaseModel]) -> Optional[str]:
    """The `name` a task or model section is known by (a one-value Literal), None if it has none."""
    field = cls.model_fields.get("name")
    if field is None or typing.get_origin(field.annotation) is not Literal or len(typing.get_args(field.annotation)) != 1:
        return None
    return field.default


def validate(raw: dict) -> Config:
    """A raw mapping -> the Config of the system it names; any bad key or value is one ConfigError."""
    system = raw.get("system")
    if system is None:
        raise ConfigError(f"the config names no system; add 'system: NAME' (one of: {', '.join(registry.names())})")
    try:
        cls = config_class(system)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    reads = sections(system)
    for key, value in raw.items():
        if key not in cls.model_fields and isinstance(value, dict):
            raise ConfigError(f"system {system} reads no section '{key}'; it reads {', '.join(reads)}")
    for key, section in reads.items():
        name, given = part_name(section), raw.get(key)
        if name is not None and isinstance(given, dict) and given.get("name", name) != name:
            raise ConfigError(f"system {system} cannot train {key} {given['name']}; use {key}.name={name}")
    try:
        return cls.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format(err)) from None


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
    where = ".".join(str(p) for p in first["loc"])
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
    for module in raw.get("imports") or []:  # before validation: they register their systems
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ConfigError(f"imports: cannot import {module!r} ({err})") from None
    return validate(raw)


def to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)

