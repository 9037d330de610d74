"""The purchase URL matched by its shape, before Werkzeug's general matcher.

Werkzeug matches a URL with a state machine written in Python that tries each rule's
parts in turn; for ``POST /api/products/<sku>/purchase`` that took 29 us a request on
the lab machine (timeit), against 13 us for the static ``/api/noop``, and in a served
``atomic`` purchase's profile it was 7% of the worker (docs/performance.md, session 7).
Every request of a sale is that one URL.

``HotRoute`` matches one rule of the form ``<prefix><name><suffix>`` (one argument,
the default converter: any non-empty text without ``/``) by its prefix and suffix,
and answers exactly what Werkzeug would: the rule and ``{name: value}``. Anything
else (another method, an empty or slashed value, doubled slashes that Werkzeug would
redirect, a WebSocket upgrade, subdomain or host matching) goes to Werkzeug as before,
so its 404, 405 and redirects are unchanged. ``tests/webapp/test_routing.py`` checks
both give the same answer over a table of odd paths.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.ctx import RequestContext
from flask.wrappers import Response
from werkzeug.routing import Map, MapAdapter, Rule
from werkzeug.routing.converters import UnicodeConverter


class HotRoute:
    """One rule matched by its prefix and suffix (see the module docstring)."""

    def __init__(self, rule: Rule, prefix: str, name: str, suffix: str) -> None:
        self.rule, self.prefix, self.name, self.suffix = rule, prefix, name, suffix
        self.methods = frozenset(rule.methods or ()) - {"OPTIONS", "HEAD"}
        self._shortest = len(prefix) + 1 + len(suffix)

    @classmethod
    def for_endpoint(cls, url_map: Map, endpoint: str) -> HotRoute | None:
        """The hot route of ``endpoint``, or None if its rule is not of a shape matched
        here (then Werkzeug matches it as any other)."""
        rules = [rule for rule in url_map.iter_rules() if rule.endpoint == endpoint]
        if len(rules) != 1 or url_map.host_matching:
            return None
        rule = rules[0]
        if (len(rule.arguments) != 1 or rule.defaults or rule.redirect_to is not None
                or rule.websocket or rule.subdomain or rule.rule.count("<") != 1):
            return None
        (name,) = rule.arguments
        converter = rule._converters[name]
        # the default converter without a minlength, maxlength or length: [^/]{1,}
        if type(converter) is not UnicodeConverter or converter.regex != "[^/]{1,}":
            return None
        prefix, _, rest = rule.rule.partition("<")
        suffix = rest.partition(">")[2]
        if "//" in rule.rule or not prefix.startswith("/"):
            return None
        return cls(rule, prefix, name, suffix)

    def match(self, adapter: MapAdapter, method: str) -> tuple[Rule, dict[str, Any]] | None:
        """``(rule, {name: value})`` as ``adapter.match(return_rule=True)`` would give
        it, or None: ask Werkzeug."""
        path = adapter.path_info
        if (method not in self.methods or adapter.websocket or adapter.subdomain != ""
                or len(path) < self._shortest or not path.startswith(self.prefix)
                or not path.endswith(self.suffix)):
            return None
        value = path[len(self.prefix):len(path) - len(self.suffix)]
        if "/" in value:
            return None
        return self.rule, {self.name: value}


class ShopRequestContext(RequestContext):
    """Flask's request context, matching the app's hot route first (Flask documents
    ``match_request`` as the hook for this)."""

    def match_request(self) -> None:
        route: HotRoute | None = getattr(self.app, "hot_route", None)
        if route is not None and self.url_adapter is not None:
            hot = route.match(self.url_adapter, self.request.method)
            if hot is not None:
                self.request.url_rule, self.request.view_args = hot
                return
        super().match_request()


class ShopFlask(Flask):
    """Flask with ``ShopRequestContext``; ``hot_route`` is set once the blueprints are
    registered (``create_app``)."""

    hot_route: HotRoute | None = None

    def request_context(self, environ: Any) -> RequestContext:
        return ShopRequestContext(self, environ)

    def make_default_options_response(self) -> Response:
        """``OPTIONS``: 200 with ``Allow`` and an empty body, not typed ``text/html``
        (Flask's default) on a JSON API."""
        response = super().make_default_options_response()
        del response.headers["Content-Type"]
        return response
