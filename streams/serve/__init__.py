"""``solaris serve``: the feature reader over HTTP (JSON and a compact binary form).

:mod:`streams.serve.protocol` parses requests and encodes answers (pure),
:mod:`streams.serve.openapi` is the OpenAPI document, :mod:`streams.serve.server` the aiohttp
application. See docs/feature-server.md.
"""
