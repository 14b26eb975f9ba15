"""A gold-evidence QA oracle for the search environments (an upper-bound agent for tests and leaderboards).

The oracle first searches with the question, then with the title of each supporting paragraph it has not
seen yet (the bridge entity of a two-hop question), while turns remain for the answer; then it answers with
the first golden answer. It reads the gold answers and supporting ids from the environment, so it measures
the environment and retriever, not a model.
"""

from __future__ import annotations

from typing import Any

from ecpo_gym.searchqa.env import SearchQABaseEnv


class GoldEvidenceOracle:
    """Plays a :class:`SearchQABaseEnv` episode with gold knowledge: ``act(info) -> action text``."""

    def __init__(self, env: Any) -> None:
        base = getattr(env, "unwrapped", env)
        if not isinstance(base, SearchQABaseEnv):
            raise TypeError(f"GoldEvidenceOracle needs a search-QA environment, got {type(base).__name__}")
        self.env = base

    def next_query(self) -> str | None:
        """The next search to issue, or None when it is time to answer."""
        env = self.env
        example = env.current_example
        assert example is not None, "reset the environment first"
        if env.steps_taken + 1 >= env.max_steps:  # keep the last turn for the answer
            return None
        if not env.queries:
            return example.question
        corpus = getattr(env, "corpus", None)
        for doc_id in example.supporting_doc_ids:
            if doc_id not in env.retrieved_doc_ids and corpus is not None:
                document = corpus.get(doc_id)
                if document is not None and document.title not in env.queries:
                    return document.title
        return None

    def act(self, info: dict[str, Any] | None = None) -> str:
        query = self.next_query()
        if query is not None:
            return f"<think>I need evidence.</think><search>{query}</search>"
        example = self.env.current_example
        assert example is not None
        answer = example.golden_answers[0] if example.golden_answers else ""
        return f"<think>The evidence answers it.</think><answer>{answer}</answer>"


def run_oracle_episode(env: Any, task_id: str) -> tuple[float, dict[str, Any]]:
    """Play one oracle episode on ``task_id``; returns the total reward and the last info."""
    oracle = GoldEvidenceOracle(env)
    _, info = env.reset(options={"task_id": task_id})
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(oracle.act(info))
        total += reward
        done = terminated or truncated
    return total, info
