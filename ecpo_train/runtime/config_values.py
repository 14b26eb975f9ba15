"""How a config value is read: YAML 1.2 without aliases. Checking it is ``core.config_values``' one rule (re-exported
here for the run shell's modules).

- **Reading**: YAML 1.2 numbers (``1e-7`` is a float, as in JSON; PyYAML's YAML 1.1 reads it as a string) and no
  aliases (``*name`` is refused where it is read: a few hundred bytes could expand into gigabytes).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from ecpo_train.core.config_values import SHOWN_CHARS, coerce_value, field_types, shown  # noqa: F401  (re-exported)


class _Yaml12Loader(yaml.SafeLoader):
    """PyYAML's safe loader (no arbitrary objects) with YAML 1.2's floats and no aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, f"found the alias *{event.anchor}: aliases are not "
                                              "supported (write the value out)", event.start_mark)
        return super().compose_node(parent, index)


_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)?(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def read_yaml(text: str) -> Any:
    """YAML text as data, with YAML 1.2 numbers and no aliases (the one reader of presets, ``key=value`` overrides
    and a run's recorded ``config.yaml``)."""
    try:
        return yaml.load(text, Loader=_Yaml12Loader)
    except ValueError as err:  # an integer of more digits than Python converts: a YAML error, named by the callers
        raise yaml.constructor.ConstructorError(None, None, f"a value too large to read ({str(err)[:80]})",
                                                None) from None
