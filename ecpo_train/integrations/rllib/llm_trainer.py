"""ECPO on an LLM through RLlib's learner group: sample groups on every runner -> update -> weight sync.

``LLMGroupRunner``s (``llm_runner.py``) play the groups; ``LearnerGroup.update(episodes=...)`` runs the
``ECPOAdvantages`` connector (credit.py) and ``TokenLevelECPOLearner``'s loss on ``CausalLMRLModule``'s
log-probs; the learner's weights then go back into every runner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import ALL_MODULES

from ecpo_train.integrations.rllib.algorithm import split_groups, update_on_groups
from ecpo_train.integrations.rllib.learner import TokenLevelECPOLearner
from ecpo_train.integrations.rllib.module import CausalLMRLModule, token_spaces

MODULE_ID = "default_policy"


def build_llm_learner_group(config, model_path: str | Path, vocab_size: int, max_prompt_tokens: int,
                            max_new_tokens: int, dtype: str = "float32", temperature: float = 1.0,
                            lora: dict | None = None):
    """A learner group of ``TokenLevelECPOLearner``s over ``CausalLMRLModule`` (``config``: an ``ECPOConfig``).

    ``temperature`` is the runners' sampling temperature: the learner scores the same tempered distribution.
    LoRA: ``config.lora`` (``lora``, a runner's ``describe()`` entry, must agree with it); the module's policy
    then carries the adapter and the learner's optimizer holds the adapter's parameters only.
    """
    from ecpo_train.policies.lora import check_lora_settings

    settings = check_lora_settings(getattr(config, "lora", None))
    if lora is not None and check_lora_settings(lora) != settings:
        raise ValueError(f"the runners' LoRA settings {lora or 'none'} differ from the config's {settings or 'none'}")
    obs_space, act_space = token_spaces(vocab_size, max_prompt_tokens, max_new_tokens)
    model_config = {"model_path": str(model_path), "dtype": dtype, "temperature": temperature}
    if settings:
        model_config["lora"] = settings
    spec = RLModuleSpec(module_class=CausalLMRLModule, observation_space=obs_space, action_space=act_space,
                        model_config=model_config)
    config = config.copy(copy_frozen=False).training(learner_class=TokenLevelECPOLearner).rl_module(
        rl_module_spec=spec)
    return config.build_learner_group(rl_module_spec=spec)


class LLMTrainer:
    """ECPO on an LLM through RLlib's learner group: sample groups -> update -> weight sync.

    ``runners``: one or more ``LLMGroupRunner``s, in-process or Ray actors
    (``ray.remote(LLMGroupRunner).remote(..., runner_id=k)``; give each a distinct ``runner_id``). Actors
    sample in parallel; their weights arrive as one object-store copy per update.

    ``config.lora`` is handed to every runner first (``LLMGroupRunner.configure_lora``: the runner's policy
    gets the same adapter, its KL reference becomes that model with the adapter off), then the learner group
    is built with it. Under LoRA ``sync_weights`` sends the adapter tensors only (``CausalLMRLModule.get_state``);
    a vLLM runner pushes the merged weights into its engine (``TransformersPolicy.sync_generation_weights``).
    """

    def __init__(self, config, runners: Any) -> None:
        from ecpo_train.policies.lora import check_lora_settings

        self.config = config
        self.runners = list(runners) if isinstance(runners, (list, tuple)) else [runners]
        self._call_all("configure_lora", check_lora_settings(getattr(config, "lora", None)))
        shape = self._call_all("describe")[0]
        self.learner_group = build_llm_learner_group(config, **shape)
        self.sync_weights()

    def _call_all(self, method: str, *args: Any) -> list[Any]:
        """``runner.method(*args)`` on every runner; actors first, so they work while local runners do."""
        import ray

        actor_refs = {i: getattr(r, method).remote(*args) for i, r in enumerate(self.runners) if _is_actor(r)}
        local = {i: getattr(r, method)(*args) for i, r in enumerate(self.runners) if not _is_actor(r)}
        fetched = dict(zip(actor_refs, ray.get(list(actor_refs.values())))) if actor_refs else {}
        return [fetched[i] if i in fetched else local[i] for i in range(len(self.runners))]

    def sync_weights(self) -> None:
        """Copy the learner's weights into every runner (the sampling policy; under LoRA the adapter only)."""
        import ray

        weights = self.learner_group.get_weights()[MODULE_ID]
        if any(_is_actor(r) for r in self.runners):
            ref = ray.put(weights)
            ray.get([r.set_weights.remote(ref) for r in self.runners if _is_actor(r)])
        for runner in self.runners:
            if not _is_actor(runner):
                runner.set_weights(weights)

    def train_iteration(self, task_ids: list[str] | None = None) -> dict[str, Any]:
        episodes = [e for sampled in self._call_all("sample", task_ids) for e in sampled]
        groups = split_groups(episodes, int(self.config.group_size))
        results = update_on_groups(self.learner_group, groups, self.config)
        self.sync_weights()
        reduced = {key: value for key, value in results[0].items() if key != ALL_MODULES}
        return {"episodes": episodes, "learner": reduced}


def _is_actor(obj: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:
        return False
    return isinstance(obj, ActorHandle)
