# The seckill app image: the web app under gunicorn, and Locust for the showdown profile.
# Built by `docker compose build`; see docs/deployment.md for the stack around it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# A plain (non-editable) install of the app and its extras: every dependency
# (gevent, hiredis, psycopg[binary]) ships manylinux wheels, so no compiler is needed.
COPY pyproject.toml README.md ./
COPY lockcore ./lockcore
COPY webapp ./webapp
COPY loadtest ./loadtest
COPY migrations ./migrations
RUN pip install ".[zookeeper,loadtest]"

# Never run the app as root inside the container.
RUN useradd --create-home --uid 10001 seckill \
    && mkdir /reports && chown seckill /reports
USER seckill

# webapp/gunicorn_conf.py binds loopback by default; a container must listen on its
# own interface for nginx (or `docker run -p`) to reach it.
ENV SECKILL_BIND=0.0.0.0:8000
EXPOSE 8000
# The app's own gunicorn config (workers, gevent, bind) so `seckill serve` and the
# container run the same server settings; compose overrides the command per service.
CMD ["gunicorn", "--config", "python:webapp.gunicorn_conf", "webapp:create_app()"]
