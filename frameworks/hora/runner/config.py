"""``horarun --config-file FILE``: flag values from a YAML file.

Keys are the long flag names, with dashes or underscores (``num-proc: 4`` or ``np: 4``,
``fusion-threshold-mb: 32``, ``hosts: "a:2,b:2"``, ``verbose: true``, ``env: [FOO, BAR=1]``). Values from the file become the
parser's defaults, so a flag given on the command line overrides the file. Reading YAML needs
PyYAML (``pip install pyyaml``).
"""

from __future__ import annotations

import argparse
from typing import Any

_NOT_ALLOWED = {"config_file", "check_build", "help", "command"}


class ConfigError(ValueError):
    """The config file cannot be read or has a key or value horarun does not accept."""


def load_yaml(path: str) -> dict[str, Any]:
    """The mapping stored in the YAML file at ``path`` (empty file: empty mapping).

    Raises:
        ConfigError: PyYAML missing, unreadable file, bad YAML, or not a mapping.
    """
    try:
        import yaml
    except ImportError:
        raise ConfigError("--config-file needs PyYAML to read YAML; install it with "
                          "'pip install pyyaml'") from None
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path!r} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path!r} must hold a mapping of flag names to values")
    return data


def _actions_by_flag(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    found: dict[str, argparse.Action] = {}
    for action in parser._actions:
        for option in action.option_strings:
            key = option.lstrip("-").replace("-", "_")
            if len(key) > 1:  # long names, also -np and -hostfile; not -H, -p, -i, -x
                found[key] = action
    return found


def _convert(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    def fail(why: str) -> ConfigError:
        return ConfigError(f"config file {path!r}: {key}: {why}")

    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise fail(f"expected true or false, got {value!r}")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_convert_one(action, item, fail) for item in items]
    if isinstance(value, (list, dict)):
        raise fail(f"expected a single value, got {value!r}")
    return _convert_one(action, value, fail)


def _convert_one(action: argparse.Action, value: Any, fail: Any) -> Any:
    if isinstance(value, bool) or value is None:
        raise fail(f"expected a value, got {value!r}")
    text = str(value)
    if action.type is None:
        return text
    try:
        return action.type(text)  # type: ignore[operator]
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise fail(str(exc) or f"invalid value {text!r}") from None


def apply(parser: argparse.ArgumentParser, path: str) -> None:
    """Make the values in the config file at ``path`` the defaults of ``parser``.

    Raises:
        ConfigError: see :func:`load_yaml`; or an unknown key or a bad value.
    """
    actions = _actions_by_flag(parser)
    defaults: dict[str, Any] = {}
    for raw_key, value in load_yaml(path).items():
        key = str(raw_key).lstrip("-").replace("-", "_")
        action = actions.get(key)
        if action is None or action.dest in _NOT_ALLOWED or action.help == argparse.SUPPRESS:
            raise ConfigError(f"config file {path!r}: unknown key {raw_key!r}; keys are horarun's "
                              "long flag names, e.g. fusion-threshold-mb")
        defaults[action.dest] = _convert(action, str(raw_key), value, path)
    parser.set_defaults(**defaults)
