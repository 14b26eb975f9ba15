"""A minimal OpenAI-compatible chat server over a local transformers model (stdlib ``http.server``).

A demo and test helper of the source checkout, not part of the installed package (for real serving use vLLM's
OpenAI-compatible server). ``python scripts/chat_server.py MODEL_DIR [--host 127.0.0.1] [--port 8000]`` serves
``POST /v1/chat/completions`` (``messages``, ``temperature``, ``max_tokens``, ``seed``) and ``GET /v1/models``,
so a local checkpoint can stand in wherever an OpenAI-style endpoint is expected, e.g. the leaderboard's
``--backend openai`` rows. Requests are answered one at a time (one model, one lock); it is meant for a
single evaluation client on localhost, not for serving traffic.
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ecpo_gym.searchqa.server import read_json_body
from ecpo_train.evaluation.chat import TransformersChatModel, check_messages

MAX_BODY_BYTES = 4 << 20


class ChatCompletionServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` holding one chat model; ``port=0`` picks a free port (see ``.port``)."""

    daemon_threads = True

    def __init__(self, model: TransformersChatModel, host: str = "127.0.0.1", port: int = 0,
                 model_name: str | None = None) -> None:
        super().__init__((host, port), _Handler)
        self.model = model
        self.model_name = model_name or model.name
        self.lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.server_address[0]}:{self.port}/v1"

    def start(self) -> threading.Thread:
        """Serve in a daemon thread (stop with ``shutdown()`` then ``server_close()``)."""
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        thread.start()
        return thread

    def chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer one request body; ``ValueError``/``TypeError`` (HTTP 400) on bad fields.

        ``max_tokens`` (or ``max_completion_tokens``) is capped at the model's ``max_new_tokens``.
        """
        messages = check_messages(body.get("messages"))
        temperature = body.get("temperature", 1.0)
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
            raise ValueError(f"temperature must be a finite number, got {temperature!r}")
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None:
            if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
                raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
            max_tokens = min(max_tokens, self.model.max_new_tokens)
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63):
            raise ValueError(f"seed must be an integer in [0, 2^63), got {seed!r}")
        with self.lock:
            text, prompt_tokens, completion_tokens, stopped = self.model.complete_with_usage(
                messages, temperature=float(temperature), max_tokens=max_tokens, seed=seed)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop" if stopped else "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }


class _Handler(BaseHTTPRequestHandler):
    server: ChatCompletionServer
    timeout = 60  # seconds a client may stall mid-request (a body shorter than its Content-Length)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the client reports failures
        return

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str) -> None:
        self._send(status, {"error": {"message": message, "type": "invalid_request_error", "code": status}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                         "owned_by": "ecpo"}]})
        else:
            self._error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"no route POST {self.path}")
            return
        try:  # the retrieval server's reader: bad Content-Length, oversized (drained), non-UTF-8 or non-JSON -> 400
            body = read_json_body(self, MAX_BODY_BYTES)
            if not isinstance(body, dict):
                raise TypeError("the body must be a JSON object")
            answer = self.server.chat_completion(body)
        except (ValueError, TypeError) as err:
            self._error(400, str(err))
            return
        except RecursionError:  # nested past the JSON parser's limit
            self._error(400, "the body nests too deep")
            return
        except Exception as err:  # noqa: BLE001  (the model failed: tell the client instead of dropping the connection)
            self._error(500, f"{type(err).__name__}: {err}")
            return
        self._send(200, answer)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="local model folder or hub id")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--name", default=None, help="model name reported to clients (default: the path)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    model = TransformersChatModel(args.model, device=args.device, dtype=args.dtype, max_new_tokens=args.max_new_tokens)
    server = ChatCompletionServer(model, args.host, args.port, model_name=args.name)
    print(f"serving {server.model_name} at {server.base_url}/chat/completions", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
