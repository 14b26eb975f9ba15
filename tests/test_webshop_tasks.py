"""WebShop task sources: reset sampling by goal weight, and the 100 fixed (ExpeL) tasks."""

import copy
import json
from collections import Counter

import pytest

from ecpo_gym.webshop.env import WebShopEnv, WebShopGenEnv
from ecpo_gym.webshop.expert import expert_actions_for_task
from ecpo_gym.webshop.fixed_tasks import MissingFixedTaskProducts, load_fixed_tasks
from ecpo_gym.webshop.goals import NO_PRICE_CEILING


@pytest.fixture(scope="module")
def gen_env():
    return WebShopGenEnv(num_products=150, catalogue_seed=3)


def test_reset_samples_goals_by_weight(gen_env):
    env = gen_env
    weights = {t: env.goal_of(t).weight for t in env.task_ids}
    assert len(set(weights.values())) > 10  # rarity weights really differ between goals
    env.reset(seed=0)
    draws = Counter(env.sample_task_id() for _ in range(30000))
    total = sum(weights.values())
    # goals above the median weight carry this share of the mass, and get drawn that often
    heavy = {t for t, w in weights.items() if w > sorted(weights.values())[len(weights) // 2]}
    expected_heavy = sum(weights[t] for t in heavy) / total
    observed_heavy = sum(draws[t] for t in heavy) / 30000
    assert abs(observed_heavy - expected_heavy) < 0.015, (observed_heavy, expected_heavy)
    assert expected_heavy - len(heavy) / len(weights) > 0.1  # far from what uniform sampling would give
    heaviest = max(weights, key=weights.get)
    assert draws[heaviest] / 30000 == pytest.approx(weights[heaviest] / total, rel=0.25)


def test_weighted_reset_is_deterministic_under_the_seed(gen_env):
    first = [gen_env.reset(seed=s)[1]["task_id"] for s in range(20)]
    again = [gen_env.reset(seed=s)[1]["task_id"] for s in range(20)]
    other = WebShopGenEnv(num_products=150, catalogue_seed=3)
    assert first == again == [other.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert len(set(first)) > 10
    # unseeded resets continue the seeded stream; an explicit task_id still wins
    gen_env.reset(seed=3)
    stream = [gen_env.reset()[1]["task_id"] for _ in range(5)]
    gen_env.reset(seed=3)
    assert stream == [gen_env.reset()[1]["task_id"] for _ in range(5)]
    assert gen_env.reset(seed=3, options={"task_id": "goal_7"})[1]["task_id"] == "goal_7"


# ---------------------------------------------------------------------------------------------- fixed tasks

def test_fixed_tasks_file_parses(webshop_dir):
    tasks = load_fixed_tasks(webshop_dir / "expel_webshop.fixed100.json")
    assert [t.task_id for t in tasks] == [f"fixed_{i}" for i in range(100)]
    first = tasks[0]
    assert first.asin == "B09KCMTNQP" and first.query == "hair extensions, wigs & accessories"
    assert first.instruction == ("i need a long clip-in hair extension which is natural looking, "
                                 "and price lower than 20.00 dollars")
    assert first.price_upper == 20.0 and first.goal_options == ()
    assert first.base_instruction == "i need a long clip-in hair extension which is natural looking"
    assert tasks[3].goal_options == ("vegetarian smoked", "4 ounce (pack of 2)")
    no_ceiling = [t for t in tasks if "price lower" not in t.instruction]
    assert len(no_ceiling) == 1 and no_ceiling[0].price_upper == NO_PRICE_CEILING
    assert not any("[Search]" in t.instruction for t in tasks)
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        load_fixed_tasks(webshop_dir / "nowhere.json")


def test_fixed_tasks_against_the_sample_catalogue_report_missing_products(webshop_dir):
    files = {"products_file": webshop_dir / "sample" / "items_shuffle_sample.json",
             "attributes_file": webshop_dir / "items_ins_v2_1000.json",
             "human_file": webshop_dir / "sample" / "items_human_ins_sample.json",
             "fixed_tasks_file": webshop_dir / "expel_webshop.fixed100.json"}
    with pytest.raises(MissingFixedTaskProducts, match=r"100 fixed WebShop task\(s\).*fixed_0 \(B09KCMTNQP\)"
                       r".*and 90 more.*items_shuffle.json") as caught:
        WebShopEnv(task_source="fixed100", **files)
    assert len(caught.value.missing) == 100
    with pytest.raises(ValueError, match="none of the fixed WebShop tasks"):
        WebShopEnv(task_source="fixed100", missing_fixed_tasks="skip", **files)
    with pytest.raises(ValueError, match="task_source"):
        WebShopEnv(task_source="fixed", **files)


def test_fixed_tasks_play_on_a_catalogue_holding_their_products(webshop_dir, tmp_path):
    """No obtainable product file holds the fixed tasks' products: pair six of them with sample records
    (the task's ASIN, name, query, goal options and a low price), and the human file with their instructions."""
    tasks = load_fixed_tasks(webshop_dir / "expel_webshop.fixed100.json")
    chosen = tasks[:6]
    records = json.loads((webshop_dir / "sample" / "items_shuffle_sample.json").read_text())
    paired, human = [], {}
    for task, record in zip(chosen, records):
        record = copy.deepcopy(record)
        record.update(asin=task.asin, name=task.name, query=task.query, pricing="$5.00",
                      customization_options={f"option {i}": [{"value": v, "image": None}]
                                             for i, v in enumerate(task.goal_options)} or "")
        paired.append(record)
        attribute = max(task.name.lower().split(), key=len)  # a word of the title: the attribute matches
        human[task.asin] = [{"asin": task.asin, "instruction": task.base_instruction + ".",
                             "instruction_attributes": [attribute], "instruction_options": list(task.goal_options)}]
    del human[chosen[5].asin]  # this one's human instruction is not loaded: it gets no goal attributes
    (tmp_path / "products.json").write_text(json.dumps(paired + records[6:]))
    (tmp_path / "human.json").write_text(json.dumps(human))
    files = {"products_file": tmp_path / "products.json", "attributes_file": webshop_dir / "items_ins_v2_1000.json",
             "human_file": tmp_path / "human.json", "fixed_tasks_file": webshop_dir / "expel_webshop.fixed100.json"}
    with pytest.raises(MissingFixedTaskProducts, match="94 fixed WebShop task"):
        WebShopEnv(task_source="fixed100", **files)
    env = WebShopEnv(task_source="fixed100", missing_fixed_tasks="skip", **files)
    assert list(env.task_ids) == [t.task_id for t in chosen]
    assert len(env.missing_fixed_tasks) == 94 and env.missing_fixed_tasks[0] == "fixed_6"
    assert env.fixed_tasks_without_attributes == ["fixed_5"]
    goal = env.goal_of("fixed_3")
    assert goal.goal_options == ["vegetarian smoked", "4 ounce (pack of 2)"]
    assert goal.price_upper == chosen[3].price_upper < NO_PRICE_CEILING
    assert goal.attributes == [max(chosen[3].name.lower().split(), key=len)]
    with pytest.raises(KeyError, match="fixed_0"):
        env.goal_of("goal_0")
    for task in chosen:
        obs, info = env.reset(options={"task_id": task.task_id})
        assert task.instruction in obs and info["task"] == task.instruction
        for action in expert_actions_for_task(env, task.task_id):
            _, reward, terminated, _, info = env.step(action)
            assert info["is_action_valid"], (task.task_id, action)
        assert terminated and info["won"] and reward == 10.0, (task.task_id, info)
    # human/fixed goals weigh 1: reset without a task id draws them uniformly
    draws = Counter(env.reset(seed=s)[1]["task_id"] for s in range(600))
    assert set(draws) == set(env.task_ids) and min(draws.values()) > 60
