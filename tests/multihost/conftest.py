"""Fixtures of the multi-host tests: beds of 2 and 3 hosts (tests/multihost/testbed.py), made
once per session, and a fresh bed for a test that breaks its hosts. Every test that needs a bed is
skipped, with the reason, on a machine that cannot make network namespaces."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import testbed


def _bed(count: int) -> Iterator[testbed.TestBed]:
    reason = testbed.unavailable()
    if reason is not None:
        pytest.skip(reason)
    with testbed.testbed(count) as bed:
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
