"""gunicorn settings for the storefront (``gunicorn -c webapp/gunicorn_conf.py``).

gevent workers: a purchase mostly waits (on Redis, on the lock, on the database), and
a greenlet per connection lets 1000 concurrent buyers wait on 2 cores; in our
measurements gevent served a trivial endpoint fastest on this machine. Two workers by
default, which is also what makes the ``local`` lock's failure visible: two processes,
two unrelated process-local locks.
"""

import os

wsgi_app = "webapp:create_app()"
bind = os.environ.get("SECKILL_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("SECKILL_WORKERS", "2"))
worker_class = "gevent"
worker_connections = int(os.environ.get("SECKILL_WORKER_CONNECTIONS", "1000"))  # per worker
backlog = 2048
timeout = 60
graceful_timeout = 5
keepalive = 5
loglevel = os.environ.get("SECKILL_LOG_LEVEL", "warning")
accesslog = None
errorlog = "-"
# no preload: each worker imports the app after gevent has patched it
preload_app = False
