"""How long the generated runs are: the Hypothesis profile of this run (HYPOTHESIS_PROFILE).

- `default` (a contributor's `make test`): every property test runs, the long agreement runs at 100
  derandomized cases (the same 100 on every run), so that the whole suite stays within minutes.
- `ci` (one half of `.ci/run`): the same tests at full strength, the agreement runs at 500 cases.

Nothing is skipped under either profile; the run's header names the profile and the case counts
(tests/conftest.py `pytest_report_header`). A test's own environment variable (e.g.
CONSOLE_AGREEMENT_EXAMPLES) still overrides both.
"""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILES = ("default", "ci")
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
if PROFILE not in PROFILES:
    raise RuntimeError(f"HYPOTHESIS_PROFILE={PROFILE!r}: the profiles are {', '.join(PROFILES)}")

# Both profiles: no deadline (a shared 2-core machine makes one example's time meaningless), no example
# database (a run judges the code, not what an earlier run happened to find).
for _name in PROFILES:
    settings.register_profile(_name, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(PROFILE)


def examples(*, ci: int, default: int, env: str | None = None) -> int:
    """The number of generated cases for a long property test under this run's profile; `env` names a
    variable that overrides it."""
    if env and os.environ.get(env):
        return int(os.environ[env])
    return ci if PROFILE == "ci" else default
