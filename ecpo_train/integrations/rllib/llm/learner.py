"""``ECPOLLMLearner``: the LLM algorithm's learner. It runs the native trainer's step E
(``core.loss.policy_update``: eq. ecpo_objective, the step advantage broadcast to the action's tokens) on
``CausalLMRLModule``'s log-probs of the sampled step-row table, after ``StepTableCredit`` gave the advantages.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.evaluation.postprocessing import Postprocessing

from ecpo_train.core.iteration import shuffle_generator
from ecpo_train.integrations.rllib.llm.connector import CREDIT_RESULTS, StepTableCredit
from ecpo_train.integrations.rllib.llm.module import (
    PROMPT_IDS,
    RESPONSE_IDS,
    RESPONSE_MASK,
    TOKEN_ENTROPY,
    TOKEN_LOGP,
    WITH_ENTROPY,
)
from ecpo_train.integrations.rllib.llm.results import log_learner_update

NONZERO_ADVANTAGES = "num_nonzero_advantages"  # a credit result; summed over learners: 0 = the update changes nothing
UPDATE_RESULTS = "update"  # the learner results' key of step E's statistics, each under its own name


class ECPOLLMLearner(TorchLearner):
    """The LLM path's learner: credit in the learner connector, then the native step E on the LearnerGroup.

    ``update`` takes the sampled step-row tables as its episodes (one ``TrajectoryBatch`` per group, or their
    object refs, so a group never straddles learners), runs the ``StepTableCredit`` connector (the estimator's
    advantages), and optimises eq. ecpo_objective with ``core.loss.policy_update``: the native trainer's
    mini-batch / micro-batch loop, token-mean normalisation, gradient clipping and AdamW (registered here, so
    RLlib checkpoints its state). The current policy's log-probs come from the module's forward
    (``CausalLMRLModule``: ``policy.logprobs``, through DDP when there are several learners); the KL reference
    is the policy's ``frozen_copy`` (under LoRA: the adapter switched off), as on the native path.

    Shuffling: ``shuffle`` is the driver's ``core.iteration.shuffle_plan`` (one learner: the native trainer's
    exact stream; several: learner ``k`` the generator ``seed + k``, as the native FSDP path does).
    """

    def build(self) -> None:
        from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
        from ray.rllib.core import DEFAULT_MODULE_ID

        super().build()
        self.module_id = DEFAULT_MODULE_ID
        self.policy_module = self._unwrapped(self.module[self.module_id])
        self.train_config = self.policy_module.train_config
        self._learner_connector = ConnectorPipelineV2(connectors=[StepTableCredit(
            train_config=self.train_config, module_id=self.module_id)])
        policy = self.policy_module.policy
        self.reference = policy.frozen_copy() if self.train_config.kl_coef > 0 else None

    @staticmethod
    def _unwrapped(module: Any) -> Any:
        return module.unwrapped() if hasattr(module, "unwrapped") else module

    def configure_optimizers_for_module(self, module_id, config=None) -> None:
        module = self._unwrapped(self._module[module_id])
        params = self.get_parameters(module)
        train = module.train_config
        optimizer = torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay)
        self.register_optimizer(module_id=module_id, optimizer=optimizer, params=params, lr_or_lr_schedule=train.lr)

    def get_parameters(self, module):
        return [param for param in module.parameters() if param.requires_grad]

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        """Not used: this learner's ``update`` runs the native step E (``core.loss.policy_update``, whose
        micro-batches each call ``ecpo_objective_loss``) instead of RLlib's one-loss-per-minibatch loop."""
        raise TypeError("ECPOLLMLearner updates through update() (core.loss.policy_update); RLlib's per-minibatch "
                        "loss path does not apply to it")

    def update(self, *, training_data=None, episodes=None, episodes_refs=None, timesteps=None, shuffle=None,
               return_state: bool = False, **kwargs):
        from ray.rllib.core.learner.training_data import TrainingData

        from ecpo_train.runtime.builders import update_on_table

        self._check_is_built()
        self.before_gradient_based_update(timesteps=timesteps or {})
        if training_data is None:
            training_data = TrainingData(episodes=episodes, episodes_refs=episodes_refs)
        training_data.solve_refs()
        batch = self._learner_connector(rl_module=self.module, batch={}, episodes=training_data.episodes,
                                        shared_data={}, metrics=self.metrics)
        table = batch[self.module_id]["table"]
        self.last_advantages = batch[self.module_id][Postprocessing.ADVANTAGES]  # for callers measuring credit
        step_advantages = torch.as_tensor(self.last_advantages, dtype=torch.float32)
        module = self.module[self.module_id]

        def logprobs(prompt_rows, response_rows, with_entropy):  # through DDP when there are several learners
            out = module.forward_train({PROMPT_IDS: prompt_rows, RESPONSE_IDS: response_rows,
                                        WITH_ENTROPY: with_entropy})
            return out[TOKEN_LOGP], out[RESPONSE_MASK], out[TOKEN_ENTROPY]

        reducer = None
        if self.config.num_learners > 1:  # token counts and statistics over the learners' process group
            from ecpo_train.runtime.distributed import ProcessGroupReducer

            reducer = ProcessGroupReducer(str(self._device))
        rank = torch.distributed.get_rank() if reducer is not None else 0
        generator = shuffle_generator(shuffle, rank) if shuffle else np.random.default_rng()
        stats = update_on_table(self.policy_module.policy, self.train_config, table, step_advantages,
                                self.get_optimizer(self.module_id), generator, reference=self.reference,
                                reducer=reducer, logprobs=logprobs)
        self._weights_seq_no += 1
        self.metrics.log_dict({k: float(v) for k, v in stats.items()}, key=(self.module_id, UPDATE_RESULTS), window=1)
        self.metrics.log_value((self.module_id, "num_steps"), float(len(table)), reduce="sum", window=1)
        self.metrics.log_value((self.module_id, CREDIT_RESULTS, NONZERO_ADVANTAGES),
                               int(np.count_nonzero(self.last_advantages)), reduce="sum", window=1)
        log_learner_update(self.metrics, self.module_id, stats, len(table), self.train_config.kl_coef)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()

    @classmethod
    def rl_module_required_apis(cls) -> list[type]:
        return []
