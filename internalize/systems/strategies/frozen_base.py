"""The factorisation's frozen base: a Hugging Face causal LM from a local folder (model.hf_path), a
finished strategies_base run's model (model.base: its GPT, or its adapted Hugging Face model), or a
GPT trained first at the model's base sizes; and the tokenizer that base reads."""
from __future__ import annotations

from pathlib import Path

import torch

from internalize.config import Config, load
from internalize.models.gpt import GPT, GPTConfig
from internalize.runs import start_from
from internalize.systems.strategies.base import StrategiesBaseSystem
from internalize.train import Discard


def base_config(config: Config) -> Config:
    """The strategies_base config of the base trained first: this run's task, seed and base sizes."""
    m = config.model
    return load("strategies_base", overrides=[
        f"seed={config.seed}", f"model.width={m.width}", f"model.depth={m.depth}", f"model.heads={m.heads}",
        f"train.steps_per_stage={m.base_steps}", "train.checkpoint_every=0", f"device={config.device}",
    ]).model_copy(update={"task": config.task})


def base_run(config: Config) -> tuple[Path, Config] | None:
    """model.base's folder and its config, checked to be a strategies_base run on this run's data."""
    if config.model.base is None:
        return None
    folder = Path(config.model.base)
    if not (folder / "config.yaml").is_file():
        raise ValueError(f"model.base: {folder} is not a run directory (no config.yaml)")
    cfg = load(str(folder / "config.yaml"))
    if cfg.system != "strategies_base":
        raise ValueError(f"model.base: {folder} is a {cfg.system} run, not strategies_base")
    # the keys that define the benchmark's splits and their traces; how the base drew its training examples
    # (task.fresh, task.weights) does not touch the validation and test inputs
    splits = ("data", "data_seed", "per_task", "tasks", "formats")
    theirs, mine = (cfg.task.model_dump(include=set(splits)), config.task.model_dump(include=set(splits)))
    if theirs != mine:
        raise ValueError(f"model.base: {folder} was trained on other data (task {theirs}, this run's {mine}); "
                         "set the same task keys")
    return folder, cfg


def base_tokenizer(config: Config):
    """The tokenizer the base reads: a Hugging Face model's own (model.hf_path, or the hf/ folder of a
    Hugging Face strategies_base run given as model.base); None for a GPT (the character tokenizer)."""
    if config.model.hf_path is not None:
        from internalize.systems.strategies.hf import load_tokenizer, model_folder

        return load_tokenizer(model_folder(config.model.hf_path))
    found = base_run(config)
    if found is not None and found[1].model.hf_path is not None:
        from internalize.systems.strategies.adapt import run_tokenizer

        return run_tokenizer(found[0])
    return None


def frozen_base(config: Config, bench, device: torch.device) -> torch.nn.Module:
    """`read_base`, and a Hugging Face model's positions given to the benchmark (it has some to spare:
    Benchmark.generate batches prompts of different lengths)."""
    base = read_base(config, bench, device)
    if not isinstance(base, GPT):
        bench.positions = base.cfg.max_len
    return base


def read_base(config: Config, bench, device: torch.device) -> torch.nn.Module:
    """The frozen base: a Hugging Face model from model.hf_path, a strategies_base run's model from
    model.base (a GPT, or a Hugging Face model with its adapter merged), or a GPT trained first
    (seeded, so resume is exact)."""
    m = config.model
    if m.hf_path is not None:
        from internalize.systems.strategies.hf import HFCausalLM

        return HFCausalLM.load(m.hf_path, bench.tokenizer, m.dtype, longest=bench.longest).to(device)
    found = base_run(config)
    if found is None:
        from internalize.train import train

        cfg = base_config(config)
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            system = StrategiesBaseSystem(cfg)
            train(system, cfg.train, torch.Generator().manual_seed(cfg.seed), Discard(), show_progress=False)
        return system.model.eval()
    folder, cfg = found
    if cfg.model.hf_path is not None:
        from internalize.systems.strategies.adapt import adapted_base

        return adapted_base(folder, cfg, bench.tokenizer, m.dtype, bench.longest).to(device).eval()
    model = GPT(GPTConfig(len(bench.tokenizer), bench.longest + 8, cfg.model.width, cfg.model.depth,
                          cfg.model.heads))
    start_from(model, folder, "model.base")
    return model.to(device).eval()
