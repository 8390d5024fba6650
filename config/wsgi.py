import os

from django.core.wsgi import get_wsgi_application
from django.utils.module_loading import import_string

from common.gateway import wsgi_guard

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A web process sees no tenant until a request names one (an agent key, a reviewer's session or token).
os.environ.setdefault("DB_TENANT_DEFAULT", "none")
# the guard answers 400 for a charset Django would fail on before its own handlers (common/gateway.py)
application = wsgi_guard(get_wsgi_application())
import_string("learning.preload.preload")()  # what ranking needs, loaded before the first request
