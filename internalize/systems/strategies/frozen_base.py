"""The factorisation's frozen base: a Hugging Face causal LM from a local folder (model.hf_path), a
finished strategies_base run's GPT (model.base), or a GPT trained first at the model's base sizes."""
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


def frozen_base(config: Config, bench, device: torch.device) -> torch.nn.Module:
    """The frozen base: a Hugging Face model from model.hf_path, a strategies_base run's GPT from
    model.base, or a GPT trained first (seeded, so resume is exact)."""
    if config.model.hf_path is not None:
        from internalize.systems.strategies.hf import HFCausalLM

        model = HFCausalLM.load(config.model.hf_path, len(bench.tokenizer))
        if model.cfg.max_len < bench.longest + 8:
            raise ValueError(f"model.hf_path: the model's {model.cfg.max_len} positions are fewer than the "
                             f"benchmark's longest sequence and 8 ({bench.longest + 8})")
        return model.to(device)
    folder = config.model.base
    if folder is None:
        from internalize.train import train

        cfg = base_config(config)
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            system = StrategiesBaseSystem(cfg)
            train(system, cfg.train, torch.Generator().manual_seed(cfg.seed), Discard(), show_progress=False)
        return system.model.eval()
    folder = Path(folder)
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
    model = GPT(GPTConfig(len(bench.tokenizer), bench.longest + 8, cfg.model.width, cfg.model.depth,
                          cfg.model.heads))
    start_from(model, folder, "model.base")
    return model.to(device).eval()
