"""ASGI entry point: Django, with the MCP server's streamable HTTP endpoint at /mcp on the same host and port.

    uvicorn config.asgi:application --host 127.0.0.1 --port 8000 --lifespan on

See mcp_server.asgi and docs/mcp.md.
"""

import os

from django.core.asgi import get_asgi_application
from django.utils.module_loading import import_string

from common.gateway import asgi_guard

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A web process sees no tenant until a request names one (an agent key, a reviewer's session or token).
os.environ.setdefault("DB_TENANT_DEFAULT", "none")
django_application = get_asgi_application()  # sets Django up: the apps and their models are loaded from here on
# mcp_server imports models, so it is loaded once they are, by name (as Django loads ROOT_URLCONF or MIDDLEWARE).
# the guard answers 400 for a charset Django would fail on before its own handlers (common/gateway.py)
application = asgi_guard(import_string("mcp_server.asgi.with_mcp")(django_application))
import_string("learning.preload.preload")()  # what ranking needs, loaded before the first request
