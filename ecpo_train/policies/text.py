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
(the distribution ``act`` sampled from: tested). Sampling takes the step's common-random-number ``draw`` when it
has one (``base.inverse_cdf_index``), else the policy's own generator; ``T <= 0`` is greedy.

A folder made by ``save_pretrained`` (``ecpo sft`` writes one) holds ``text_policy.safetensors`` and
``text_policy.json`` (architecture and vocabulary); ``ecpo train policy=text model=DIR`` starts from it, and
``model`` empty starts from random weights (seeded) and a vocabulary of hash buckets only.
"""

from __future__ import annotations

import copy
import json
from itertools import chain
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ecpo_train.policies.base import Policy, PolicyOutput, StepContext, inverse_cdf_index
from ecpo_train.policies.scoring import pack_candidates, unpack_candidates
from ecpo_train.policies.text_vocabulary import Vocabulary

WEIGHTS_FILE = "text_policy.safetensors"
CONFIG_FILE = "text_policy.json"


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
                raise ValueError(f"text policy {name}={value!r}: it must be an integer >= "
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
                 seed: int = 0, env_name: str = "") -> None:
        super().__init__()
        self.vocabulary = vocabulary if vocabulary is not None else Vocabulary()
        self.arch = arch if arch is not None else TextArchitecture()
        self.env_name = env_name
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

    def command_ids(self, ctx: StepContext) -> list[list[int]]:
        """Each admissible command's ids: its repeat feature (sent 0, 1, 2, 3+ times in the history), its words."""
        sent: dict[str, int] = {}
        for _, action in ctx.history:
            sent[action] = sent.get(action, 0) + 1
        first, encode = self._marks["<taken0>"], self.vocabulary.encode
        return [[first + min(sent.get(command, 0), 3), *encode(command)] for command in ctx.admissible_actions]

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
        items = {i: (self.context_ids(contexts[i]), self.command_ids(contexts[i])) for i in live}
        scores = dict(zip(live, self._scores([items[i] for i in live])))
        for i, ctx in enumerate(contexts):
            if i not in scores:  # nothing admissible: text the env treats as an invalid action
                out.actions.append("")
                out.responses.append("")
                out.prompt_ids.append([])
                out.response_ids.append([])
                out.logprobs.append([])
                continue
            score = scores[i]
            logp = torch.log_softmax(score / temperature if temperature > 0 else score, dim=-1)
            if temperature <= 0:
                k = int(score.argmax())
            elif ctx.draw is not None:
                k = inverse_cdf_index(logp.exp(), ctx.draw)
            else:
                k = int(torch.multinomial(logp.exp(), 1, generator=self.generator))
            out.actions.append(ctx.admissible_actions[k])
            out.responses.append(ctx.admissible_actions[k])
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
            score = next(scores)
            probs = torch.softmax(score / temperature, dim=-1) if temperature > 0 else \
                torch.nn.functional.one_hot(score.argmax(), len(score)).float()
            out.append(dict(zip(ctx.admissible_actions, probs.tolist())))
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
        t = temperature if temperature > 0 else 1.0
        token_logp = torch.zeros(len(response_ids), 1)
        mask = torch.zeros(len(response_ids), 1)
        entropy = torch.zeros(len(response_ids), 1) if with_entropy else None
        if rows:
            logps = [torch.log_softmax(s / t, dim=-1) for s in scores]
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

    def save_pretrained(self, folder: str | Path) -> None:
        """Write ``text_policy.safetensors`` and ``text_policy.json`` into ``folder`` (module docstring)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        weights = {name: tensor.detach().contiguous() for name, tensor in self.model.state_dict().items()}
        save_file(weights, str(folder / WEIGHTS_FILE))
        config = {"architecture": asdict(self.arch), "vocabulary": self.vocabulary.to_dict()}
        (folder / CONFIG_FILE).write_text(json.dumps(config) + "\n", encoding="utf-8")

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, seed: int = 0, env_name: str = "") -> TextPolicy:
        """The policy ``save_pretrained`` wrote into ``folder``; one ``ValueError`` naming it otherwise."""
        from safetensors.torch import load_file

        folder = Path(folder).expanduser()
        if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
            raise ValueError(f"model={folder} is not a text-policy folder (no {CONFIG_FILE} and {WEIGHTS_FILE}): "
                             "make one with `ecpo sft policy=text ... --out DIR`, or leave model empty to start "
                             "from random weights")
        try:
            config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
            policy = cls(Vocabulary.from_dict(config["vocabulary"]), TextArchitecture(**config["architecture"]),
                         seed=seed, env_name=env_name)
            policy.model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as err:
            raise ValueError(f"{folder}: damaged text-policy folder ({' '.join(str(err).split())[:160]})") from None
        return policy
