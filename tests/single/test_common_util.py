"""hora.common.util: the helpers Horovod's test files and user scripts import from
horovod.common.util (``env`` and the version comparison)."""

from __future__ import annotations

import os

import pytest
from hora.common.util import env, is_version_greater_equal_than


def test_env_sets_for_the_block_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HORA_TEST_UTIL_A", "before")
    monkeypatch.delenv("HORA_TEST_UTIL_B", raising=False)
    monkeypatch.setenv("HORA_TEST_UTIL_C", "kept")
    with env(HORA_TEST_UTIL_A="inside", HORA_TEST_UTIL_B="new", HORA_TEST_UTIL_C=None):
        assert os.environ["HORA_TEST_UTIL_A"] == "inside"
        assert os.environ["HORA_TEST_UTIL_B"] == "new"
        assert os.environ["HORA_TEST_UTIL_C"] == "kept"  # None: left alone
    assert os.environ["HORA_TEST_UTIL_A"] == "before"
    assert "HORA_TEST_UTIL_B" not in os.environ
    assert os.environ["HORA_TEST_UTIL_C"] == "kept"


def test_env_restores_after_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HORA_TEST_UTIL_D", raising=False)
    with pytest.raises(RuntimeError), env(HORA_TEST_UTIL_D="1"):
        raise RuntimeError("inside")
    assert "HORA_TEST_UTIL_D" not in os.environ


def test_version_comparison() -> None:
    assert is_version_greater_equal_than("2.21.0rc1", "2.21")
    assert not is_version_greater_equal_than("2.9", "2.10")
