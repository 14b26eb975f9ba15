"""``ECPOConfig`` and ``ECPO``: the LLM algorithm's config and the algorithm it builds, ECPO training an LLM agent as an RLlib ``Algorithm`` (new API stack): ``train()``,
``save_to_path``/``from_checkpoint``, Tune, env-runner fault tolerance, a ``LearnerGroup``. One module, as RLlib
keeps an algorithm with its config (each names the other).

An LLM run, ``rl_module(model_config={"model": DIR, ...})``: env runners are ``LLMEnvRunner`` actors playing the
native policy (``settings.py`` maps the config to the native ``TrainConfig``), learners are ``ECPOLLMLearner``::

    from ecpo_train.rllib import ECPOConfig

    algo = (ECPOConfig()
            .environment("ecpo/ALFWorldGen-v0", env_config={"env_kwargs": {"max_steps": 12}})
            .rl_module(model_config={"model": "~/.cache/ecpo/models/smollm2-135m-instruct", "policy_mode": "score",
                                     "prompt_style": "compact", "history_length": 1})
            .training(group_size=8, groups_per_batch=4, estimator="ecpo", credit={"kappa": 2.0}, lr=2e-5)
            .env_runners(num_env_runners=2)
            .learners(num_learners=1, num_gpus_per_learner=1)
            .build_algo())
    result = algo.train()  # result["ecpo"]: success, val/..., credit/..., update/..., time/..., sampling/...

``ECPO.training_step`` is ``step.llm_training_step`` (the native trainer's iteration on RLlib's actors). A config
without a ``model`` is refused in one line (the classic-RL example, a small scorer over hashed features, lives
outside the library: ``examples/rllib_candidate``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ray.rllib.algorithms.algorithm_config import NotProvided
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
)
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils import force_list

from ecpo_gym.kwargs import shown
from ecpo_train.integrations.rllib.base_algorithm import GroupCreditAlgorithm, check_fits_cluster
from ecpo_train.integrations.rllib.base_config import GroupCreditConfig
from ecpo_train.integrations.rllib.llm.groups import RunnerPool
from ecpo_train.integrations.rllib.llm.run_state import ECPOState
from ecpo_train.integrations.rllib.llm.settings import apply_train_config, has_model, native_values
from ecpo_train.runtime.config import TrainConfig, make_config, upgraded
from ecpo_train.runtime.models import check_model_folder
from ecpo_train.runtime.policy_kinds import policy_spec

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
NO_MODEL = ("ECPO trains an LLM: name it with rl_module(model_config={'model': DIR or hub id}) (`ecpo models pull` "
            "fetches one); a classic-RL scorer without a model is the example in examples/rllib_candidate")


class ECPOConfig(GroupCreditConfig):
    """The LLM algorithm's config: ``GroupCreditConfig``'s group rollout and credit settings (``group_size``,
    ``groups_per_batch``, ``estimator``, ``credit``, ``anchor_key``) plus the run's policy.

    ``rl_module(model_config={"model": DIR, ...})`` (``settings.py``) names the policy; ``groups_per_batch`` whole
    groups per iteration are shared over the healthy ``LLMEnvRunner``s; ``run_settings`` holds the native keys
    RLlib has no name for; ``lost_groups`` ("top_up" | "refuse") says what happens to a lost runner's groups;
    ``max_policy_lag`` (0 | 1) lets the runners play the next iteration's groups, with weights one update behind,
    while the learner updates (``pipeline.py``; 0, the default, is lock-step);
    ``lora`` (``{r, alpha, dropout, target_modules}``, or ``model_config["lora"]``) gives learner and runners the
    same adapter, only it trains and weight sync carries only it; the KL reference is the adapter switched off.
    """

    def __init__(self, algo_class=None):
        super().__init__(algo_class=algo_class or ECPO)
        self.lora: dict = {}  # LoRA settings (lora.check_lora_settings); {} = full fine-tuning
        self.run_settings: dict = {}  # native TrainConfig keys RLlib has no name for (settings.py)
        self.lost_groups = "top_up"  # groups of a lost env runner are re-sampled ("top_up") or refused
        self.max_policy_lag = 0  # 0: lock-step; 1: the runners play the next groups during the update (pipeline.py)
        # the run's TrainConfig (to_train_config) and the native values it stands for (settings.native_values)
        self._train_config: TrainConfig | None = None
        self._train_values: dict[str, Any] | None = None

    def training(
        self,
        *,
        lora: Mapping[str, Any] | None = NotProvided,
        run_settings: Mapping[str, Any] | None = NotProvided,
        lost_groups: str | None = NotProvided,
        max_policy_lag: int | None = NotProvided,
        **kwargs: Any,
    ) -> ECPOConfig:
        """``GroupCreditConfig.training`` plus ``lora``, ``run_settings``, ``lost_groups`` and ``max_policy_lag``
        (class docstring)."""
        if lora is not NotProvided:
            from ecpo_train.policies.lora import check_lora_settings

            self.lora = check_lora_settings(dict(lora) if lora else None)
        super().training(**kwargs)
        if run_settings is not NotProvided:
            self.run_settings = dict(self.run_settings) | dict(run_settings or {})
        if lost_groups is not NotProvided:
            self.lost_groups = lost_groups
        if max_policy_lag is not NotProvided:
            self.max_policy_lag = max_policy_lag
        return self

    def environment(self, env: Any = NotProvided, **kwargs: Any) -> ECPOConfig:
        super().environment(env, **kwargs)
        if isinstance(env, str):
            self.text_env_id = env  # the LLM path plays any registered text env id (an ecpo_gym one, or yours)
        return self

    def to_train_config(self) -> TrainConfig:
        """The run's native ``TrainConfig``, built once and held by this config: the object
        :meth:`from_train_config` was given, or the one translated from the RLlib settings (``settings.py``) when
        first asked for (``validate()`` asks). The algorithm, its runner and learner actors and the module read this
        object (it travels with the config, and in the module's ``model_config``); none translates again.

        A builder call that changes what the run is (``training(lr=...)``) makes the next call translate afresh;
        a frozen config (``build_algo`` freezes the algorithm's) returns the object it holds.
        """
        if self._is_frozen and self._train_config is not None:
            return self._train_config
        values = native_values(self)
        if self._train_config is None or values != self._train_values:
            train = make_config(values)
            if self._is_frozen:  # frozen before anything asked: nothing can be held
                return train
            self._train_config, self._train_values = train, copy.deepcopy(values)
        return self._train_config

    @classmethod
    def from_train_config(cls, train: TrainConfig) -> ECPOConfig:
        """The native run ``train`` (a ``TrainConfig``, e.g. ``load_config("corridor_llm")``) through RLlib; the
        config holds ``train`` itself as its ``to_train_config()``."""
        config = apply_train_config(cls(), train)
        config._train_config, config._train_values = train, copy.deepcopy(native_values(config))
        return config

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        from ecpo_train.integrations.rllib.llm.module import LEARNER_DEVICE, TRAIN_CONFIG, CausalLMRLModule

        learner_device = "cuda" if float(self.num_gpus_per_learner or 0) > 0 else "cpu"
        return RLModuleSpec(module_class=CausalLMRLModule,
                            model_config={TRAIN_CONFIG: self.to_train_config(), LEARNER_DEVICE: learner_device})

    def get_default_learner_class(self):
        from ecpo_train.integrations.rllib.llm.learner import ECPOLLMLearner

        return ECPOLLMLearner

    def _validate_llm(self) -> None:
        """One clear error before any actor starts: the run's TrainConfig (ranges, LoRA without peft), the env id,
        scoring on search-QA, learners without whole groups, the lost-group policy."""
        import gymnasium as gym

        from ecpo_train.integrations.rllib.llm.groups import LOST_GROUP_POLICIES
        from ecpo_train.integrations.rllib.llm.pipeline import PIPELINE_LAGS
        from ecpo_train.integrations.rllib.llm.runner import LLMEnvRunner

        if self.text_env_id is None:
            self._value_error("an LLM config needs environment('ecpo/<id>'), one of ecpo_gym's text env ids")
        try:
            gym.spec(self.text_env_id)
        except gym.error.Error:
            import ecpo_gym

            self._value_error(f"unknown env id {shown(self.text_env_id)}; registered: {', '.join(sorted(ecpo_gym.ENV_ENTRY_POINTS))}")
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
        model = str(self._model_config.get("model", ""))
        try:  # a folder of the kind's own (the text policy's) is checked by the TrainConfig above
            if policy_spec(self._model_config.get("policy", "llm")).model == "causal-lm":
                check_model_folder(model)
        except ValueError as error:
            self._value_error(f"rl_module(model_config={{'model': {shown(model)}}}): {error}")
        if self.lost_groups not in LOST_GROUP_POLICIES:
            self._value_error(f"lost_groups={shown(self.lost_groups)}; valid: {', '.join(LOST_GROUP_POLICIES)}")
        if isinstance(self.max_policy_lag, bool) or self.max_policy_lag not in PIPELINE_LAGS:
            self._value_error(f"max_policy_lag={shown(self.max_policy_lag)}; valid: 0 (lock-step) or 1 (the runners play "
                              "the next groups while the learner updates)")
        # (RLlib's own derived evaluation config has no runners and never trains)
        if self.max_policy_lag and int(self.num_env_runners) == 0 and not self.in_evaluation:
            self._value_error("max_policy_lag=1 plays the next groups on env-runner actors during the update: set "
                              "env_runners(num_env_runners=K) with K >= 1")
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
                self._value_error(f"{name}={shown(getattr(self, name))} is not used by the LLM path; {instead}")
        for name in ("lr", "entropy_coeff"):
            if isinstance(getattr(self, name), (list, tuple)):
                self._value_error(f"{name} as a schedule is not used by the LLM path; "
                                  f"{LLM_PATH_REFUSED[f'{name}_schedule']}")
        changed = sorted(name for name in vars(defaults)
                         if name.startswith(("evaluation_", "custom_evaluation"))
                         and getattr(self, name) != getattr(defaults, name))
        if changed:
            self._value_error(f"evaluation(...) ({', '.join(changed)}) is not run by the LLM path; {VALIDATION_INSTEAD}")

    def validate(self) -> None:
        """One ``ValueError`` for a bad run: a model named, the LLM run's settings, the group and credit ones."""
        if not has_model(self):
            self._value_error(NO_MODEL)
        self._validate_llm()
        super().validate()
        if self.lora:
            from ecpo_train.policies.lora import check_lora_settings

            try:
                check_lora_settings(self.lora)
            except ValueError as error:
                self._value_error(str(error))


# what an ECPO checkpoint records of the algorithm beside its TrainConfig: how its actors are laid out
CHECKPOINT_LAYOUT = ("num_env_runners", "num_learners", "num_gpus_per_learner", "num_cpus_per_learner",
                     "num_cpus_per_env_runner", "num_gpus_per_env_runner", "lost_groups", "max_policy_lag",
                     "restart_failed_env_runners")


def _ecpo_checkpoint(folder):
    """``folder`` if it holds an ECPO checkpoint (``state_files``); RLlib's pickle format, or nothing, is one
    ``ValueError`` naming it."""
    from ecpo_train.integrations.rllib.state_files import STATE_FILE, holds_state

    if holds_state(folder):
        return folder
    if any(folder.glob("*.pkl")):
        raise ValueError(f"{folder} is a checkpoint in RLlib's pickle format, which runs code when read: ECPO reads "
                         f"only its own format ({STATE_FILE}); rerun the training (or --overwrite), or restore it with "
                         "ray.rllib's Algorithm.from_checkpoint only if you wrote it yourself")
    raise ValueError(f"{folder} holds no ECPO checkpoint ({STATE_FILE}): restore it from a copy, or --overwrite to "
                     "start the run over")


class ECPO(GroupCreditAlgorithm):
    """The native trainer's iteration on RLlib's runners and learner group (see the module docstring)."""

    @classmethod
    def get_default_config(cls) -> ECPOConfig:
        return ECPOConfig()

    def setup(self, config) -> None:
        if not has_model(config):  # Tune hands its param_space here without validate()
            raise ValueError(NO_MODEL)
        # outside Tune nothing reserves the actors' resources: Ray would wait for them forever
        bundles = PPO.default_resource_request(config).bundles
        check_fits_cluster([{}, *bundles[1:]], "this algorithm's runner and learner actors")
        super().setup(config)
        # the run's state beside RLlib's, in one object (run_state.py); the task choice checked: one line
        self.ecpo = ECPOState.start(self.config.to_train_config(), self._env_task_ids())

    def runner_pool(self) -> RunnerPool:
        """What the sampler, the pipeline and validation use of this algorithm (``groups.RunnerPool``)."""
        return RunnerPool(self.env_runner_group, self.config, self.learner_group, self.restore_env_runners)

    # ------------------------------------------------------------------ checkpoints (state_files.py: no pickle)
    def save_to_path(self, path=None, *, state=None, filesystem=None, use_msgpack=False, **kwargs):
        """The algorithm's state into the local folder ``path`` (a new temporary one where ``None``) as
        ``state_files.write_state`` writes it: nothing in it runs code when read, unlike RLlib's pickles.
        Returns the folder."""
        import tempfile
        from pathlib import Path

        from ecpo_train.integrations.rllib.base_algorithm import _absolute
        from ecpo_train.integrations.rllib.state_files import write_state
        from ecpo_train.runtime.config import config_dict

        if filesystem is not None:
            raise ValueError("an ECPO checkpoint is written to a local folder (no filesystem=)")
        folder = Path(_absolute(path) if path is not None else tempfile.mkdtemp(prefix="ecpo_checkpoint_"))
        layout = {key: getattr(self.config, key) for key in CHECKPOINT_LAYOUT}
        write_state(folder, self.get_state() if state is None else state,
                    {"train_config": config_dict(self.config.to_train_config()), "rllib": layout})
        return str(folder)

    def restore_from_path(self, path, *args, **kwargs) -> None:
        """The state :meth:`save_to_path` wrote into ``path``, read without unpickling anything (a folder in
        RLlib's pickle format is refused: it could run code)."""
        from pathlib import Path

        from ecpo_train.integrations.rllib.base_algorithm import _absolute
        from ecpo_train.integrations.rllib.state_files import check_learner_state, read_state

        folder = _ecpo_checkpoint(Path(_absolute(path)))
        state = read_state(folder)
        check_learner_state(state, self._learner_state_shapes(), folder)  # (a learner actor's error would be lost)
        self.set_state(state)

    def _learner_state_shapes(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """The first learner's module shapes (module id -> weight name -> shape), asked of the learner itself."""
        results = list(self.learner_group.foreach_learner(
            lambda learner: {mid: learner.module[mid].state_shapes() for mid in learner.module.keys()}))
        if not results[0].ok:
            raise results[0].get()
        return results[0].get()

    @classmethod
    def from_checkpoint(cls, path, filesystem=None, **kwargs) -> ECPO:
        """The algorithm :meth:`save_to_path` saved in ``path``: built from the config recorded there (the run's
        ``TrainConfig`` and its runner/learner layout, read as YAML data) and given its state. Nothing in the
        folder is unpickled or imported, so a folder someone else could write runs no code of theirs; a folder
        in RLlib's pickle format is refused (``Algorithm.from_checkpoint`` would run what it holds)."""
        from pathlib import Path

        from ecpo_gym.families import recorded_env_id
        from ecpo_train.integrations.rllib.base_algorithm import _absolute
        from ecpo_train.integrations.rllib.state_files import read_config

        if filesystem is not None:
            raise ValueError("an ECPO checkpoint is read from a local folder (no filesystem=)")
        folder = _ecpo_checkpoint(Path(_absolute(path)))
        saved = read_config(folder)
        try:
            # (a checkpoint written before a key was renamed is read under its new name)
            train = upgraded(dict(saved["train_config"]))
            recorded_env_id(train.get("env_id"), str(folder / "config.yaml"))  # a file's id never imports a module
            config = ECPOConfig.from_train_config(make_config(train))
            for key, value in dict(saved.get("rllib") or {}).items():
                if key not in CHECKPOINT_LAYOUT:
                    raise ValueError(f"unknown layout key {shown(key)}")
                setattr(config, key, value)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{folder}: its config cannot be read ({' '.join(str(err).split())[:200]})") from None
        algo = config.build_algo()
        try:
            algo.restore_from_path(folder)
        except BaseException:
            algo.stop()
            raise
        return algo

    def validate(self, tasks: list[str] | None = None, seed: int | None = None) -> dict[str, float]:
        """Validation success (``val/success``, and ``val/exact_success`` where it exists) of the current
        weights on the run's fixed validation tasks (or ``tasks``, from env seed ``seed``), played on an env
        runner (the LLM path). Each episode's outcome is kept in ``ecpo.validation_episodes`` (the run shell
        writes them to ``validation.jsonl``)."""
        from ecpo_train.core.tasks import validation_seed
        from ecpo_train.integrations.rllib.llm.groups import validate_on_runner
        from ecpo_train.integrations.rllib.llm.pipeline import sync_runner_weights

        if self.config.max_policy_lag and self.env_runner_group.num_remote_env_runners():
            sync_runner_weights(self.runner_pool())  # pipelined, the runners hold the weights one update behind
        state = self.ecpo
        tasks = list(state.val_tasks) if tasks is None else list(tasks)
        seed = validation_seed(state.train_config.seed) if seed is None else int(seed)
        metrics, state.validation_episodes = validate_on_runner(self.runner_pool(), tasks, seed)
        return metrics

    def get_state(self, components=None, *, not_components=None, **kwargs):
        """RLlib's state without the env runner component (the runners rebuild their policy from the config and
        get the learner's weights) and with ECPO's own: the driver's generator, the iteration and every runner's
        sampling RNG streams, so a restored run continues exactly. With ``max_policy_lag=1`` the next iteration's
        groups are in flight: their tasks and env seed are kept (``pending``), not their rows, so a restored run
        plays them again with the restored weights (the runners' streams are read after the calls in flight)."""
        skip = [COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR]
        not_components = [*(force_list(not_components) if not_components else []), *skip]
        state = super().get_state(components, not_components=not_components, **kwargs)
        if components is None or "ecpo" in force_list(components):
            state["ecpo"] = self.ecpo.state_dict(self._runner_sampling_states())
        return state

    def set_state(self, state) -> None:
        super().set_state(state)
        ecpo = state.get("ecpo")
        if ecpo:
            self.ecpo.load_state_dict(ecpo)
            from ecpo_train.integrations.rllib.llm.pipeline import Dispatched, drain_dispatched

            if self.ecpo.dispatched is not None and self.ecpo.dispatched.in_flight:
                drain_dispatched(self.runner_pool())  # calls of the state being replaced
            pending = ecpo.get("pending")
            self.ecpo.dispatched = None if pending is None else Dispatched(list(pending[0]), int(pending[1]))
            saved = ecpo["runner_rng"]
            group = self.env_runner_group
            if group.num_remote_env_runners() == 0:
                group.local_env_runner.set_sampling_state(saved[0])
            else:
                group.foreach_env_runner(lambda r: r.set_sampling_state(saved.get(r.worker_index)),
                                         local_env_runner=False)

    def _env_task_ids(self) -> list[str]:
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            return group.local_env_runner.env_task_ids()
        return group.foreach_env_runner(lambda r: r.env_task_ids(), local_env_runner=False)[0]

    def _runner_sampling_states(self) -> dict[int, Any]:
        group = self.env_runner_group
        if group.num_remote_env_runners() == 0:
            return {0: group.local_env_runner.sampling_state()}
        pairs = group.foreach_env_runner(lambda r: (r.worker_index, r.sampling_state()), local_env_runner=False)
        return dict(pairs)

    def get_checkpointable_components(self):
        components = super().get_checkpointable_components()
        # the runners rebuild everything but the weights from the config
        skip = (COMPONENT_ENV_RUNNER, COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR)
        return [(name, part) for name, part in components if name not in skip]

    def training_step(self) -> None:
        from ecpo_train.integrations.rllib.llm.step import llm_training_step

        metrics = llm_training_step(self)  # also logs RLlib's own result keys (results.py)
        self.metrics.log_dict(metrics, key="ecpo", window=1)
