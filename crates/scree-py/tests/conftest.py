"""Shared pytest setup: Hypothesis profiles and a database fixture.

Profiles: ``ci`` (bounded, what ``.ci/run`` uses: the whole Python suite within its budget on
2 cores), ``dev`` (the default) and ``long`` (for a deeper search by hand:
``HYPOTHESIS_PROFILE=long pytest crates/scree-py/tests``).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import scree

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    max_examples=50,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=1000,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# The layouts the tests run on: every layout the engine implements, `semisorted` with a 2-byte
# prefix (keys must be at least that long).
LAYOUTS = [("semisorted:2" if l == "semisorted:N" else l) for l in scree.LAYOUTS]
SORTED = {"leveled", "fragmented", "lightweight"}


def small(**kw):
    """Database options for tests: few threads, a small cache."""
    opts = dict(background_threads=1, block_cache_bytes=1 << 20)
    opts.update(kw)
    return opts


@pytest.fixture
def db(tmp_path):
    d = scree.open(tmp_path / "db", **small())
    yield d
    d.close()
