"""Real ALFWorld games (valid_seen under $ECPO_DATA_DIR/alfworld/json_2.1.1)."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import ecpo_gym  # noqa: F401
from ecpo_gym.alfworld.engine import TASK_TYPES
from ecpo_gym.alfworld.env import ALFWorldEnv, resolve_split_dir
from ecpo_gym.alfworld.expert import play_expert, play_expert_parallel

# split counts of valid_seen (docs/environments.md)
VALID_SEEN_COUNTS = {"Pick": 35, "Look": 13, "Clean": 27, "Heat": 16, "Cool": 25, "Pick2": 24}


def test_missing_data_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as err:
        ALFWorldEnv(data_path=tmp_path / "nowhere")
    message = str(err.value)
    assert str(tmp_path / "nowhere") in message and "alfworld-download" in message
    monkeypatch.delenv("ECPO_DATA_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="ALFWORLD_DATA"):
        resolve_split_dir(None, "train")


@pytest.fixture(scope="module")
def env(data_dir):
    env = ALFWorldEnv()
    yield env
    env.close()


@pytest.mark.data
def test_task_ids_types_and_filters(env, data_dir):
    assert len(env.task_ids) == 140 and env.split_dir == data_dir / "alfworld" / "json_2.1.1" / "valid_seen"
    assert all(t.endswith("/game.tw-pddl") and (env.split_dir / t).is_file() for t in env.task_ids)
    assert Counter(TASK_TYPES[t.split("-")[0]] for t in env.task_ids) == VALID_SEEN_COUNTS
    heat = ALFWorldEnv(task_types=["Heat"])
    assert len(heat.task_ids) == 16 and all(t.startswith("pick_heat_then_place_in_recep-") for t in heat.task_ids)
    # the data folder, json_2.1.1 and the split folder itself are all accepted
    root = data_dir / "alfworld"
    for path in (root, root / "json_2.1.1", root / "json_2.1.1" / "valid_seen"):
        assert resolve_split_dir(path, "valid_seen") == env.split_dir


@pytest.mark.data
def test_make_by_id_and_check_env():
    env = gym.make("ecpo/ALFWorld-v0", task_types=["Look"])
    obs, info = env.reset(seed=0)
    assert obs.startswith("-= Welcome to TextWorld, ALFRED! =-") and info["task_type"] == "Look"
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.data
def test_seeded_reset_gives_same_task_and_state_keys(env):
    runs = []
    for _ in range(2):
        obs, info = env.reset(seed=42)
        result = play_expert(env, info["task_id"], seed=42)
        runs.append((info["task_id"], obs, result["state_keys"]))
    assert runs[0] == runs[1] and len(set(runs[0][2])) == len(runs[0][2])
    other = ALFWorldEnv()
    assert other.reset(seed=42)[1]["task_id"] == runs[0][0]
    other.close()


@pytest.mark.data
def test_goal_task_type_and_info_on_a_known_game(env):
    task_id = next(t for t in env.task_ids if t.startswith("pick_heat_then_place_in_recep-Apple"))
    obs, info = env.reset(options={"task_id": task_id.rsplit("/", 1)[0]})  # folder form accepted
    assert info["task_id"] == task_id and info["task_type"] == "Heat"
    assert "apple" in info["task"] and obs.endswith(info["task"] + ".")
    assert "help" not in info["admissible_actions"] and "look" in info["admissible_actions"]
    obs, reward, *_ , info = env.step("Go to the Microwave 1.")
    assert info["action_key"] == "go to microwave 1" and reward == 0.0
    with pytest.raises(KeyError):
        env.reset(options={"task_id": "pick_heat_then_place_in_recep-Nothing/trial_0"})


@pytest.mark.data
def test_failed_reset_ends_the_previous_game(env):
    from ecpo_gym import UnknownTaskError

    env.reset(options={"task_id": env.task_ids[0]})
    env.step("look")
    with pytest.raises(UnknownTaskError, match="no/such"):
        env.reset(options={"task_id": "no/such"})
    with pytest.raises(gym.error.ResetNeeded):  # the previous game does not go on
        env.step("look")
    with pytest.raises(TypeError, match="dict"):
        env.reset(options=env.task_ids[0])
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")
    assert env.reset(options={"task_id": env.task_ids[1]})[1]["task_id"] == env.task_ids[1]


@pytest.mark.data
def test_a_mistyped_split_lists_the_splits_that_exist(data_dir):
    # a split shipped as its archive (json_2.1.1-train.tar.gz) exists too
    archived = "train, " if (data_dir / "alfworld" / "json_2.1.1-train.tar.gz").is_file() else ""
    with pytest.raises(FileNotFoundError, match=f"Splits that exist there: {archived}valid_seen\\."):
        ALFWorldEnv(split="valid_unsen")


@pytest.mark.data
def test_episode_ends_at_first_won_and_step_limit(env):
    task_id = env.task_ids[0]
    env.reset(options={"task_id": task_id})
    walkthrough = env.expert_plan()
    for command in walkthrough:
        _, reward, terminated, truncated, info = env.step(command)
    assert terminated and not truncated and info["won"] and reward == 10.0
    # taking the object back would flip the engine's flag; the episode is over instead
    _, reward, terminated, _, info = env.step("inventory")
    assert reward == 0.0 and terminated and "error" in info
    short = ALFWorldEnv(max_steps=3)
    short.reset(options={"task_id": task_id})
    flags = [short.step("look")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]
    short.close()


@pytest.mark.data
@pytest.mark.slow
def test_all_140_walkthroughs_win():
    ids = list(ALFWorldEnv().task_ids)
    results = play_expert_parallel("ecpo/ALFWorld-v0", ids, processes=2)
    assert len(results) == 140
    for r in results:
        assert r["won"] and r["all_valid"] and r["steps"] == r["plan_length"], r["task_id"]
        assert r["task_type"] == TASK_TYPES[r["task_id"].split("-")[0]] and not r["won_at_reset"]


@pytest.mark.data
def test_extracted_train_folder_and_alfworld_data_variable(tmp_path, monkeypatch, data_dir):
    # the layout alfworld-download and the train tarball produce: <root>/json_2.1.1/train/<task>/<trial>/game
    source = data_dir / "alfworld" / "json_2.1.1" / "valid_seen"
    games = sorted(source.glob("*/*/game.tw-pddl"))[:2]
    for game in games:
        target = tmp_path / "json_2.1.1" / "train" / game.relative_to(source)
        target.parent.mkdir(parents=True)
        target.symlink_to(game)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
    env = ALFWorldEnv(split="train")
    assert env.split_dir == tmp_path / "json_2.1.1" / "train"
    assert list(env.task_ids) == [str(g.relative_to(source)) for g in games]
    _, info = env.reset(options={"task_id": env.task_ids[1]})
    assert info["task_type"] == TASK_TYPES[games[1].relative_to(source).parts[0].split("-")[0]]
    env.close()
    with pytest.raises(FileNotFoundError, match="valid_unseen"):
        ALFWorldEnv(split="valid_unseen")


@pytest.mark.data
def test_data_dir_may_be_the_benchmark_data_folder(monkeypatch, data_dir):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    env = ALFWorldEnv(data_dir=data_dir, task_types=["Look"])
    assert env.split_dir == data_dir / "alfworld" / "json_2.1.1" / "valid_seen" and len(env.task_ids) == 13


TRAIN_COUNTS = {"Pick": 790, "Look": 308, "Clean": 650, "Heat": 459, "Cool": 533, "Pick2": 813}


@pytest.mark.data
def test_train_split_is_played_straight_from_its_archive(tmp_path, monkeypatch, data_dir):
    archive = data_dir / "alfworld" / "json_2.1.1-train.tar.gz"
    if not archive.is_file():
        pytest.skip(f"{archive} is not there")
    # a data folder holding only the release archive (no extracted train folder), and an empty cache
    data = tmp_path / "data" / "alfworld"
    data.mkdir(parents=True)
    (data / archive.name).symlink_to(archive)
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("ECPO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path / "cache"))
    env = gym.make("ecpo/ALFWorld-v0", split="train")
    split_dir = env.unwrapped.split_dir
    assert split_dir.is_relative_to(tmp_path / "cache" / "alfworld") and split_dir.name == "train"
    assert Counter(TASK_TYPES[t.split("-")[0]] for t in env.unwrapped.task_ids) == TRAIN_COUNTS
    result = play_expert(env, env.unwrapped.task_ids[0], seed=0)
    assert result["won"] and result["all_valid"] and result["steps"] == result["plan_length"]
    env.close()
    # extracted once: a second environment reads the same folder, and nothing is left half-written beside it
    again = ALFWorldEnv(split="train", task_types=["Heat"])
    assert again.split_dir == split_dir and len(again.task_ids) == TRAIN_COUNTS["Heat"]
    assert [p.name for p in (tmp_path / "cache" / "alfworld").iterdir()] == [split_dir.parents[1].name]


@pytest.mark.parametrize("bad", ["../escaped", "/absolute", "json_2.1.1/train/link", "elsewhere/file"])
def test_an_unsafe_archive_is_refused_and_nothing_is_extracted(tmp_path, monkeypatch, bad):
    import io
    import tarfile

    root = tmp_path / "data"
    root.mkdir()
    with tarfile.open(root / "json_2.1.1-train.tar.gz", "w:gz") as handle:
        game = tarfile.TarInfo("json_2.1.1/train/pick_and_place_simple-A-None-B-1/trial_1/game.tw-pddl")
        game.size = 2
        handle.addfile(game, io.BytesIO(b"{}"))
        member = tarfile.TarInfo(bad)
        if bad.endswith("link"):
            member.type, member.linkname = tarfile.SYMTYPE, "/etc/passwd"
            handle.addfile(member)
        else:
            member.size = 1
            handle.addfile(member, io.BytesIO(b"x"))
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError, match=f"not a safe ALFWorld archive: member '{bad}'"):
        ALFWorldEnv(data_dir=root, split="train")
    assert not any((tmp_path / "cache" / "alfworld").iterdir()) and not (tmp_path / "escaped").exists()


def write_split_archive(path: Path, split: str, games: int) -> Path:
    """A release-shaped archive (``json_2.1.1/<split>/<task>/<trial>/game.tw-pddl``) of ``games`` tiny games."""
    import io
    import tarfile

    with tarfile.open(path / f"json_2.1.1-{split}.tar.gz", "w:gz") as handle:
        for k in range(games):
            game = tarfile.TarInfo(f"json_2.1.1/{split}/pick_and_place_simple-A{k}-None-B-1/trial_1/game.tw-pddl")
            body = b'{"game": %d}' % k + b" " * 4000  # (room for a cut inside the stream)
            game.size = len(body)
            handle.addfile(game, io.BytesIO(body))
    return path / f"json_2.1.1-{split}.tar.gz"


def cache_entries(cache: Path) -> list[str]:
    folder = cache / "alfworld"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


@pytest.mark.data
def test_a_train_archive_with_64_bytes_flipped_at_5_mb_is_refused_in_one_line_and_nothing_is_cached(
        tmp_path, monkeypatch, data_dir):
    """Issue 58.2 as found: ``tarfile`` stopped at the damaged header and 567 of 3,553 games were cached as the
    split. The archive is read to its end: one line naming the file, nothing cached, no staging folder left."""
    archive = Path(data_dir) / "alfworld" / "json_2.1.1-train.tar.gz"
    if not archive.is_file():
        pytest.skip(f"{archive} is not there")
    data = tmp_path / "data"
    data.mkdir()
    damaged = bytearray(archive.read_bytes())
    damaged[5 * 2**20: 5 * 2**20 + 64] = bytes(b ^ 0xFF for b in damaged[5 * 2**20: 5 * 2**20 + 64])
    (data / archive.name).write_bytes(damaged)
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError) as refused:
        ALFWorldEnv(data_dir=data, split="train")
    message = str(refused.value)
    assert "\n" not in message and str(data / archive.name) in message and "cut or damaged" in message
    assert cache_entries(tmp_path / "cache") == []


@pytest.mark.parametrize("damage", ["cut", "missing_games", "no_end_blocks"])
def test_a_cut_or_short_archive_is_refused_naming_it_and_nothing_is_cached(tmp_path, monkeypatch, damage):
    """Issue 58.2, the class: a gzip stream cut short (its CRC never reached), an archive whole but holding fewer
    games than the release's split, a tar without its end blocks: each one line naming the archive."""
    import gzip

    root = tmp_path / "data"
    root.mkdir()
    archive = write_split_archive(root, "valid_seen", 139 if damage == "missing_games" else 140)
    if damage == "cut":
        archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    if damage == "no_end_blocks":
        tar = gzip.decompress(archive.read_bytes())
        archive.write_bytes(gzip.compress(tar[: tar.rindex(b"}") + 4001 + 511 & ~511]))  # cut after the last member
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ValueError) as refused:
        ALFWorldEnv(data_dir=root, split="valid_seen")
    message = str(refused.value)
    assert "\n" not in message and str(archive) in message
    assert ("holds 139 valid_seen games, the release's split has 140" in message) == (damage == "missing_games")
    assert cache_entries(tmp_path / "cache") == []


def test_a_whole_archive_is_extracted_once_and_a_short_cached_split_is_extracted_afresh(tmp_path, monkeypatch):
    root = tmp_path / "data"
    root.mkdir()
    write_split_archive(root, "valid_seen", 140)
    monkeypatch.setenv("ECPO_CACHE_DIR", str(tmp_path / "cache"))
    split_dir = ALFWorldEnv(data_dir=root, split="valid_seen").split_dir
    assert len(list(split_dir.glob("*/*/game.tw-pddl"))) == 140
    shutil.rmtree(next(split_dir.iterdir()))  # a split an older version cut short and cached as whole
    assert len(ALFWorldEnv(data_dir=root, split="valid_seen").task_ids) == 140


def test_kill_9_during_extraction_leaves_no_staging_folder_for_good(tmp_path):
    """Issue 58.2: an extraction killed with ``kill -9`` (no cleanup runs) leaves ``.extracting-*``; the next
    extraction removes it, and a staging folder of a process still running is left alone."""
    import subprocess
    import sys

    root = tmp_path / "data"
    root.mkdir()
    archive = write_split_archive(root, "valid_seen", 140)
    cache = tmp_path / "cache"
    script = ("import sys; from fault_injection import _hook; "
              "from pathlib import Path; from ecpo_gym.alfworld.game_files import extracted_archive; "
              "sys.setprofile(_hook('game.tw-pddl', 'kill')); "
              "extracted_archive(Path(sys.argv[1]), cache_dir=sys.argv[2], split='valid_seen')")
    tests = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", script, str(archive), str(cache)], capture_output=True, text=True,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}, check=False)
    assert done.returncode == -9, done.stderr[-2000:]
    left = cache_entries(cache)
    assert len(left) == 1 and left[0].startswith(".extracting-")
    from ecpo_gym.alfworld.game_files import extracted_archive
    from ecpo_gym.cache import staging_folder

    with staging_folder(cache / "alfworld", prefix=".extracting-") as running:  # this process: still running
        target = extracted_archive(archive, cache_dir=cache, split="valid_seen")
        assert cache_entries(cache) == sorted([target.name, running.name])
    assert cache_entries(cache) == [target.name]
