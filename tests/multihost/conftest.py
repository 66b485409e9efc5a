"""Fixtures of the multi-host tests: beds of 2 and 3 hosts (tests/multihost/testbed.py), made
once per session, and a fresh bed for a test that breaks its hosts. Every test that needs a bed is
skipped, with the reason, on a machine that cannot make network namespaces."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import testbed


def _bed(count: int, launcher_device: str = "eth0") -> Iterator[testbed.TestBed]:
    reason = testbed.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with testbed.testbed(count, launcher_device=launcher_device) as bed:
        yield bed
    assert testbed.leftovers(bed.tag) == [], "the bed left namespaces behind"


@pytest.fixture(scope="session")
def bed2() -> Iterator[testbed.TestBed]:
    """Two hosts, hostA and hostB, shared by the tests that leave them as they found them."""
    yield from _bed(2)


@pytest.fixture(scope="session")
def bed3() -> Iterator[testbed.TestBed]:
    """Three hosts, hostA to hostC."""
    yield from _bed(3)


@pytest.fixture
def fresh_bed2() -> Iterator[testbed.TestBed]:
    """Two hosts of the test's own, for a test that cuts links or leaves ranks behind."""
    yield from _bed(2)


@pytest.fixture
def fresh_bed3() -> Iterator[testbed.TestBed]:
    """Three hosts of the test's own."""
    yield from _bed(3)


@pytest.fixture
def fresh_bed3_hrbr0() -> Iterator[testbed.TestBed]:
    """Like ``fresh_bed2_hrbr0``, with three hosts."""
    yield from _bed(3, launcher_device="hrbr0")


@pytest.fixture
def fresh_bed2_hrbr0() -> Iterator[testbed.TestBed]:
    """Like ``fresh_bed2``, the launcher's interface named ``hrbr0`` (the hosts' is ``eth0``), so
    a name that only the launcher has shows up when it is handed to a host."""
    yield from _bed(2, launcher_device="hrbr0")
