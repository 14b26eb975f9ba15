"""Prompt rendering: the paper's templates (appendix A and B.1) filled from an episode's state.

Templates live as text files in the repository's ``prompts/`` folder, one per environment family
(``alfworld``, ``webshop``, ``searchqa``, ``default``). ``$ECPO_PROMPTS_DIR`` points elsewhere to use
edited copies. Each file holds two sections, each introduced by a line ``[[name]]``:

- ``[[first_step]]``: the first step, when there is no history yet;
- ``[[with_history]]``: every later step, with the last ``history_length`` (observation, action) pairs.

Text before the first section is a comment and ignored. Fields are ``{name}``; the ones filled are
``task``, ``step_count`` (steps already taken), ``current_step`` (``step_count + 1``), ``history_length``
(pairs shown), ``action_history``, ``past_actions`` (the shown pairs' actions only), ``memory_context``
(search-QA history), ``current_observation`` and ``admissible_actions``. Any other ``{...}`` text in a
template is left untouched, and the values substituted in are never themselves re-scanned for fields, so
observations may contain braces.
"""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ecpo_gym.families import declared_history_length, family_of
from ecpo_gym.kwargs import shown

PROMPTS_ENV_VAR = "ECPO_PROMPTS_DIR"
TEMPLATE_NAMES = ("alfworld", "webshop", "searchqa", "default")
# compact: prompts/compact.txt for every family (small models, CPU runs); compact-actions: prompts/compact_actions.txt,
# the same with past actions in place of past observations
PROMPT_STYLES = ("paper", "compact", "compact-actions")
SECTIONS = ("first_step", "with_history")

_SECTION_HEADER = re.compile(r"^\[\[(\w+)\]\]\s*$", re.MULTILINE)
_FIELD = re.compile(r"\{(\w+)\}")
_INFORMATION_TAG = "<information>"


def template_name(env_name: str) -> str:
    """The template of an environment id (its declared ``EnvFamily.prompt``) or a template's own name.

    ``ecpo/ALFWorld-v0``, ``ecpo/ALFWorldGen-v0`` -> ``alfworld``; the WebShop ids -> ``webshop``; the search-QA
    ids -> ``searchqa``; the diagnostic MDPs -> ``default``; a declared family with its own template file -> that
    file's path. A name in ``TEMPLATE_NAMES`` stands for itself; anything else (an undeclared environment) gets
    ``default``.
    """
    family = family_of(str(env_name))
    if family is not None:
        return family.prompt
    return str(env_name) if env_name in TEMPLATE_NAMES else "default"


def prompts_dir() -> Path:
    """The folder the templates are read from.

    ``$ECPO_PROMPTS_DIR`` if set; else the source checkout's ``prompts/`` (editable installs); else the copy a
    wheel installs as data files under ``<prefix>/share/ecpo/prompts``.
    """
    override = os.environ.get(PROMPTS_ENV_VAR)
    if override:
        candidates = [Path(override)]
    else:
        candidates = [Path(__file__).resolve().parents[2] / "prompts",
                      Path(sysconfig.get_path("data")) / "share" / "ecpo" / "prompts"]
    for folder in candidates:
        if folder.is_dir():
            return folder
    raise FileNotFoundError(
        f"prompt templates folder not found (looked in {', '.join(map(str, candidates))}); set "
        f"${PROMPTS_ENV_VAR} to a folder holding {', '.join(n + '.txt' for n in TEMPLATE_NAMES)} "
        "(the repository ships them in prompts/)"
    )


@lru_cache(maxsize=32)
def _read_sections(path: Path, mtime_ns: int) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    headers = list(_SECTION_HEADER.finditer(text))
    sections: dict[str, str] = {}
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        sections[header.group(1)] = text[header.end() :end].strip("\n")
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        raise ValueError(f"prompt template {path} lacks section(s) {', '.join('[[' + m + ']]' for m in missing)}")
    return sections


def load_template(env_name: str, style: str = "paper") -> dict[str, str]:
    """The ``first_step`` and ``with_history`` templates of ``env_name``'s family (``style="compact"`` or
    ``"compact-actions"``: one short template every family shares)."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"prompt style {shown(style)}; valid: {', '.join(PROMPT_STYLES)}")
    name = template_name(env_name) if style == "paper" else style.replace("-", "_")
    path = Path(name) if name.endswith(".txt") else prompts_dir() / f"{name}.txt"  # a family's own file
    if not path.is_file():
        raise FileNotFoundError(f"prompt template {path} not found (expected one of {TEMPLATE_NAMES} in {path.parent})")
    return dict(_read_sections(path, path.stat().st_mtime_ns))


def fill_template(template: str, fields: dict[str, Any]) -> str:
    """Replace each ``{name}`` whose name is in ``fields``; one pass, so values are never re-scanned."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        return str(fields[name]) if name in fields else match.group(0)

    return _FIELD.sub(substitute, template)


def format_admissible_actions(actions: Sequence[str]) -> str:
    """Actions as the list inside the template's brackets: ``'look', 'go to desk 1'``."""
    return ", ".join(f"'{action}'" for action in actions)


def format_action_history(history: Sequence[tuple[str, str]], first_step: int) -> str:
    """(observation, action) pairs numbered by the step they were taken at, one line each."""
    lines = []
    for offset, (observation, action) in enumerate(history):
        step = first_step + offset
        lines.append(f"[Observation {step}: '{observation}', Action {step}: '{action}']")
    return "\n".join(lines)


def format_past_actions(history: Sequence[tuple[str, str]]) -> str:
    """The actions of (observation, action) pairs, oldest first, quoted as the admissible list is."""
    return format_admissible_actions([action for _, action in history])


def format_memory_context(
    history: Sequence[tuple[str, str]], current_observation: str, first_step: int
) -> str:
    """Search-QA history: each past action with the search results it brought back.

    The results of action k are the observation seen at step k+1 (the next pair's observation, or the
    current observation for the latest action); they are wrapped in ``<information>`` tags unless the
    environment already did.
    """
    results = [observation for observation, _ in history[1:]] + [current_observation]
    entries = []
    for offset, ((_, action), result) in enumerate(zip(history, results)):
        result = result.strip()
        if result and _INFORMATION_TAG not in result:
            result = f"<information>{result}</information>"
        entries.append(f"Step {first_step + offset}: {action.strip()}\n{result}".rstrip())
    return "\n".join(entries)


def render_prompt(
    env_name: str,
    *,
    task: str,
    step_count: int,
    history: Sequence[tuple[str, str]],
    observation: str,
    admissible_actions: Sequence[str],
    history_length: int | None = None,
    style: str = "paper",
) -> str:
    """The user prompt for the current step of an episode (paper appendix A / B.1 templates).

    ``step_count`` is the number of steps already taken and ``history`` the (observation, action) pair of
    each of them, oldest first (it may already be truncated: only its last ``history_length`` pairs are
    shown, numbered so the newest is step ``step_count``). ``history_length`` defaults to the environment's
    declared one (``ecpo_gym.families``: 2; 4 for search-QA). With ``step_count == 0`` or no history pair to
    show, the ``first_step`` variant is used.
    """
    if step_count < 0:
        raise ValueError(f"step_count must be >= 0, got {step_count}")
    if history_length is None:
        history_length = declared_history_length(env_name)
    if history_length < 0:
        raise ValueError(f"history_length must be >= 0, got {history_length}")
    pairs = [(str(obs), str(act)) for obs, act in history]
    shown = pairs[len(pairs) - min(history_length, len(pairs), step_count) :] if history_length else []
    first_shown_step = step_count - len(shown) + 1
    templates = load_template(env_name, style)
    fields = {
        "task": str(task).strip(),
        "step_count": step_count,
        "current_step": step_count + 1,
        "history_length": len(shown),
        "action_history": format_action_history(shown, first_shown_step),
        "past_actions": format_past_actions(shown),
        "memory_context": format_memory_context(shown, str(observation), first_shown_step),
        "current_observation": str(observation),
        "admissible_actions": format_admissible_actions([str(a) for a in admissible_actions]),
    }
    section = "with_history" if shown else "first_step"
    return fill_template(templates[section], fields)


def to_chat(tokenizer: Any, prompt: str) -> str:
    """``prompt`` as one user turn in the model's chat template, ready for the assistant's reply.

    Tokenizers without a chat template get a plain ``User: ...`` / ``Assistant:`` transcript.
    """
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        if isinstance(text, str):
            return text
    return f"User: {prompt}\nAssistant:"
