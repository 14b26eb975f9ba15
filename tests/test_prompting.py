"""Prompt rendering against the paper's templates (appendix A, B.1) and the chat-template wrapper."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ecpo_train.policies.prompting import (
    fill_template,
    load_template,
    prompts_dir,
    render_prompt,
    template_name,
    to_chat,
)

HISTORY = [
    ("You are in the middle of a room.", "go to desk 1"),
    ("On the desk 1, you see a mug 1.", "take mug 1 from desk 1"),
    ("You pick up the mug 1 from the desk 1.", "go to sinkbasin 1"),
]


@pytest.mark.parametrize(
    ("env_name", "family"),
    [
        ("ecpo/ALFWorld-v0", "alfworld"),
        ("ecpo/ALFWorldGen-v0", "alfworld"),
        ("ecpo/WebShop-v0", "webshop"),
        ("ecpo/WebShopGen-v0", "webshop"),
        ("ecpo/SearchQA-v0", "searchqa"),
        ("ecpo/SearchQAGen-v0", "searchqa"),
        ("ecpo/DivergentAnchor-v0", "default"),
        ("ecpo/DivergentAnchorWide-v0", "default"),
        ("ecpo_gym:ecpo/WebShop-v0", "webshop"),
        ("diagnostic", "default"),
        ("alfworld", "alfworld"),
        ("default", "default"),
        ("mylab/AlfworldClone-v0", "default"),  # not an ECPO id: no guess from its spelling
    ],
)
def test_env_ids_map_to_template_families(env_name, family):
    assert template_name(env_name) == family


def test_every_template_has_both_sections_and_no_unknown_fields():
    known = {
        "task", "step_count", "current_step", "history_length", "action_history", "past_actions",
        "memory_context", "current_observation", "admissible_actions",
    }
    for family in ("alfworld", "webshop", "searchqa", "default"):
        for style in ("paper", "compact", "compact-actions"):
            sections = load_template(family, style)
            for text in sections.values():
                assert set(re.findall(r"\{(\w+)\}", text)) <= known, (family, style)


def test_alfworld_prompt_fills_every_field_and_truncates_history():
    prompt = render_prompt(
        "ecpo/ALFWorld-v0",
        task="put a clean mug in coffeemachine.",
        step_count=3,
        history=HISTORY,
        observation="You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
        admissible_actions=["clean mug 1 with sinkbasin 1", "look", "go to desk 1"],
    )
    assert "{" not in prompt and "}" not in prompt
    assert prompt.startswith("You are an expert agent operating in the ALFRED Embodied Environment.")
    assert "Your task is to: put a clean mug in coffeemachine." in prompt
    assert "you have already taken 3 step(s)" in prompt
    assert "the most recent 2 observations" in prompt
    # only the last two pairs (steps 2 and 3), numbered by their step
    assert "go to desk 1'" not in prompt.split("admissible actions")[0]
    assert "[Observation 2: 'On the desk 1, you see a mug 1.', Action 2: 'take mug 1 from desk 1']" in prompt
    assert "[Observation 3: 'You pick up the mug 1 from the desk 1.', Action 3: 'go to sinkbasin 1']" in prompt
    assert "You are now at step 4 and your current observation is: You arrive at sinkbasin 1." in prompt
    assert "are: ['clean mug 1 with sinkbasin 1', 'look', 'go to desk 1']." in prompt
    assert "<think> </think>" in prompt and "<action> </action>" in prompt


def test_history_length_parameter_controls_pairs_shown():
    kwargs = {"task": "t", "step_count": 3, "history": HISTORY, "observation": "o", "admissible_actions": ["look"]}
    three = render_prompt("ecpo/ALFWorld-v0", history_length=3, **kwargs)
    assert "the most recent 3 observations" in three and "[Observation 1:" in three
    one = render_prompt("ecpo/ALFWorld-v0", history_length=1, **kwargs)
    assert "[Observation 3:" in one and "[Observation 2:" not in one
    none = render_prompt("ecpo/ALFWorld-v0", history_length=0, **kwargs)
    assert "Prior to this step" not in none and "You are now at step 4" in none


def test_compact_actions_lists_past_actions_without_their_observations():
    """WebShop's product page reads the same before and after an option is chosen: the action list tells the
    two apart, at a few tokens per step."""
    page = "Back to Search [SEP] < Prev [SEP] color [SEP] burgundy [SEP] size [SEP] large [SEP] Buy Now"
    kwargs = {"task": "tv stand, color: burgundy, size: large", "observation": page,
              "admissible_actions": ["click[burgundy]", "click[large]", "click[buy now]"], "style": "compact-actions"}
    history = [("WebShop [SEP] Search", "search[tv stands]"), ("Page 1 [SEP] B02JL9AO54", "click[b02jl9ao54]"),
               (page, "click[burgundy]")]
    before = render_prompt("ecpo/WebShopGen-v0", step_count=2, history=history[:2], history_length=6, **kwargs)
    after = render_prompt("ecpo/WebShopGen-v0", step_count=3, history=history, history_length=6, **kwargs)
    assert "Actions so far: 'search[tv stands]', 'click[b02jl9ao54]'\n" in before
    assert "Actions so far: 'search[tv stands]', 'click[b02jl9ao54]', 'click[burgundy]'\n" in after
    assert "Page 1" not in after and "WebShop [SEP] Search" not in after  # past observations are left out
    assert "Observation (step 4): " + page in after
    capped = render_prompt("ecpo/WebShopGen-v0", step_count=3, history=history, history_length=1, **kwargs)
    assert "Actions so far: 'click[burgundy]'\n" in capped
    first = render_prompt("ecpo/WebShopGen-v0", step_count=0, history=[], history_length=6, **kwargs)
    assert "Actions so far" not in first and first.startswith("Task: tv stand")


def test_first_step_uses_no_history_variant():
    prompt = render_prompt(
        "ecpo/WebShop-v0",
        task="i need a gluten free snack, and price lower than 30.00 dollars",
        step_count=0,
        history=[],
        observation="WebShop [SEP] Instruction: [SEP] ... [SEP] Search",
        admissible_actions=["search[<your query>]"],
    )
    assert "Prior to this step" not in prompt and "observations and the corresponding" not in prompt
    assert "e-commerce environment" in prompt
    assert "You are now at step 1 and your current observation is: WebShop [SEP]" in prompt
    assert "['search[<your query>]']" in prompt


def test_observation_braces_are_not_treated_as_fields():
    prompt = render_prompt(
        "ecpo/ALFWorld-v0", task="{task}", step_count=1, history=[("{current_step}", "{x}")],
        observation="{admissible_actions}", admissible_actions=["a{b}c"],
    )
    assert "Your task is to: {task}" in prompt
    assert "[Observation 1: '{current_step}', Action 1: '{x}']" in prompt
    assert "current observation is: {admissible_actions}" in prompt
    assert fill_template("{a} {b} {unknown}", {"a": "{b}", "b": 2}) == "{b} 2 {unknown}"


def test_searchqa_prompt_pairs_each_search_with_its_results():
    prompt = render_prompt(
        "ecpo/SearchQA-v0",
        task="who got the first nobel prize in physics?",
        step_count=2,
        history=[
            ("who got the first nobel prize in physics?", "<search>first nobel prize physics</search>"),
            ("Doc 1(Title: Nobel Prize) The first prize went to Roentgen.", "<search>Wilhelm Roentgen</search>"),
        ],
        observation="Doc 1(Title: Wilhelm Röntgen) German physicist.",
        admissible_actions=[],
    )
    assert "Your question: who got the first nobel prize in physics?" in prompt
    assert "already taken 2 step(s)" in prompt
    assert (
        "Step 1: <search>first nobel prize physics</search>\n"
        "<information>Doc 1(Title: Nobel Prize) The first prize went to Roentgen.</information>\n"
        "Step 2: <search>Wilhelm Roentgen</search>\n"
        "<information>Doc 1(Title: Wilhelm Röntgen) German physicist.</information>"
    ) in prompt
    assert "<search> your query </search>" in prompt and "<answer>Beijing</answer>" in prompt
    first = render_prompt(
        "ecpo/SearchQA-v0", task="q?", step_count=0, history=[], observation="q?", admissible_actions=[]
    )
    assert "History" not in first and "Your question: q?" in first


def test_prompts_dir_override_and_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("ECPO_PROMPTS_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="ECPO_PROMPTS_DIR"):
        render_prompt("ecpo/ALFWorld-v0", task="t", step_count=0, history=[], observation="o",
                      admissible_actions=[])
    (tmp_path / "custom").mkdir()
    (tmp_path / "custom" / "default.txt").write_text("[[first_step]]\nA {task}\n[[with_history]]\nB {task}\n")
    monkeypatch.setenv("ECPO_PROMPTS_DIR", str(tmp_path / "custom"))
    assert prompts_dir() == tmp_path / "custom"
    assert render_prompt("other", task="t", step_count=0, history=[], observation="o",
                         admissible_actions=[]) == "A t"


def test_installed_wheel_reads_the_templates_from_its_data_files(tmp_path, monkeypatch):
    """Outside a source checkout (a wheel install), the templates come from <prefix>/share/ecpo/prompts, where
    pyproject's data-files put them."""
    import shutil
    import sysconfig

    from ecpo_train.policies import prompting

    repo_prompts = prompts_dir()
    installed = tmp_path / "prefix" / "share" / "ecpo" / "prompts"
    shutil.copytree(repo_prompts, installed)
    monkeypatch.setattr(prompting, "__file__", str(tmp_path / "site-packages" / "ecpo_train" / "policies" / "prompting.py"))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path / "prefix"))
    assert prompts_dir() == installed
    shutil.rmtree(installed)
    with pytest.raises(FileNotFoundError, match="share/ecpo/prompts"):
        prompts_dir()
    pyproject = (repo_prompts.parent / "pyproject.toml").read_text()
    assert '"share/ecpo/prompts" = ["prompts/*.txt"]' in pyproject


def test_to_chat_plain_fallback_without_chat_template():
    class NoTemplate:
        chat_template = None

    assert to_chat(NoTemplate(), "hello") == "User: hello\nAssistant:"


def test_to_chat_applies_qwen_chat_template():
    tokenizer_dir = os.environ.get("ECPO_TOKENIZER_DIR")
    if not tokenizer_dir or not Path(tokenizer_dir).is_dir():
        pytest.skip("set ECPO_TOKENIZER_DIR to the Qwen2.5 tokenizer folder")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    prompt = render_prompt("ecpo/ALFWorld-v0", task="t", step_count=0, history=[], observation="o",
                           admissible_actions=["look"])
    chat = to_chat(tokenizer, prompt)
    assert chat.startswith("<|im_start|>system\n")
    assert f"<|im_start|>user\n{prompt}<|im_end|>\n" in chat
    assert chat.endswith("<|im_start|>assistant\n")
