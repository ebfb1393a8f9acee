"""A Hugging Face model with its own tokenizer as the base: adapted to the benchmark (LoRA and the frame
tokens' rows, or fully), saved without pickles, read back as the factorisation's frozen base."""
import json

import pandas as pd
import pytest
import torch

from internalize.config import load
from internalize.registry import build
from internalize.systems.strategies.benchmark import SPECIALS, frame
from tests.conftest import read_summary

pytest.importorskip("peft")

FAST_EVAL = ["--set", "eval.test_size=24", "--set", "eval.pairs=12", "--set", "eval.snapshots=0"]


def base_system(folder, *overrides):
    torch.manual_seed(0)
    return build(load("strategies_base", scale="smoke", overrides=[f"model.hf_path={folder}", *overrides]))


def test_a_tokenizer_whose_merges_join_digits_reads_and_writes_the_benchmark(tiny_hf):
    from internalize.systems.strategies.hf import load_tokenizer

    tokenizer = load_tokenizer(tiny_hf["gpt2_bpe"])
    text = frame("73519+2846", "9|7=1|3365")
    ids = tokenizer.encode(text)
    pieces = [tokenizer.decode([i]) for i in ids]
    assert any(len(p) > 1 and p.isdigit() for p in pieces), pieces  # merges join digits
    assert tokenizer.decode(ids) == text
    assert all(tokenizer.encode(s) == [tokenizer.id(s)] for s in SPECIALS)
    system = base_system(tiny_hf["gpt2_bpe"])
    ids, mask = system.bench.prompts(system.bench.test["input"][:5])
    assert (ids[:, -4] == tokenizer.id("<z>")).all() and (ids[:, -3] == tokenizer.id("<z_empty>")).all()
    tokens, response = system.bench.test_data
    row = tokens[0][tokens[0] != tokenizer.pad_id].tolist()
    assert tokenizer.decode(row) == system.bench.test["text"].iloc[0]
    assert tokenizer.decode(tokens[0][response[0]].tolist()) == system.bench.test["trace"].iloc[0] + "</y><eos>"


def test_a_tokenizer_that_changes_the_text_is_refused(tiny_hf, tmp_path, cli):
    from internalize.systems.strategies.hf_models import gpt2

    folder = gpt2(tmp_path / "spaced", "char")
    config = json.loads((folder / "tokenizer.json").read_text())
    config["decoder"] = None  # word-level pieces decoded with spaces between them
    (folder / "tokenizer.json").write_text(json.dumps(config))
    result = cli("run", "strategies_base", "--smoke", "--set", f"model.hf_path={folder}", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "does not decode the benchmark's text to itself" in result.output, result.output


@pytest.mark.slow
def test_lora_adaptation_then_factorisation_on_a_qwen2_with_its_own_bpe(tiny_hf, tmp_path, cli):
    folder, run = tiny_hf["qwen2_bpe"], tmp_path / "base"
    result = cli("run", "strategies_base", "--smoke", "--quiet", "--set", f"model.hf_path={folder}", *FAST_EVAL[:2],
                 "--out", run)
    assert result.exit_code == 0, result.output
    summary = read_summary(run)
    assert 0 < summary["trainable_parameters"] < summary["parameters"] and summary["probes"]["accuracy"]
    saved = {p.name for p in (run / "hf").iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= saved
    assert not [p for p in run.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle")]
    # only LoRA and the frame tokens' rows trained: the other rows of the embeddings and the (untied)
    # head are the pretrained model's, and with the adapter off the model is the pretrained one
    system = base_system(folder)
    from internalize.runs import load_checkpoint, load_weights

    state, tensors = load_checkpoint(run)
    load_weights(system.model, tensors, system.fixed(), state["train"]["fixed"])
    pretrained = system.pretrained()
    frame_rows = sorted(system.bench.tokenizer.ids.values())
    saved_rows = json.loads((folder / "config.json").read_text())["vocab_size"]  # rows grown after it are new
    others = [i for i in range(saved_rows) if i not in frame_rows]
    for get in ("get_input_embeddings", "get_output_embeddings"):
        # peft's trainable-token layers keep the pretrained rows and add the trained ones on top
        lm = system.model.lm
        weight = getattr(lm, get)().token_adapter.get_merged_weights(["default"])
        assert torch.equal(weight[others], getattr(pretrained.lm, get)().weight[others])
        assert not torch.equal(weight[frame_rows], getattr(pretrained.lm, get)().weight[frame_rows])
    tokens = system.bench.val[0][:4]
    with system.model.lm.disable_adapter():
        assert torch.allclose(system.model(tokens)[0], pretrained(tokens)[0], atol=1e-5)
    adapted = system.model(tokens)[0]
    result = cli("evaluate", run)
    assert result.exit_code == 0 and not (run / "evaluation" / "hf").exists(), result.output
    assert json.loads((run / "evaluation.json").read_text())["fidelity"] == summary["fidelity"]
    # the factorisation reads the adapted model back, its adapter merged, as its frozen base
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.base={run}", *FAST_EVAL,
                 "--out", tmp_path / "fz")
    assert result.exit_code == 0, result.output
    summary = read_summary(tmp_path / "fz")
    for key in ("fidelity", "alignment", "alignment_control", "alignment_lift", "kl", "strategy_posterior"):
        assert key in summary, key
    assert cli("evaluate", tmp_path / "fz").exit_code == 0
    generations = pd.read_parquet(tmp_path / "fz" / "generations.parquet")
    assert set(generations["purpose"]) >= {"fidelity", "pair_source", "pair_target", "control_target"}
    torch.manual_seed(0)
    factorize = build(load("strategies_factorize", scale="smoke", overrides=[f"model.base={run}"]))
    assert torch.allclose(factorize.net.reference_logits(tokens), adapted, atol=1e-4)


@pytest.mark.slow
def test_full_adaptation_of_a_gpt2_with_a_character_tokenizer_in_bf16(tiny_hf, tmp_path, cli):
    folder, run = tiny_hf["gpt2_char"], tmp_path / "base"
    result = cli("run", "strategies_base", "--smoke", "--quiet", "--set", f"model.hf_path={folder}",
                 "--set", "model.adapt=full", "--set", "model.dtype=bf16", *FAST_EVAL[:2], "--out", run)
    assert result.exit_code == 0, result.output
    summary = read_summary(run)
    assert summary["trainable_parameters"] == summary["parameters"]
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= {p.name for p in (run / "hf").iterdir()}
    system = base_system(folder, "model.adapt=full", "model.dtype=bf16")
    assert next(system.model.parameters()).dtype == torch.bfloat16
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.base={run}",
                 "--set", "model.dtype=bf16", *FAST_EVAL, "--out", tmp_path / "fz")
    assert result.exit_code == 0, result.output
    assert 0 <= read_summary(tmp_path / "fz")["alignment_chance"] <= 1
    # a raw pretrained model as the factorisation's base, through its own tokenizer
    result = cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.hf_path={folder}", *FAST_EVAL,
                 "--out", tmp_path / "raw")
    assert result.exit_code == 0, result.output


def test_a_folder_that_cannot_serve_is_refused_with_one_line(tiny_hf, tmp_path, cli):
    from internalize.systems.strategies.hf_models import gpt2, qwen2_bpe

    no_config = tmp_path / "no_config"
    no_config.mkdir()
    no_tokenizer = tmp_path / "no_tokenizer"
    gpt2(no_tokenizer, "char")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    short = qwen2_bpe(tmp_path / "short", positions=16)
    for folder, message in ((no_config, "holds no Hugging Face model (no config.json)"),
                            (no_tokenizer, "holds no tokenizer"),
                            (short, "positions are fewer than the benchmark's longest sequence")):
        for experiment in ("strategies_base", "strategies_factorize"):
            result = cli("run", experiment, "--smoke", "--set", f"model.hf_path={folder}", "--out", tmp_path / "x")
            assert result.exit_code == 2 and message in result.output, (experiment, result.output)
            assert len(result.output.strip().splitlines()) == 1, result.output


@pytest.mark.slow
def test_checkpoints_leave_the_pretrained_weights_out_and_refuse_a_changed_model(tiny_hf, tmp_path, cli):
    import shutil

    from safetensors.torch import load_file, save_file

    from internalize.runs import load_checkpoint

    folder = shutil.copytree(tiny_hf["qwen2_bpe"], tmp_path / "model")
    run = tmp_path / "base"
    args = ["strategies_base", "--smoke", "--quiet", "--set", f"model.hf_path={folder}", *FAST_EVAL[:2]]
    assert cli("run", *args, "--out", run).exit_code == 0
    state, tensors = load_checkpoint(run)
    system = base_system(folder)
    learnable = {n for n, p in system.model.named_parameters() if p.requires_grad}
    saved = {k[6:] for k in tensors if k.startswith("model.")}
    assert saved == learnable and len(state["train"]["fixed"]) == 64  # LoRA and the frame rows, not the model
    pretrained = sum(v.numel() for v in load_file(folder / "model.safetensors").values())
    assert sum(tensors[f"model.{k}"].numel() for k in saved) < pretrained / 2
    assert cli("evaluate", run).exit_code == 0  # the same model: read again, checked, evaluated
    # the factorisation over that run: its base's copies left out as well
    fz = tmp_path / "fz"
    assert cli("run", "strategies_factorize", "--smoke", "--quiet", "--set", f"model.base={run}", *FAST_EVAL,
               "--out", fz).exit_code == 0
    assert all("lora_" in k or "head" in k or "embed_z" in k or "token_adapter" in k
               for k in load_checkpoint(fz)[1] if k.startswith("model.")), sorted(load_checkpoint(fz)[1])
    # the model folder changed after the run: its checkpoint no longer describes what it was trained over
    weights = load_file(folder / "model.safetensors")
    name = next(k for k in sorted(weights) if k.endswith("mlp.up_proj.weight"))
    weights[name] = weights[name] + 0.01
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    for command in (["evaluate", run], ["run", *args, "--set", f"model.init={run}", "--out", tmp_path / "again"]):
        result = cli(*command)
        assert result.exit_code == 2 and "not the ones the checkpoint was trained over" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
