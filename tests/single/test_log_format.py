"""The engine's log lines: `[<date> <time> hora LEVEL rank R] message` on stderr, and without the
timestamp under HORA_LOG_HIDE_TIME=1 (horarun --log-without-timestamp)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

STAMPED = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d hora DEBUG rank 0\] background loop started")
BARE = re.compile(r"^\[hora DEBUG rank 0\] background loop started")


def _log_of_one_rank(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "HOROVOD_"))}
    done = subprocess.run([sys.executable, "-c", "import hora; hora.init(); hora.shutdown()"],
                          env={**clean, "HORA_LOG_LEVEL": "debug", **env}, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stderr


@pytest.mark.parametrize("hide, pattern", [(None, STAMPED), ("0", STAMPED), ("1", BARE)])
def test_log_lines_carry_a_timestamp_unless_asked_not_to(hide: str | None,
                                                         pattern: re.Pattern[str]) -> None:
    log = _log_of_one_rank(**({"HORA_LOG_HIDE_TIME": hide} if hide is not None else {}))
    assert any(pattern.match(line) for line in log.splitlines()), log


def test_horovods_name_for_the_setting_works_too() -> None:
    log = _log_of_one_rank(HOROVOD_LOG_HIDE_TIME="1")
    assert any(BARE.match(line) for line in log.splitlines()), log
