"""Settings for the shop example: one PostgreSQL database for the app and for Runlane."""

import os
from urllib.parse import urlsplit

DATABASE_URL = os.environ.get("DATABASE_URL", "postgresql://localhost/shop")
_db = urlsplit(DATABASE_URL)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
ROOT_URLCONF = "shop.urls"
INSTALLED_APPS = ["orders"]
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3 when it is installed
        "NAME": _db.path.lstrip("/"),
        "USER": _db.username or "",
        "PASSWORD": _db.password or "",
        "HOST": _db.hostname or "",
        "PORT": _db.port or "",
    }
}

# Runlane keeps its tables in their own schema of the same database, so a run can be
# written in the same transaction as the order it belongs to.
RUNLANE_DATABASE_URL = DATABASE_URL
