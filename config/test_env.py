"""Safe test values for what production must set (imported by config.settings_test before config.settings)."""

import os

os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-0123456789abcdefghijklmnop")
os.environ.setdefault("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
