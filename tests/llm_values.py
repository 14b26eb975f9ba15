"""The small corridor run the RLlib LLM tests build: a TrainConfig's values on the tiny model (one place)."""

CORRIDOR = {"num_tasks": 2, "depth": 4, "rare_prob": [0.4, 0.7]}


def small_values(model, tmp_path, **changes):
    values = {"run_dir": str(tmp_path / "run"), "policy": "llm", "policy_mode": "score", "model": str(model),
              "device": "cpu", "env_id": "ecpo/DivergentAnchor-v0", "env_kwargs": dict(CORRIDOR), "n_groups": 2,
              "group_size": 4, "history_length": 0, "prompt_style": "compact", "val_every": 0,
              "credit": {"d_min": 1}, "lr": 1e-3, "kl_coef": 0.01, "mini_batch_size": 8, "micro_batch_size": 4,
              "num_epochs": 1, "seed": 5, "checkpoint_every": 0, "tensorboard": False, "progress": False}
    return values | changes
