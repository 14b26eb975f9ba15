"""``ECPOConfig``: PPO's config plus ECPO's group rollout, credit and (for an LLM) the run's policy.

Two kinds of run share it. The LLM path, ``rl_module(model_config={"model": DIR, ...})``: env runners are
``LLMEnvRunner`` actors playing the native policy (``llm_settings.py`` maps the config to the native
``TrainConfig``), learners are ``ECPOLLMLearner``. The classic-RL example: ``environment("ecpo/...")`` wraps the
text env in ``CandidateActionEnv`` and ``CandidateScorerModule`` learns over hashed text features.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from ecpo_train.core.credit import CreditConfig, available_estimators, check_group_size
from ecpo_train.core.rollout import ANCHOR_KEYS
from ecpo_train.integrations.rllib.candidate_env import CandidateActionEnv
from ecpo_train.integrations.rllib.llm_settings import (
    apply_train_config,
    is_llm_config,
    native_update_defaults,
    train_config_of,
)

# RLlib options the LLM path does not run, and what to use instead (validate() refuses a changed one).
CRITIC_FREE = "ECPO is critic-free: its baseline is the group (training(estimator=..., credit={...}))"
LLM_PATH_REFUSED = {
    "train_batch_size": "the batch is whole groups: training(groups_per_batch=G, group_size=N)",
    "train_batch_size_per_learner": "the batch is whole groups: training(groups_per_batch=G, group_size=N)",
    "rollout_fragment_length": "runners play whole groups: training(groups_per_batch=G, group_size=N)",
    "vf_loss_coeff": CRITIC_FREE,
    "vf_clip_param": CRITIC_FREE,
    "lambda_": CRITIC_FREE,
    "use_gae": CRITIC_FREE,
    "kl_target": "the KL coefficient is fixed (the native kl_coef): training(use_kl_loss=True, kl_coeff=...)",
    "grad_clip_by": "grad_clip is a global-norm clip (the native max_grad_norm)",
    "shuffle_batch_per_epoch": "rows are shuffled every epoch by the native update (debugging(seed=...) fixes it)",
    "lr_schedule": "training(run_settings={'lr_warmup_steps': k}) (a linear warm-up, as the native trainer)",
    "entropy_coeff_schedule": "a constant training(entropy_coeff=...)",
}
VALIDATION_INSTEAD = ("the LLM path validates on an env runner: training(run_settings={'val_every': k, "
                      "'val_num_tasks': ..., 'val_episodes_per_task': ...}) puts val/success in result['ecpo'], "
                      "and algo.validate() runs it on demand")
SECONDS_PER_GROUP_STEP = 30.0  # the derived sampling timeout's budget for one step of one group (N copies at once)
MIN_SAMPLE_TIMEOUT_S = 300.0
# frozen ECPOConfig -> its TrainConfig, translated once (to_train_config); held no longer than the config
_TRAIN_CONFIGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
UNDECLARED_STEP_LIMIT = 50  # an env whose step limit is not declared (ecpo_gym.families) gets this budget


class ECPOConfig(PPOConfig):
    """PPO's config plus ECPO's: ``group_size`` (N), ``groups_per_batch``, ``estimator`` (a credit registry
    name), ``credit`` (a ``credit.CreditConfig``: gamma, omega, kappa, tau, d_min, rho_min, eps, compat;
    its defaults are the paper's) and ``anchor_key`` (``"state_key"``, the env's structured key, or
    ``"observation_key"``, the normalised observation text; as in ``rollout.collect_rollout``).

    ``training(credit=CreditConfig(...))`` replaces the credit configuration; ``training(credit={"kappa": 3.0})``
    changes only the fields named. ECPO's discount is the credit's: ``config.gamma`` reads and
    ``training(gamma=...)`` writes ``config.credit.gamma``.

    An LLM run (``rl_module(model_config={"model": DIR, ...})``, ``llm_settings.py``): ``groups_per_batch`` whole
    groups per iteration, shared over the healthy ``LLMEnvRunner``s; ``run_settings`` holds the native keys RLlib
    has no name for; ``lost_groups`` ("top_up" | "refuse") says what happens to a lost runner's groups; ``lora``
    (``{r, alpha, dropout, target_modules}``, or ``model_config["lora"]``) gives learner and runners the same
    adapter, only it trains and weight sync carries only it; the KL reference is the adapter switched off.

    The candidate example: ``environment("ecpo/...")`` without a model wraps the text env in
    ``CandidateActionEnv`` (``env_config``: ``env_kwargs``, ``max_candidates``, ``feature_dim``, ``task_ids``,
    ``seed``); ``groups_per_batch`` groups are split evenly over the env runners.
    """

    def __init__(self, algo_class=None):
        from ecpo_train.integrations.rllib.algorithm import ECPO

        super().__init__(algo_class=algo_class or ECPO)
        self.group_size = 8
        self.groups_per_batch = 16
        self.estimator = "ecpo"
        self.credit = CreditConfig()
        self.anchor_key = "state_key"
        self.lora: dict = {}  # LoRA settings of the LLM path (lora.check_lora_settings); {} = full fine-tuning
        self.text_env_id = None  # the ecpo_gym id that environment("ecpo/...") wrapped
        self.run_settings: dict = {}  # LLM path: native TrainConfig keys RLlib has no name for (llm_settings.py)
        self.lost_groups = "top_up"  # LLM path: groups of a lost env runner are re-sampled ("top_up") or refused
        # Critic off, whole episodes, one env per runner (so its resets stay grouped).
        self.use_critic = False
        self.use_gae = False
        self.batch_mode = "complete_episodes"
        self.num_env_runners = 0
        self.num_envs_per_env_runner = 1
        # The update's defaults are the native trainer's (TrainConfig's), not PPO's: one run, two spellings.
        native = native_update_defaults()
        self.lr = native["lr"]
        self.num_epochs = native["update_epochs"]
        self.minibatch_size = native["mini_batch_size"]
        self.grad_clip = native["max_grad_norm"]
        self.use_kl_loss = native["kl_coef"] > 0
        self.kl_coeff = native["kl_coef"]
        self.clip_param = native["clip_eps"]
        self.entropy_coeff = native["entropy_coef"]
        self.sample_timeout_s = None  # None: derived from the env's step limit (group_sample_timeout_s)

    @property
    def gamma(self) -> float:
        return self.credit.gamma

    @gamma.setter
    def gamma(self, value: float) -> None:
        # AlgorithmConfig.__init__ assigns RLlib's default before ECPOConfig.__init__ creates the credit config
        if "credit" in self.__dict__:
            self.credit = dataclasses.replace(self.credit, gamma=value)

    def training(
        self,
        *,
        group_size: int | None = NotProvided,
        groups_per_batch: int | None = NotProvided,
        estimator: str | None = NotProvided,
        credit: CreditConfig | Mapping[str, Any] | None = NotProvided,
        anchor_key: str | None = NotProvided,
        lora: Mapping[str, Any] | None = NotProvided,
        run_settings: Mapping[str, Any] | None = NotProvided,
        lost_groups: str | None = NotProvided,
        **kwargs: Any,
    ) -> ECPOConfig:
        """PPO's ``training`` plus ECPO's settings (see the class docstring); ``gamma`` given here wins over
        ``credit``'s."""
        misplaced = sorted(set(kwargs) & {f.name for f in dataclasses.fields(CreditConfig)} - {"gamma"})
        if misplaced:
            raise TypeError(f"{', '.join(misplaced)} belong to the credit configuration: "
                            f"training(credit={{{', '.join(f'{name!r}: ...' for name in misplaced)}}})")
        if credit is not NotProvided:
            if isinstance(credit, Mapping):
                credit = CreditConfig.from_kwargs(**(dataclasses.asdict(self.credit) | dict(credit)))
            elif not isinstance(credit, CreditConfig):
                raise TypeError(f"credit must be a credit.CreditConfig or a dict of its fields, got {credit!r}")
            self.credit = credit
        if lora is not NotProvided:
            from ecpo_train.policies.lora import check_lora_settings

            self.lora = check_lora_settings(dict(lora) if lora else None)
        super().training(**kwargs)
        if run_settings is not NotProvided:
            self.run_settings = dict(self.run_settings) | dict(run_settings or {})
        for name, value in (("group_size", group_size), ("groups_per_batch", groups_per_batch),
                            ("estimator", estimator), ("anchor_key", anchor_key), ("lost_groups", lost_groups)):
            if value is not NotProvided:
                setattr(self, name, value)
        self._sync_env_config()
        return self

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict() | {"gamma": self.gamma}  # a property, so not among vars(self)
        if self.is_llm and self.text_env_id is not None:
            out["env"] = self.text_env_id  # the env the LLM plays (Tune names trials after it), not the adapter
        return out

    def _value_error(self, errmsg: str) -> None:
        """RLlib's, as one line (RLlib appends a second one on how to switch validation off)."""
        if self._validate_config:
            raise ValueError(errmsg)
        super()._value_error(errmsg)

    def update_from_dict(self, config_dict: dict) -> ECPOConfig:
        """RLlib's dict form; a ``credit`` entry (a dict after ``serialize()``) goes through ``training``."""
        config_dict = dict(config_dict)
        if "credit" in config_dict:
            self.training(credit=config_dict.pop("credit"))
        return super().update_from_dict(config_dict)

    def environment(self, env: Any = NotProvided, **kwargs: Any) -> ECPOConfig:
        super().environment(env, **kwargs)
        if isinstance(env, str):
            self.text_env_id = env  # the LLM path plays any registered text env id (an ecpo_gym one, or yours)
        if isinstance(self.env, str) and _is_text_env_id(self.env):
            self.env = CandidateActionEnv
        self._sync_env_config()
        return self

    def _sync_env_config(self) -> None:
        """Keep the adapter's ``env_id`` and ``group_size`` in ``env_config`` whatever order calls came in."""
        if self.env is CandidateActionEnv:
            env_config = dict(self.env_config or {})
            if self.text_env_id is not None:
                env_config.setdefault("env_id", self.text_env_id)
            env_config["group_size"] = self.group_size
            self.env_config = env_config

    # ------------------------------------------------------------------ the LLM path
    @property
    def is_llm(self) -> bool:
        """``rl_module(model_config={"model": ...})`` makes this an LLM config (``llm_settings.py``)."""
        return is_llm_config(self)

    def to_train_config(self):
        """The native ``TrainConfig`` of this LLM config (the algorithm, its runners and learners build from it).

        A frozen config (``build_algo`` freezes the algorithm's) is translated once and the same object returned
        on every later call in this process; an unfrozen one is translated afresh, so later builder calls count.
        """
        if not self._is_frozen:
            return train_config_of(self)
        train = _TRAIN_CONFIGS.get(self)
        if train is None:
            train = _TRAIN_CONFIGS[self] = train_config_of(self)
        return train

    @classmethod
    def from_train_config(cls, train) -> ECPOConfig:
        """The native run ``train`` (a ``TrainConfig``, e.g. ``load_config("corridor_llm")``) through RLlib."""
        return apply_train_config(cls(), train)

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from ecpo_train.integrations.rllib.module import CandidateScorerModule, CausalLMRLModule

        if self.is_llm:
            from ecpo_train.runtime.config import config_dict

            return RLModuleSpec(module_class=CausalLMRLModule,
                                model_config={"train_config": config_dict(self.to_train_config())})
        return RLModuleSpec(module_class=CandidateScorerModule)

    def get_default_learner_class(self):
        from ecpo_train.integrations.rllib.learner import ECPOLLMLearner, ECPOTorchLearner

        return ECPOLLMLearner if self.is_llm else ECPOTorchLearner

    def _validate_llm(self) -> None:
        """One clear error before any actor starts: the run's TrainConfig (ranges, LoRA without peft), the env id,
        scoring on search-QA, learners without whole groups, the lost-group policy."""
        import gymnasium as gym

        from ecpo_train.integrations.rllib.llm_runner import LLMEnvRunner
        from ecpo_train.integrations.rllib.llm_step import LOST_GROUP_POLICIES

        if self.text_env_id is None:
            self._value_error("an LLM config needs environment('ecpo/<id>'), one of ecpo_gym's text env ids")
        try:
            gym.spec(self.text_env_id)
        except gym.error.Error:
            import ecpo_gym

            self._value_error(f"unknown env id {self.text_env_id!r}; registered: {', '.join(sorted(ecpo_gym.ENV_ENTRY_POINTS))}")
        self._refuse_options_not_run()  # before the TrainConfig, whose own type checks would name the native key
        try:  # the TrainConfig's own checks: ranges, scoring on search-QA, LoRA without peft, ...
            self.to_train_config()
        except (ValueError, ImportError) as error:  # ImportError: LoRA asked for without peft installed
            self._value_error(str(error))
        if self._model_config.get("generation_backend") == "vllm":
            from ecpo_train.policies.vllm_backend import import_vllm

            try:
                import_vllm()
            except ImportError as error:
                self._value_error(str(error))
        try:
            check_model_path(str(self._model_config.get("model", "")))
        except ValueError as error:
            self._value_error(str(error))
        if self.lost_groups not in LOST_GROUP_POLICIES:
            self._value_error(f"lost_groups={self.lost_groups!r}; valid: {', '.join(LOST_GROUP_POLICIES)}")
        if self.env_runner_cls is None:
            self.env_runner_cls = LLMEnvRunner
        self.create_local_env_runner = int(self.num_env_runners) == 0
        self._dont_auto_sync_env_runner_states = True  # no env-to-module connector states: the rows are the data

    def _refuse_options_not_run(self) -> None:
        """One line for the first RLlib option set away from its default that the LLM path would ignore."""
        if self.in_evaluation:  # RLlib's own derived evaluation config (Algorithm.setup validates it too)
            return
        defaults = type(self)()
        for name, instead in LLM_PATH_REFUSED.items():
            stored = f"_{name}" if hasattr(defaults, f"_{name}") else name  # a property RLlib derives (per learner)
            if hasattr(defaults, stored) and getattr(self, stored) != getattr(defaults, stored):
                self._value_error(f"{name}={getattr(self, name)!r} is not used by the LLM path; {instead}")
        for name in ("lr", "entropy_coeff"):
            if isinstance(getattr(self, name), (list, tuple)):
                self._value_error(f"{name} as a schedule is not used by the LLM path; "
                                  f"{LLM_PATH_REFUSED[f'{name}_schedule']}")
        changed = sorted(name for name in vars(defaults)
                         if name.startswith(("evaluation_", "custom_evaluation"))
                         and getattr(self, name) != getattr(defaults, name))
        if changed:
            self._value_error(f"evaluation(...) ({', '.join(changed)}) is not run by the LLM path; {VALIDATION_INSTEAD}")

    @property
    def group_sample_timeout_s(self) -> float:
        """How long one runner call may play its groups: ``env_runners(sample_timeout_s=...)`` when set, else
        the env's step limit x the groups one runner plays x ``SECONDS_PER_GROUP_STEP`` (at least
        ``MIN_SAMPLE_TIMEOUT_S``): RLlib's 60 s is one PPO fragment, not a group of whole LLM episodes."""
        if self.sample_timeout_s is not None:
            return float(self.sample_timeout_s)
        steps = UNDECLARED_STEP_LIMIT
        kwargs = dict((self.env_config or {}).get("env_kwargs") or {})
        if kwargs.get("max_steps"):
            steps = int(kwargs["max_steps"])
        else:
            try:
                from ecpo_gym.families import declared_max_steps

                steps = declared_max_steps(self.text_env_id)
            except (KeyError, ValueError, ImportError):
                pass
        return max(MIN_SAMPLE_TIMEOUT_S, steps * self.groups_per_env_runner * SECONDS_PER_GROUP_STEP)

    def validate(self) -> None:
        if self.is_llm:
            self._validate_llm()
        super().validate()
        if self.use_critic:
            self._value_error("ECPO is critic-free: set training(use_critic=False)")
        if self.batch_mode != "complete_episodes":
            self._value_error("ECPO needs batch_mode='complete_episodes' (credit is over whole trajectories)")
        if self.num_envs_per_env_runner != 1:
            self._value_error("ECPO needs num_envs_per_env_runner=1 so that each runner's resets stay grouped; "
                              "scale with num_env_runners instead")
        critic_free = available_estimators(needs_values=False)  # ECPO in RLlib is critic-free: no "ppo" here
        if self.estimator not in critic_free:
            self._value_error(f"estimator={self.estimator!r}; valid: {', '.join(critic_free)}")
        if not isinstance(self.credit, CreditConfig):
            self._value_error(f"credit must be a credit.CreditConfig (use training(credit=...)), got {self.credit!r}")
        if self.anchor_key not in ANCHOR_KEYS:
            self._value_error(f"anchor_key={self.anchor_key!r}; valid: {', '.join(ANCHOR_KEYS)}")
        if self.lora:
            from ecpo_train.policies.lora import check_lora_settings

            try:
                check_lora_settings(self.lora)
            except ValueError as error:
                self._value_error(str(error))
            if not self.is_llm:
                self._value_error("lora adapts the LLM path's causal LM (rl_module(model_config={'model': ...})); "
                                  "the candidate scorer has none")
        try:
            check_group_size(self.group_size, self.estimator)
        except ValueError as error:
            self._value_error(str(error))
        if int(self.groups_per_batch) < max(1, int(self.num_learners)):
            self._value_error(f"groups_per_batch ({self.groups_per_batch}) must be >= num_learners "
                              f"({self.num_learners}): groups are never split across learners")
        if (not self.is_llm and self.env is CandidateActionEnv
                and int(self.env_config.get("group_size", -1)) != int(self.group_size)):
            self._value_error("env_config['group_size'] disagrees with training(group_size=...)")

    @property
    def groups_per_env_runner(self) -> int:
        return math.ceil(int(self.groups_per_batch) / max(1, int(self.num_env_runners)))


def check_model_path(model: str) -> None:
    """``ValueError`` when ``model`` names a local folder (``/...``, ``~...``, ``./...``, or one that exists) that
    is missing or holds no ``config.json``; a hub id (``org/name``) is left to the runners to download."""
    import os

    path = os.path.expanduser(model)
    looks_local = model.startswith(("/", "~", ".")) or os.path.exists(path)
    if looks_local and not os.path.isfile(os.path.join(path, "config.json")):
        what = "does not exist" if not os.path.exists(path) else "holds no config.json"
        raise ValueError(f"rl_module(model_config={{'model': {model!r}}}): {path} {what}; give a folder with the "
                         "model's config.json, weights and tokenizer (`ecpo models pull ...`) or a hub id")


def _is_text_env_id(env_id: str) -> bool:
    try:
        from ecpo_gym import ENV_ENTRY_POINTS
    except ImportError:
        return False
    return env_id in ENV_ENTRY_POINTS or env_id.startswith("ecpo/")
