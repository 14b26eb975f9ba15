"""ecpo_train/runtime/tensorboard_scalars.py: a run's TensorBoard scalars read back as written (every metric but
``iteration``), and a resumed run's scalars replace those logged after its checkpoint (TensorBoard's purge), as
TensorBoard itself reads the folder."""

from __future__ import annotations

import pytest

pytest.importorskip("torch.utils.tensorboard")
event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

from ecpo_train.runtime.run_dir import MetricsLog  # noqa: E402


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    events = event_accumulator.EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, pytest.approx(e.value)) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_scalars_read_back_and_a_resume_replaces_the_steps_after_its_checkpoint(tmp_path):
    log = MetricsLog(tmp_path / "run", tensorboard=True)
    for step in range(3):
        log.append({"iteration": step, "loss": 1.0 - step / 4, "success": step / 2}, step)
    log.close()
    assert _scalars(tmp_path / "run" / "tensorboard") == {"loss": [(0, 1.0), (1, 0.75), (2, 0.5)],
                                                         "success": [(0, 0.0), (1, 0.5), (2, 1.0)]}
    resumed = MetricsLog(tmp_path / "run", tensorboard=True)  # resumed from the checkpoint of iteration 0
    resumed.keep_through(0)
    resumed.append({"iteration": 1, "loss": 0.6, "success": 0.25}, 1)
    resumed.close()
    assert _scalars(tmp_path / "run" / "tensorboard") == {"loss": [(0, 1.0), (1, 0.6)],
                                                         "success": [(0, 0.0), (1, 0.25)]}
