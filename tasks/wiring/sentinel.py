"""``redis+sentinel://`` (``boundary.store.sentinel``) in the forms kombu and Celery read.

kombu's broker and Celery's result backend both take ``sentinel://host:port/db`` chunks joined
by ``;`` and the master's name as the transport option ``master_name``
(``broker_transport_options``, ``result_backend_transport_options``). The password in each
chunk is the master's, as in ours.

TLS (the ``redis+sentinel://`` URL's ``ssl_*`` query): the Sentinels' connections take it from
the transport option ``sentinel_kwargs`` (kombu and Celery both hand it to redis-py's
``Sentinel``); the master's and replicas' connections from ``broker_use_ssl`` and
``redis_backend_use_ssl`` (``tasks.wiring.redis_access``), which make kombu and Celery use
redis-py's ``SentinelManagedSSLConnection``. The chunks themselves carry no query: Celery would
read one as a plain ``SSLConnection`` that no longer follows the Sentinels.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from boundary.store.sentinel import is_sentinel_url, parse_sentinel_url


def celery_url(url: str) -> tuple[str, dict[str, Any]]:
    """``url`` as kombu and Celery want it, with the transport options it needs (none for a
    URL that is not ``redis+sentinel://``)."""
    if not is_sentinel_url(url):
        return url, {}
    address = parse_sentinel_url(url)
    auth = ""
    if address.password is not None:
        auth = f"{quote(address.username or '', safe='')}:{quote(address.password, safe='')}@"
    chunks = [f"sentinel://{auth}{host}:{port}/{address.db}" for host, port in address.sentinels]
    options: dict[str, Any] = {"master_name": address.service}
    if address.uses_tls:
        options["sentinel_kwargs"] = address.tls_kwargs()
    return ";".join(chunks), options
