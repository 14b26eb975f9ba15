"""One coercion rule at every depth, and presets that state only what differs from the defaults."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import yaml

from ecpo_gym.families import declaration_of
from ecpo_train.credit import CreditConfig
from ecpo_train.runtime.config import CONFIG_DIR, TrainConfig, load_config, preset_values


def _credit_keys(kind: type) -> list[str]:
    """The credit fields of one type, read through their declared ranges (``Annotated[float, Gt(0)]``)."""
    hints = typing.get_type_hints(CreditConfig)
    return [f.name for f in dataclasses.fields(CreditConfig)
            if (typing.get_args(hints[f.name]) or (hints[f.name],))[0] is kind]


FLOAT_CREDIT_KEYS = _credit_keys(float)
INT_CREDIT_KEYS = _credit_keys(int)
assert len(FLOAT_CREDIT_KEYS) >= 10 and INT_CREDIT_KEYS, "the coercion tests must see the credit fields"
# raw override text -> what a float key holds afterwards (an exception type when it is rejected)
FLOAT_CASES = {
    "1e-7": 1e-7,  # YAML 1.1 (PyYAML) reads this as a string; both depths read it as a number
    "2.5e-1": 0.25,
    "0.125": 0.125,
    "1": 1.0,  # an int is a float
    "true": ValueError,  # a bool never is
    "'0.5'": ValueError,  # nor a quoted string
    "[1]": ValueError,
    "null": ValueError,
}
INT_CASES = {"3": 3, "3.0": ValueError, "3e0": ValueError, "true": ValueError, "'3'": ValueError}


def _reader(key: str) -> list[str]:
    """The override choosing an estimator that reads credit field ``key`` (one that does not refuses it)."""
    from ecpo_train.core.credit import available_estimators, estimator_spec

    return [f"estimator={next(n for n in available_estimators() if estimator_spec(n).reads_credit_key(key))}"]


def _outcome(overrides: list[str], read):
    try:
        return read(load_config("quickstart", overrides))
    except ValueError as err:
        assert "\n" not in str(err)  # one line, as the CLI prints it
        return ValueError


def test_credit_eps_takes_1e_minus_7_like_lr():
    config = load_config("quickstart", ["credit.eps=1e-7", "lr=1e-7"])
    assert config.credit.eps == 1e-7 and config.lr == 1e-7
    assert isinstance(config.credit.eps, float)


@pytest.mark.parametrize("key", FLOAT_CREDIT_KEYS)
@pytest.mark.parametrize(("raw", "expected"), FLOAT_CASES.items())
def test_every_nested_float_key_coerces_like_a_top_level_float(key, raw, expected):
    nested = _outcome([*_reader(key), f"credit.{key}={raw}"], lambda c: getattr(c.credit, key))
    top = _outcome([f"lr={raw}"], lambda c: c.lr)
    assert top == expected
    if expected is not ValueError and not _in_range(key, expected):
        assert nested is ValueError  # the key's declared range refuses it (graph_gamma < 1), not the coercion
        return
    assert nested == expected
    assert expected is ValueError or type(nested) is float


def _in_range(key: str, value: float) -> bool:
    try:
        CreditConfig(**{key: value})
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("key", INT_CREDIT_KEYS)
@pytest.mark.parametrize(("raw", "expected"), INT_CASES.items())
def test_every_nested_int_key_coerces_like_a_top_level_int(key, raw, expected):
    nested = _outcome([*_reader(key), f"credit.{key}={raw}"], lambda c: getattr(c.credit, key))
    top = _outcome([f"n_groups={raw}"], lambda c: c.n_groups)
    assert nested == top == expected


def test_nested_type_errors_name_the_dotted_key_like_top_level_ones():
    with pytest.raises(ValueError, match=r"config key 'credit.kappa' expects float, got True \(bool\)"):
        load_config("quickstart", ["credit.kappa=true"])
    with pytest.raises(ValueError, match=r"config key 'lr' expects float, got True \(bool\)"):
        load_config("quickstart", ["lr=true"])
    with pytest.raises(ValueError, match=r"credit.compat=3; valid: native, verl-agent"):  # a declared choice
        load_config("quickstart", ["credit.compat=3"])


def test_a_yaml_file_coerces_like_overrides(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("policy: tabular\nenv_id: ecpo/DivergentAnchor-v0\nlr: 1e-3\ncredit: {eps: 1e-7, kappa: 3}\n")
    config = load_config(str(preset))
    assert (config.lr, config.credit.eps, config.credit.kappa) == (1e-3, 1e-7, 3.0)
    assert type(config.credit.kappa) is float


# ---------------------------------------------------------------------------------------------- presets
PRESETS = sorted(path.stem for path in CONFIG_DIR.glob("*.yaml"))


def _load(name: str) -> TrainConfig:
    # an LLM preset names its model; the text policy's (alfworld_text, households_text, ...) starts from random
    # weights without one
    text = preset_values(name).get("policy") == "text"
    return load_config(name, [] if name == "quickstart" or text else ["model=some/model"])


@pytest.mark.parametrize("name", PRESETS)
def test_a_changed_credit_default_reaches_every_preset(name, monkeypatch):
    stated = (yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text()) or {}).get("credit") or {}
    before = _load(name).credit
    fields = [f.name for f in dataclasses.fields(CreditConfig)]
    changed = {"gamma": 0.9, "omega": 0.5, "kappa": 3.0, "tau": 1.5, "d_min": 5, "rho_min": 0.25, "eps": 1e-5,
               "compat": "native", "pgpo_alpha": 1.0, "pgpo_beta": 0.5, "pgpo_gamma": 0.9, "hgpo_history": 3,
               "hgpo_alpha": 2.0, "hgpo_std": False, "hgpo_base_group": True, "graph_gamma": 0.2,
               "graph_success_return": 5.0, "pace_cosine": 0.9}
    assert set(changed) == set(fields)  # a new CreditConfig field gets a changed default here too
    defaults = tuple(changed[f] for f in fields)
    monkeypatch.setattr(CreditConfig.__init__, "__defaults__", defaults)  # "edit" every default in one place
    after = _load(name).credit
    for field in fields:
        if field in stated:  # what the preset states on purpose stays
            assert getattr(after, field) == getattr(before, field), field
        else:
            assert getattr(after, field) == changed[field], field


def _field_defaults(cls) -> dict:
    return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("name", ["alfworld", "corridor_llm", "households_text", "quickstart", "searchqa", "webshop"])
def test_presets_state_only_what_differs_from_the_defaults(name):
    stated = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text()) or {}
    defaults, credit_defaults = _field_defaults(TrainConfig), _field_defaults(CreditConfig)
    for key, value in stated.items():
        if key == "credit":
            for entry, credit_value in value.items():
                assert credit_value != credit_defaults[entry], f"{name}: credit.{entry} restates its default"
        elif key == "env_kwargs":  # the step limit is the env's declared one unless a preset changes it
            declared = declaration_of(stated.get("env_id", defaults["env_id"])).max_steps
            assert "max_steps" not in value or value["max_steps"] != declared, f"{name}: max_steps restated"
        else:
            assert value != defaults[key], f"{name}: {key} restates its default"
