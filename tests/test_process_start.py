"""A process loads what it uses: commands and workers start without scikit-learn, SciPy and wordfreq (about half
of a start), and the web application loads them before its first request."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import process_env

ROOT = Path(__file__).resolve().parent.parent
REPORT = "print(sorted(m for m in ('sklearn', 'scipy', 'wordfreq') if m in sys.modules))"


@pytest.mark.django_db
def test_django_setup_loads_no_heavy_library_and_the_web_application_loads_them():
    code = f"import sys, django; django.setup(); {REPORT}; import config.wsgi; {REPORT}"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=process_env(DEBUG="1"), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["[]", "['scipy', 'sklearn', 'wordfreq']"]
