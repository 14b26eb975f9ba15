"""An env id read from a file never imports a module (issue 70, item 3): gymnasium's ``"module:id"`` spelling
imports ``module`` when the id is made, so a run folder's ``config.yaml``, a manifest, a checkpoint's config or an
RLlib checkpoint's config naming ``evilmod:Evil-v0`` is refused in one line (``ecpo_gym.families.recorded_env_id``,
the one rule), and a planted ``evilmod.py`` never runs. The module form stays the command line's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EVIL = "from pathlib import Path\nPath(__file__).with_name('IMPORTED').write_text('ran')\n"


def _planted(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evilmod.py").write_text(EVIL)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    return folder


def test_eval_of_a_run_folder_naming_a_module_imports_nothing(tmp_path):
    """``cd RUN && python -m ecpo_train.apps.cli eval .``: the current folder is on the import path, as there."""
    run = _planted(tmp_path / "run", {"env_id": "evilmod:Evil-v0", "env_kwargs": {}, "policy": "tabular"})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "ecpo_train.apps.cli", "eval", ".", "--no-progress"], check=False,
                            cwd=run, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stdout + result.stderr
    assert "config.yaml: env_id 'evilmod:Evil-v0' names a module to import" in lines[0]
    assert not (run / "IMPORTED").exists()


def test_a_checkpoint_config_naming_a_module_rebuilds_its_policy_without_importing_it(tmp_path, monkeypatch):
    import torch

    from ecpo_train.evaluation.agents import load_checkpoint_policy
    from ecpo_train.policies.tabular import TabularSoftmaxPolicy

    run = _planted(tmp_path / "run", {})
    monkeypatch.syspath_prepend(str(run))
    config = {"env_id": "evilmod:ecpo/DivergentAnchor-v0", "policy": "tabular", "estimator": "ecpo"}
    torch.save({"policy": TabularSoftmaxPolicy().state_dict(), "config": config, "iteration": 1},
               run / "checkpoint.pt")
    policy, recorded = load_checkpoint_policy(run)
    assert isinstance(policy, TabularSoftmaxPolicy) and recorded["estimator"] == "ecpo"
    assert "evilmod" not in sys.modules and not (run / "IMPORTED").exists()


@pytest.mark.parametrize("env_id", ["evilmod:Evil-v0", "os:ecpo/ALFWorldGen-v0", ["ecpo/ALFWorldGen-v0"], ""])
def test_the_rule_refuses_every_module_form_and_non_id_in_one_line(env_id):
    from ecpo_gym.families import recorded_env_id

    with pytest.raises(ValueError, match="^where: env_id") as error:
        recorded_env_id(env_id, "where")
    assert "\n" not in str(error.value) and len(str(error.value)) < 300
    assert recorded_env_id("ecpo/ALFWorldGen-v0", "where") == "ecpo/ALFWorldGen-v0"
    long = "m" * 100_000 + ":x"
    with pytest.raises(ValueError) as error:
        recorded_env_id(long, "where")
    assert len(str(error.value)) < 400  # the id is quoted as a bounded prefix


def test_an_rllib_checkpoint_config_naming_a_module_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    pytest.importorskip("ray.rllib")
    from ecpo_train.integrations.rllib.llm.config import ECPO
    from ecpo_train.integrations.rllib.state_files import STATE_FILE

    folder = _planted(tmp_path / "ckpt", {"train_config": {"env_id": "evilmod:Evil-v0", "policy": "llm",
                                                           "model": "x"}, "rllib": {}})
    (folder / STATE_FILE).write_bytes(b"")
    monkeypatch.syspath_prepend(str(folder))
    with pytest.raises(ValueError, match="names a module to import"):
        ECPO.from_checkpoint(str(folder))
    assert "evilmod" not in sys.modules and not (folder / "IMPORTED").exists()
