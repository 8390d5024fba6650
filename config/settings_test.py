"""Settings for the test suite: config.settings with safe test values for what production must set.

DEBUG stays off (tests see production behaviour); SECRET_KEY and ALLOWED_HOSTS get test-only values
(config.test_env) unless the environment gives them. pytest uses this module (pyproject's DJANGO_SETTINGS_MODULE).
"""

import config.test_env  # noqa: F401  (sets the environment config.settings reads)
from config.settings import *  # noqa: F403
