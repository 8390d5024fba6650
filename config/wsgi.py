import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A web process sees no tenant until a request names one (an agent key, a reviewer's session or token).
os.environ.setdefault("DB_TENANT_DEFAULT", "none")
application = get_wsgi_application()
