"""The small text policy (``policy: text``): a network trained from scratch that scores each admissible command
against the goal, the current observation and the last few steps, with a softmax over the admissible commands.

It is the standard CPU-sized text-game agent (DRRN, He et al. 2016: a context encoder and an action encoder whose
interaction gives each command a score), not a language model: it makes thousands of decisions per second on two
cores, so the paper's whole pipeline (expert warm start, group RL with step credit, validation on every
``valid_seen`` game) runs on real ALFWorld without a GPU.

What one step reads (every piece from its ``StepContext``, so any ``ecpo_gym`` family with admissible actions
works):

- the context: the last ``context_pairs`` (observation, action) pairs of the history, the goal (``task``) and the
  current observation, as words (``text_vocabulary.py``), each segment opened by its marker and cut to
  ``segment_words``;
- each admissible command's words, after one feature token: how many times the command was already sent in this
  episode (0, 1, 2, 3+; counted over the whole history the rollout passes, ``history_length``), the cue that
  breaks loops a few steps of text cannot show.

The network: word and segment embeddings, a width-3 convolution over the context, max-pooled per segment
(history, goal, observation) into one context vector ``c``; a command vector ``a`` from the mean and max of its
word embeddings plus its repeat feature; and ``score = MLP([c, a, c*a, overlap])``, where ``overlap`` is the
share of the command's words found in the goal and in the observation (computed from the ids, inside the
network). ``pi(a | s) = softmax(score / T)`` over the admissible commands.

Rows: a step's stored "prompt" is ``scoring.pack_candidates(context ids, [feature + command ids, ...])`` and its
"response" is ``[index of the chosen command]``, the scoring LLM's layout, so the rollout, the step-row table,
the credit and the clipped objective run unchanged; ``logprobs`` recomputes the same softmax from the stored ids
(the distribution ``act`` sampled from: tested). The choice is ``policies.choose``'s (the one candidate chooser:
the step's common-random-number ``draw`` when it has one, else a uniform from the policy's own generator;
``T <= 0`` is greedy).

A folder made by ``save_pretrained`` (``ecpo sft`` writes one) holds ``text_policy.safetensors`` and
``text_policy.json`` (architecture and vocabulary); ``ecpo train policy=text model=DIR`` starts from it, and
``model`` empty starts from random weights (seeded) and a vocabulary of hash buckets only.

The candidates (``command_set``): ``"admissible"`` (the default) scores the step's admissible commands;
``"open"`` scores the environment family's open command set (``ecpo_gym.families.open_command_rule``: for ALFWorld,
the admissible commands plus the command templates filled with what the episode named so far,
``ecpo_gym/alfworld/commands.py``), so the policy can send an invalid command as an LLM that writes its action does.
The folder records the set the policy was saved with (``text_policy.json``'s ``command_set``).
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ecpo_gym.kwargs import shown
from ecpo_train.policies.base import Policy, PolicyOutput, StepContext
from ecpo_train.policies.choose import choose, distribution, log_policy
from ecpo_train.policies.scoring import pack_candidates, unpack_candidates
from ecpo_train.policies.text_vocabulary import DEFAULT_HASH_BUCKETS, Vocabulary
from ecpo_train.policies.text_vocabulary import SPECIAL as SPECIAL_WORDS

WEIGHTS_FILE = "text_policy.safetensors"
CONFIG_FILE = "text_policy.json"
COMMAND_SETS = ("admissible", "open")  # what a step's candidates are (module docstring)


def check_command_set(command_set: str) -> str:
    """``command_set`` if it names one of ``COMMAND_SETS``, else one ``ValueError``."""
    if command_set not in COMMAND_SETS:
        raise ValueError(f"command_set={shown(command_set)}: one of {', '.join(COMMAND_SETS)}")
    return command_set


def candidate_rule(command_set: str, env_name: str) -> Any:
    """``None`` for the admissible commands, else the open command set of ``env_name`` (an env id or a family name;
    ``ValueError`` if its family declares none)."""
    if check_command_set(command_set) == "admissible":
        return None
    from ecpo_gym.families import family_of, open_command_rule

    family = getattr(family_of(env_name), "family", None) or env_name
    rule = open_command_rule(family)
    if rule is None:
        raise ValueError(f"command_set=open: the environment family {shown(family)} declares no open command set "
                         "(ALFWorld's does: ecpo/ALFWorld-v0, ecpo/ALFWorldGen-v0)")
    return rule


@dataclass(frozen=True)
class TextArchitecture:
    """The network's sizes and what a step shows it (module docstring)."""

    embedding_dim: int = 64
    hidden_dim: int = 128
    context_pairs: int = 2  # (observation, action) pairs of the history shown as text
    segment_words: int = 96  # words kept of each observation (its first ones)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "context_pairs" else 1):
                raise ValueError(f"text policy {name}={shown(value)}: it must be an integer >= "
                                 f"{0 if name == 'context_pairs' else 1}")


class TextScorer(nn.Module):
    """Context and command encoders and their interaction (module docstring).

    Inputs come packed, without padding: ``context`` is every context row's ids one after the other and
    ``context_row`` the row of each id; ``commands`` every command's ids (its repeat feature first) and
    ``command_index`` the command of each id; ``owner`` the context row of each command."""

    SEGMENTS = 3  # history, goal, observation
    BIGRAM_BUCKETS = 1 << 14

    def __init__(self, vocabulary: Vocabulary, arch: TextArchitecture) -> None:
        super().__init__()
        d, h = arch.embedding_dim, arch.hidden_dim
        self.markers = [vocabulary.special(name) for name in ("<history>", "<goal>", "<observation>")]
        self.first_taken = vocabulary.special("<taken0>")
        self.first_bigram = vocabulary.size
        self.words = nn.Embedding(vocabulary.size + self.BIGRAM_BUCKETS, d)
        self.context_out = nn.Linear(2 * d * self.SEGMENTS, h)
        self.command = nn.Linear(2 * d, h)
        self.taken = nn.Embedding(4, h)
        self.score = nn.Sequential(nn.Linear(3 * h + 2, h), nn.ReLU(), nn.Linear(h, 1))

    def bags(self, ids: torch.Tensor, bag: torch.Tensor, bags: int) -> torch.Tensor:
        """``[bags, 2d]``: the mean and the max of the embeddings of each bag's words and word pairs (two neighbours
        in one bag, hashed into ``BIGRAM_BUCKETS`` ids). ``bag`` is sorted (each bag's ids contiguous); an empty bag
        reads zeros."""
        same = bag[1:] == bag[:-1]
        pairs = self.first_bigram + (ids[:-1][same] * 1_000_003 + ids[1:][same]) % self.BIGRAM_BUCKETS
        owner = torch.cat([bag, bag[:-1][same]])
        order = torch.argsort(owner, stable=True)
        tokens = torch.cat([ids, pairs])[order]
        lengths = torch.bincount(owner, minlength=bags)
        if torch.is_grad_enabled():  # the learner: segment_reduce's backward is the fastest on a CPU
            e = self.words(tokens)
            total = torch.segment_reduce(e, "sum", lengths=lengths)
            most = torch.segment_reduce(e, "max", lengths=lengths)
        else:  # sampling: embedding_bag's forward is faster, and gives the same floats (tests/test_text_policy.py)
            offsets = torch.cumsum(lengths, 0) - lengths
            total = nn.functional.embedding_bag(tokens, self.words.weight, offsets, mode="sum")
            most = nn.functional.embedding_bag(tokens, self.words.weight, offsets, mode="max")
        filled = (lengths > 0).unsqueeze(-1)
        mean = total / lengths.clamp(min=1).unsqueeze(-1)
        return torch.cat([mean, torch.where(filled, most, torch.zeros_like(most))], dim=-1)

    def segments(self, context: torch.Tensor, context_row: torch.Tensor) -> torch.Tensor:
        """Each context id's segment, 0 history, 1 goal, 2 observation: the last marker at or before it in its row
        (every row opens with ``<history>``, then ``<goal>``, then ``<observation>``: TextPolicy.context_ids)."""
        code = torch.zeros_like(context)
        for index, marker in enumerate(self.markers, start=1):
            code = torch.where(context == marker, context_row * 4 + index, code)
        return torch.cummax(code, dim=0).values % 4 - 1

    def forward(self, context: torch.Tensor, context_row: torch.Tensor, commands: torch.Tensor,
                command_index: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """The scores ``[M]`` of the ``M`` commands (class docstring)."""
        rows, count = int(owner.max()) + 1 if owner.numel() else 0, owner.numel()
        segment = self.segments(context, context_row)
        c = self.bags(context, context_row * self.SEGMENTS + segment, rows * self.SEGMENTS)
        c = torch.relu(self.context_out(c.view(rows, -1)))[owner]  # [M, h]

        first = torch.ones_like(command_index, dtype=torch.bool)
        first[1:] = command_index[1:] != command_index[:-1]
        taken = (commands[first] - self.first_taken).clamp(0, 3)
        words, word_of = commands[~first], command_index[~first]
        a = torch.tanh(self.command(self.bags(words, word_of, count))) + self.taken(taken)

        # the share of each command's words found in its context's goal, and in its observation
        width = torch.bincount(word_of, minlength=count).clamp(min=1)
        overlap = []
        probe = owner[word_of] * self.first_bigram + words  # (context row, word) as one id: ids < first_bigram
        for index in (1, 2):
            inside = segment == index
            keys = torch.unique(context_row[inside] * self.first_bigram + context[inside])
            found = torch.isin(probe, keys).to(c.dtype)
            overlap.append((c.new_zeros(count).index_add_(0, word_of, found) / width).unsqueeze(-1))
        return self.score(torch.cat([c, a, c * a, *overlap], dim=-1)).squeeze(-1)


class TextPolicy(Policy):
    """The small text policy over admissible commands (module docstring)."""

    def __init__(self, vocabulary: Vocabulary | None = None, arch: TextArchitecture | None = None, *,
                 seed: int = 0, env_name: str = "", command_set: str = "admissible") -> None:
        super().__init__()
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.arch = arch if arch is not None else TextArchitecture()
        self.env_name = env_name
        self.command_set = check_command_set(command_set)  # (an open set's family is looked up on first use)
        self._rules: dict[str, Any] = {}  # env family -> its open command set (looked up on first use)
        with torch.random.fork_rng(devices=[]):  # the seed alone decides the initial weights
            torch.manual_seed(int(seed))
            self.model = TextScorer(self.vocabulary, self.arch)
        self.generator = torch.Generator().manual_seed(int(seed))
        self._marks = {name: self.vocabulary.special(name)
                       for name in ("<history>", "<goal>", "<observation>", "<act>", "<taken0>")}

    @property
    def vocab_size(self) -> int:
        """Token ids this policy's rows hold (RLlib's spaces)."""
        return self.vocabulary.size

    # ------------------------------------------------------------------ encoding a step
    def context_ids(self, ctx: StepContext) -> list[int]:
        """The context's ids: ``<history>`` pairs (observation words, ``<act>``, action words), ``<goal>``,
        ``<observation>`` (module docstring)."""
        cut = self.arch.segment_words
        encode = self.vocabulary.encode
        ids = [self._marks["<history>"]]
        pairs = ctx.history[-self.arch.context_pairs:] if self.arch.context_pairs else []
        for observation, action in pairs:
            ids += encode(observation)[:cut]
            ids.append(self._marks["<act>"])
            ids += encode(action)[:cut]
        ids.append(self._marks["<goal>"])
        ids += encode(ctx.task)[:cut]
        ids.append(self._marks["<observation>"])
        ids += encode(ctx.observation)[:cut]
        return ids

    def candidates(self, ctx: StepContext) -> list[str]:
        """The commands this step chooses among: the admissible ones, or the open command set (``command_set``)."""
        if self.command_set == "admissible" or not ctx.admissible_actions:
            return list(ctx.admissible_actions)
        family = ctx.env_name or self.env_name
        if family not in self._rules:
            self._rules[family] = candidate_rule(self.command_set, family)
        return self._rules[family](ctx.admissible_actions, ctx.history, ctx.observation)

    def command_ids(self, ctx: StepContext, candidates: Sequence[str] | None = None) -> list[list[int]]:
        """Each candidate command's ids (``candidates``: ``self.candidates(ctx)``, when the caller has them already):
        its repeat feature (sent 0, 1, 2, 3+ times in the history), its words."""
        sent: dict[str, int] = {}
        for _, action in ctx.history:
            sent[action] = sent.get(action, 0) + 1
        first, encode = self._marks["<taken0>"], self.vocabulary.encode
        listed = self.candidates(ctx) if candidates is None else candidates
        return [[first + min(sent.get(command, 0), 3), *encode(command)] for command in listed]

    def step_row(self, ctx: StepContext) -> list[int]:
        """The stored prompt row of a step (``scoring.pack_candidates`` layout)."""
        return pack_candidates(self.context_ids(ctx), self.command_ids(ctx))

    # ------------------------------------------------------------------ scoring
    def _scores(self, items: Sequence[tuple[Sequence[int], Sequence[Sequence[int]]]]) -> list[torch.Tensor]:
        """Each item's command scores (items: ``(context ids, [command ids, ...])``), one batched forward."""
        if not items:
            return []
        contexts = [ids for ids, _ in items]
        listed = [command for _, commands in items for command in commands]
        per_item = [len(commands) for _, commands in items]
        long = torch.long
        context = torch.tensor(list(chain.from_iterable(contexts)), dtype=long)
        context_row = torch.repeat_interleave(torch.arange(len(items)), torch.tensor([len(c) for c in contexts]))
        commands = torch.tensor(list(chain.from_iterable(listed)), dtype=long)
        command_index = torch.repeat_interleave(torch.arange(len(listed)), torch.tensor([len(c) for c in listed]))
        owner = torch.repeat_interleave(torch.arange(len(items)), torch.tensor(per_item))
        scores = self.model(context, context_row, commands, command_index, owner)
        return list(torch.split(scores, per_item))

    # ------------------------------------------------------------------ Policy API
    @torch.no_grad()
    def act(self, contexts: Sequence[StepContext], temperature: float = 1.0) -> PolicyOutput:
        out = PolicyOutput(actions=[], responses=[])
        live = [i for i, ctx in enumerate(contexts) if ctx.admissible_actions]
        listed = {i: self.candidates(contexts[i]) for i in live}
        items = {i: (self.context_ids(contexts[i]), self.command_ids(contexts[i], listed[i])) for i in live}
        scores = dict(zip(live, self._scores([items[i] for i in live])))
        for i, ctx in enumerate(contexts):
            if i not in scores:  # nothing admissible: text the env treats as an invalid action
                out.actions.append("")
                out.responses.append("")
                out.prompt_ids.append([])
                out.response_ids.append([])
                out.logprobs.append([])
                continue
            k, logp = choose(scores[i], temperature, draw=ctx.draw, generator=self.generator)
            out.actions.append(listed[i][k])
            out.responses.append(listed[i][k])
            out.prompt_ids.append(pack_candidates(*items[i]))
            out.response_ids.append([k])
            out.logprobs.append([float(logp[k])])
        return out

    @torch.no_grad()
    def action_distributions(self, contexts: Sequence[StepContext], temperature: float) -> list[dict[str, float]]:
        """``pi(a | s)`` over each context's admissible commands (``T <= 0``: the greedy one-hot); a context with
        none gets an empty distribution."""
        live = [c for c in contexts if c.admissible_actions]
        scores = iter(self._scores([(self.context_ids(c), self.command_ids(c)) for c in live]))
        out = []
        for ctx in contexts:
            if not ctx.admissible_actions:
                out.append({})
                continue
            probs = distribution(next(scores), temperature)
            out.append(dict(zip(self.candidates(ctx), probs.tolist())))
        return out

    def logprobs(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        *,
        temperature: float = 1.0,
        with_entropy: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        rows = [i for i, r in enumerate(response_ids) if r]
        items = [unpack_candidates(prompt_ids[i]) for i in rows]
        scores = self._scores(items)
        token_logp = torch.zeros(len(response_ids), 1)
        mask = torch.zeros(len(response_ids), 1)
        entropy = torch.zeros(len(response_ids), 1) if with_entropy else None
        if rows:
            logps = [log_policy(s, temperature) for s in scores]
            index = torch.as_tensor(rows, dtype=torch.long)
            chosen = torch.stack([lp[int(response_ids[i][0])] for i, lp in zip(rows, logps)])
            token_logp = token_logp.index_put((index, torch.zeros_like(index)), chosen)
            mask[index, 0] = 1.0
            if entropy is not None:
                values = torch.stack([-(lp.exp() * lp).sum() for lp in logps])
                entropy = entropy.index_put((index, torch.zeros_like(index)), values)
        return token_logp, mask, entropy

    def frozen_copy(self) -> TextPolicy:
        ref = copy.deepcopy(self)
        ref.requires_grad_(False)
        return ref

    # ------------------------------------------------------------------ saving and loading
    def get_extra_state(self) -> Any:
        return {"vocabulary": self.vocabulary.to_dict(), "architecture": asdict(self.arch),
                "generator": self.generator.get_state()}

    def set_extra_state(self, state: Any) -> None:
        vocabulary = Vocabulary.from_dict(state["vocabulary"])
        if vocabulary.to_dict() != self.vocabulary.to_dict() or state["architecture"] != asdict(self.arch):
            raise ValueError("this text-policy state was saved with another vocabulary or architecture than the "
                             "policy built for it (model=... must name the folder the run started from)")
        self.generator.set_state(state["generator"])

    def save_pretrained(self, folder: str | Path, *, half: bool = False) -> None:
        """Write ``text_policy.safetensors``, ``text_policy.json`` and their ``checksums.sha256`` into ``folder``
        (module docstring); ``half``: the weights in float16 (half the bytes; loading casts them back to float32)."""
        from safetensors.torch import save_file

        from ecpo_train.files.checksums import write_folder_checksums

        folder = Path(folder)
        weights = {name: tensor.detach().contiguous() for name, tensor in self.model.state_dict().items()}
        if half:
            weights = {name: tensor.half() if tensor.is_floating_point() else tensor for name, tensor in weights.items()}
        save_file(weights, str(folder / WEIGHTS_FILE))
        config = {"architecture": asdict(self.arch), "vocabulary": self.vocabulary.to_dict(),
                  "command_set": self.command_set}
        (folder / CONFIG_FILE).write_text(json.dumps(config) + "\n", encoding="utf-8")
        write_folder_checksums(folder)  # (ecpo sft swaps the folder in whole: the checksums come with it)

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, seed: int = 0, env_name: str = "",
                        command_set: str | None = None) -> TextPolicy:
        """The policy ``save_pretrained`` wrote into ``folder``; one ``ValueError`` naming it otherwise.
        ``command_set``: the candidates it chooses among (``None``: the set the folder was saved with)."""
        from safetensors.torch import load_file

        folder = Path(folder).expanduser()
        vocabulary, arch = check_text_policy_folder(folder)  # everything bounded and checked before allocating
        chosen = command_set if command_set is not None else saved_command_set(folder)
        policy = cls(vocabulary, arch, seed=seed, env_name=env_name, command_set=chosen)
        try:
            weights = load_file(str(folder / WEIGHTS_FILE))
            if not all(bool(torch.isfinite(t).all()) for t in weights.values()):
                raise ValueError("a weight is nan or infinite")
            policy.model.load_state_dict(weights)  # a float16 folder (save_pretrained(half=True)) cast to float32
        except Exception as err:  # noqa: BLE001 -- safetensors raises its own type; torch RuntimeError
            raise ValueError(f"model={folder}: damaged text-policy folder ({type(err).__name__}: "
                             f"{' '.join(str(err).split())[:120]})") from None
        return policy


def saved_command_set(folder: Path) -> str:
    """The command set a text-policy folder was saved with (``text_policy.json``'s ``command_set``; a folder saved
    before the option existed: ``"admissible"``). Read after ``check_text_policy_folder``."""
    value = json.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8")).get("command_set", "admissible")
    try:
        return check_command_set(value)
    except ValueError as err:
        raise ValueError(f"model={folder}: {CONFIG_FILE}'s {err}") from None


# A model folder's sizes, bounded before anything is allocated from them (the embedding table has a row per known
# word and bucket; the defaults are 64 / 128 / 2 / 96, 8,000 words and 2,048 buckets).
MAX_KNOWN_WORDS = 1_000_000
MAX_WORD_CHARS = 1_000
MAX_HASH_BUCKETS = 1 << 22
MAX_ARCHITECTURE = {"embedding_dim": 4096, "hidden_dim": 8192, "context_pairs": 1000, "segment_words": 100_000}
MAX_ARCHITECTURE_VALUE = 100_000  # an architecture field not listed above
MAX_EMBEDDING_FLOATS = 1 << 30  # 4 GiB of float32 in the word table
MAX_CONFIG_BYTES = 64 << 20
MAX_HEADER_BYTES = 1 << 20  # a safetensors header (names, dtypes, shapes, offsets of a dozen tensors)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def check_text_policy_folder(folder: str | Path) -> tuple[Vocabulary, TextArchitecture]:
    """The one check of a text-policy folder (``model=DIR`` with ``policy=text``), before anything is allocated from
    it: its ``checksums.sha256`` where it has one (``files/checksums.py``), ``text_policy.json`` (bounded size,
    strict JSON, the architecture's and the vocabulary's fields of their types and within the bounds above) and the
    header of ``text_policy.safetensors`` (every weight the network has, float32 or float16, of its shape, inside
    the file).
    Returns the vocabulary and the architecture; anything else is one ``ValueError`` naming the folder."""
    from ecpo_train.files.checksums import check_folder_checksums

    folder = Path(folder).expanduser()
    name = f"model={shown(str(folder))}"
    config_path, weights_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if not os.path.isfile(config_path) or not os.path.isfile(weights_path):  # (False for a name too long)
        raise ValueError(f"{name} is not a text-policy folder (no {CONFIG_FILE} and {WEIGHTS_FILE}): make one with "
                         "`ecpo sft policy=text ... --out DIR`, or leave model empty to start from random weights")
    check_folder_checksums(folder, name)
    try:
        if config_path.stat().st_size > MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {MAX_CONFIG_BYTES >> 20} MiB")
        config = json.loads(config_path.read_text(encoding="utf-8"), parse_constant=_no_constant)
        vocabulary, arch = _checked_config(config)
        with torch.device("meta"):  # the shapes the weights must have, nothing allocated
            expected = {key: (tuple(value.shape)) for key, value in TextScorer(vocabulary, arch).state_dict().items()}
        _check_weights_header(weights_path, expected)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{name}: damaged text-policy folder ({' '.join(str(err).split())[:160]})") from None
    return vocabulary, arch


def _checked_config(config: Any) -> tuple[Vocabulary, TextArchitecture]:
    """``text_policy.json``'s architecture and vocabulary, each field of its type and bounded (``ValueError``)."""
    if not isinstance(config, dict) or not isinstance(config.get("architecture"), dict) \
            or not isinstance(config.get("vocabulary"), dict):
        raise ValueError(f"{CONFIG_FILE} must hold {{architecture: {{...}}, vocabulary: {{known: [...], "
                         "hash_buckets: N}}")
    fields = {f: MAX_ARCHITECTURE.get(f, MAX_ARCHITECTURE_VALUE) for f in asdict(TextArchitecture())}
    architecture = config["architecture"]
    for key, value in architecture.items():
        if key not in fields:
            raise ValueError(f"architecture has an unknown field {shown(key)}")
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= fields[key]:
            raise ValueError(f"architecture {key}={shown(value)}: it must be an integer in [0, {fields[key]}]")
    vocabulary = config["vocabulary"]
    known, buckets = vocabulary.get("known"), vocabulary.get("hash_buckets", DEFAULT_HASH_BUCKETS)
    if not isinstance(known, list) or len(known) > MAX_KNOWN_WORDS \
            or not all(isinstance(w, str) and len(w) <= MAX_WORD_CHARS for w in known):
        raise ValueError(f"vocabulary known must be a list of at most {MAX_KNOWN_WORDS} words (strings)")
    if not isinstance(buckets, int) or isinstance(buckets, bool) or not 1 <= buckets <= MAX_HASH_BUCKETS:
        raise ValueError(f"vocabulary hash_buckets={str(buckets)[:40]}: it must be an integer in [1, "
                         f"{MAX_HASH_BUCKETS}]")
    arch = TextArchitecture(**architecture)
    rows = 1 + len(SPECIAL_WORDS) + len(known) + buckets + TextScorer.BIGRAM_BUCKETS
    if rows * arch.embedding_dim > MAX_EMBEDDING_FLOATS:
        raise ValueError(f"the word table ({rows} rows x embedding_dim={arch.embedding_dim}) is larger than "
                         f"{MAX_EMBEDDING_FLOATS} floats")
    return Vocabulary(known, buckets), arch


def _check_weights_header(path: Path, expected: dict[str, tuple[int, ...]]) -> None:
    """``text_policy.safetensors``'s header read without loading a tensor: exactly the ``expected`` names and
    shapes, float32 (float16 in a half-precision folder), each inside the file (``ValueError`` otherwise: an empty, cut or foreign file)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise ValueError(f"{WEIGHTS_FILE} is {size} bytes: not a safetensors file")
        length = int.from_bytes(head, "little")
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(f"{WEIGHTS_FILE} has no valid safetensors header (it declares {length} bytes)")
        header = json.loads(handle.read(length).decode("utf-8"), parse_constant=_no_constant)
    if not isinstance(header, dict):
        raise ValueError(f"{WEIGHTS_FILE}'s header is not a mapping")
    header.pop("__metadata__", None)
    if set(header) != set(expected):
        missing, extra = sorted(set(expected) - set(header)), sorted(map(str, set(header) - set(expected)))
        raise ValueError(f"{WEIGHTS_FILE} does not hold this network's weights (missing {missing[:3]}, "
                         f"unexpected {[e[:40] for e in extra[:3]]})")
    data = size - 8 - length
    for key, shape in expected.items():
        entry = header[key]
        if not isinstance(entry, dict) or entry.get("dtype") not in ("F32", "F16"):  # F16: save_pretrained(half=True)
            raise ValueError(f"{WEIGHTS_FILE}: weight {key} is neither float32 nor float16")
        if entry.get("shape") != list(shape):
            raise ValueError(f"{WEIGHTS_FILE}: weight {key} has shape {shown(entry.get('shape'))}, the "
                             f"architecture gives {list(shape)}")
        offsets = entry.get("data_offsets")
        count = (4 if entry["dtype"] == "F32" else 2) * math.prod(shape)
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] and offsets[1] - offsets[0] == count and offsets[1] <= data):
            raise ValueError(f"{WEIGHTS_FILE}: weight {key} lies outside the file (cut or damaged)")
