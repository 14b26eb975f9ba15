"""``CandidateScorerModule``: the classic-RL example's critic-free RLModule, a scorer over ``CandidateActionEnv``'s
candidates: ``logit_k = MLP([c, e_k, c * e_k])`` over learned embeddings ``c`` of the context and ``e_k`` of
candidate ``k``, with absent candidates masked out, so the policy is a softmax over the state's admissible actions.
No value head: ECPO's baseline is the group (``credit.py``), not a critic.
"""

from __future__ import annotations

import torch
from ray.rllib.core.columns import Columns

from ecpo_train.integrations.rllib.base_module import GroupCreditModule
from examples.rllib_candidate.env import layout_from_space, split_observation

# Finite (not -inf) so masked entries give zero probability without NaN entropies or KLs.
MASKED_LOGIT = -1e9


class CandidateScorerModule(GroupCreditModule):
    """Policy over ``Discrete(K)`` candidate indices; ``model_config``: ``hidden_dim`` (default 64)."""

    def setup(self) -> None:
        self.feature_dim, self.max_candidates = layout_from_space(
            self.observation_space.shape[0], self.action_space.n
        )
        hidden = int((self.model_config or {}).get("hidden_dim", 64))
        self.context_encoder = torch.nn.Sequential(torch.nn.Linear(self.feature_dim, hidden), torch.nn.Tanh())
        self.candidate_encoder = torch.nn.Sequential(torch.nn.Linear(self.feature_dim, hidden), torch.nn.Tanh())
        # The product term lets a candidate's score depend on the state (hashed buckets of the two
        # texts rarely coincide, so raw features alone would score actions state-independently).
        self.scorer = torch.nn.Sequential(
            torch.nn.Linear(3 * hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1),
        )

    def _forward(self, batch, **kwargs):
        obs = batch[Columns.OBS].float()
        context, candidates, mask = split_observation(obs, self.feature_dim, self.max_candidates)
        candidate_h = self.candidate_encoder(candidates)
        context_h = self.context_encoder(context).unsqueeze(-2).expand_as(candidate_h)
        joint = torch.cat([context_h, candidate_h, context_h * candidate_h], dim=-1)
        scores = self.scorer(joint).squeeze(-1)
        logits = torch.where(mask > 0.5, scores, torch.full_like(scores, MASKED_LOGIT))
        return {Columns.ACTION_DIST_INPUTS: logits}
