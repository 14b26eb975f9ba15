"""Chat models for prompt-based agents: one ``complete(messages) -> text`` call, local or over HTTP.

- ``TransformersChatModel``: any causal LM folder or hub id, sampled with the project's
  ``TransformersPolicy.sample`` (temperature <= 0 decodes greedily).
- ``OpenAIChatModel``: an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint (vLLM's server, a
  hosted model, or the demo ``scripts/chat_server.py``) with the standard library's ``urllib``. ``base_url``,
  ``model`` and the key default to ``$ECPO_OPENAI_BASE_URL`` / ``$OPENAI_BASE_URL``, ``$ECPO_OPENAI_MODEL``
  and ``$ECPO_OPENAI_API_KEY`` / ``$OPENAI_API_KEY``. Its name (the agent's identity in the leaderboard) is
  ``model@endpoint``: two endpoints serving one model name are two agents. An endpoint is echoed without the
  credentials a URL may carry (``user:password@``, a query string); an answer that is an HTTP error or not JSON
  is one ``EndpointError`` line.
"""

from __future__ import annotations

import abc
import base64
import contextlib
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

Message = dict[str, str]


class ChatModel(abc.ABC):
    """Something that answers a list of chat messages with the assistant's next message."""

    name: str = "chat"

    @abc.abstractmethod
    def complete(self, messages: Sequence[Message], *, temperature: float, max_tokens: int | None = None,
                 seed: int | None = None) -> str:
        """The assistant's reply to ``messages`` (``temperature <= 0``: greedy)."""


def check_messages(messages: Any) -> list[Message]:
    """``messages`` as a list of ``{"role", "content"}`` dicts; ``ValueError`` (``TypeError`` for a
    non-string content) on anything else."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...} objects")
    checked = []
    for k, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"message {k} must be an object with role system|user|assistant")
        content = message.get("content")
        if not isinstance(content, str):
            raise TypeError(f"message {k} content must be a string")
        checked.append({"role": message["role"], "content": content})
    return checked


def chat_text(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The messages in the tokenizer's chat template with the assistant turn opened (plain transcript otherwise)."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        if isinstance(text, str):
            return text
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class TransformersChatModel(ChatModel):
    """A local ``transformers`` causal LM (see the module docstring)."""

    def __init__(self, model_name_or_path: str, *, device: str = "cpu", dtype: str = "float32",
                 max_new_tokens: int = 512, max_prompt_length: int = 4096) -> None:
        from ecpo_train.policies.llm import TransformersPolicy

        self.policy = TransformersPolicy(model_name_or_path, env_name="default", device=device, dtype=dtype,
                                         max_prompt_length=max_prompt_length, max_response_length=max_new_tokens)
        self.name = str(model_name_or_path)
        self.max_new_tokens = int(max_new_tokens)
        self.max_prompt_length = int(max_prompt_length)

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    def complete_with_usage(self, messages: Sequence[Message], *, temperature: float, max_tokens: int | None = None,
                            seed: int | None = None) -> tuple[str, int, int, bool]:
        """``(text, prompt tokens, completion tokens, stopped at end-of-sequence)``."""
        import torch

        messages = check_messages(messages)
        ids = self.tokenizer(chat_text(self.tokenizer, messages), add_special_tokens=False)["input_ids"]
        ids = list(ids[-self.max_prompt_length :])
        if seed is not None:
            torch.manual_seed(int(seed))
        limit = self.max_new_tokens if max_tokens is None else max(1, int(max_tokens))
        saved, self.policy.max_response_length = self.policy.max_response_length, limit
        try:
            (response,), _ = self.policy.sample([ids], float(temperature))
        finally:
            self.policy.max_response_length = saved
        eos = set(self.policy.eos_token_ids.tolist())
        stopped = bool(response) and response[-1] in eos
        return self.tokenizer.decode(response, skip_special_tokens=True), len(ids), len(response), stopped

    def complete(self, messages: Sequence[Message], *, temperature: float, max_tokens: int | None = None,
                 seed: int | None = None) -> str:
        return self.complete_with_usage(messages, temperature=temperature, max_tokens=max_tokens, seed=seed)[0]


class EndpointError(OSError):
    """A chat endpoint that cannot be used: unreachable, an HTTP error, or an answer that is not chat completions
    (an ``OSError``: every command reports it as one line)."""


def public_url(url: str) -> str:
    """``url`` without its credentials (``user:password@`` and any query string or fragment)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    with contextlib.suppress(ValueError):
        netloc += f":{parts.port}" if parts.port is not None else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _env_first(*names: str) -> str | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


class OpenAIChatModel(ChatModel):
    """An OpenAI-compatible chat-completions endpoint over ``urllib`` (see the module docstring)."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 max_new_tokens: int = 512, timeout_s: float = 120.0, retries: int = 3) -> None:
        base_url = base_url or _env_first("ECPO_OPENAI_BASE_URL", "OPENAI_BASE_URL")
        model = model or _env_first("ECPO_OPENAI_MODEL")
        if not base_url:
            raise ValueError("no endpoint: pass base_url (e.g. http://127.0.0.1:8000/v1) or set "
                             "$ECPO_OPENAI_BASE_URL / $OPENAI_BASE_URL")
        if not model:
            raise ValueError("no model name: pass model or set $ECPO_OPENAI_MODEL")
        self.base_url = base_url.rstrip("/")
        self.endpoint = public_url(self.base_url)  # what is shown and recorded: never a password in the URL
        parts = urllib.parse.urlsplit(self.base_url)  # the request's URL: credentials in the URL go as Basic auth
        self._url = urllib.parse.urlunsplit((parts.scheme, urllib.parse.urlsplit(self.endpoint).netloc,
                                             parts.path.rstrip("/") + "/chat/completions", parts.query, ""))
        self._basic = None
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self._basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.model = model
        self.name = f"{model}@{self.endpoint.split('://', 1)[-1]}"
        self.api_key = api_key if api_key is not None else _env_first("ECPO_OPENAI_API_KEY", "OPENAI_API_KEY")
        self.max_new_tokens = int(max_new_tokens)
        self.timeout_s = float(timeout_s)
        self.retries = max(1, int(retries))

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``/chat/completions``; retries connection errors, 429 and 5xx with backoff."""
        data = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        elif self._basic:
            headers["Authorization"] = f"Basic {self._basic}"
        url, shown = self._url, f"{self.endpoint}/chat/completions"
        last_error: Exception | None = None
        for attempt in range(self.retries):
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                body = " ".join(err.read().decode("utf-8", "replace").split())[:300]
                failure = EndpointError(f"chat endpoint {shown} answered HTTP {err.code}: {body}")
                if err.code != 429 and err.code < 500:
                    raise failure from None
                last_error = failure
            except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError) as err:
                last_error = err  # (ValueError: a URL urllib cannot open)
            else:
                try:
                    answer = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    raise EndpointError(f"chat endpoint {shown} answered with something other than JSON: "
                                        f"{raw[:200]!r}") from None
                if not isinstance(answer, dict):
                    raise EndpointError(f"chat endpoint {shown} answered JSON that is not an object: "
                                        f"{str(answer)[:200]}")
                return answer
            if attempt + 1 < self.retries:
                time.sleep(min(2.0**attempt, 10.0))
        why = str(getattr(last_error, "reason", None) or last_error).replace(self._url, shown)
        raise EndpointError(f"chat endpoint {shown} failed after {self.retries} tries: {why}")

    def complete(self, messages: Sequence[Message], *, temperature: float, max_tokens: int | None = None,
                 seed: int | None = None) -> str:
        payload: dict[str, Any] = {"model": self.model, "messages": check_messages(messages),
                                   "temperature": max(0.0, float(temperature)),
                                   "max_tokens": self.max_new_tokens if max_tokens is None else int(max_tokens)}
        if seed is not None:
            payload["seed"] = int(seed)
        answer = self.request(payload)
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"unexpected chat-completions answer from {self.endpoint}: {str(answer)[:300]}") \
                from None
        return content if isinstance(content, str) else ""
