"""The Celery broker on Redis: kombu's Redis transport with one Redis client per channel instead of one per
operation, and a task's messages published without kombu where kombu would only push them on a list
(docs/workers.md).

``Transport`` is kombu's own (same keys, messages, polling and acknowledgement: it shares queues with the stock one)
whose ``Channel`` keeps the ``redis.Redis`` client it makes for synchronous commands, where the stock one builds one
(~0.15 ms of CPU) per publish, acknowledgement and bookkeeping step. A client is safe to share between threads, and
the kept one is dropped whenever the channel's pool is replaced (after a fork, or a close), so it never outlives
its pool. Name it as Celery's ``broker_transport`` with a ``redis://`` broker URL.

``direct_publisher(app, task, queue)`` gives a ``DirectPublisher`` when the broker is one ``redis://`` URL on
kombu's Redis transport (stock or this one) and Celery would add nothing but the message (JSON, protocol 2, no
routes, compression, priorities or queue arguments); its ``publish`` writes the message as Celery's protocol 2 and
kombu's Redis transport do, byte for byte but the delivery tag, and pushes it from the running event loop with its
asyncio client (``redis_pool.redis_client``): one ``LPUSH``, no producer, no thread. A stock Celery worker consumes
it like any other. Any other broker or configuration: ``None``, and Celery's own ``apply_async``.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import Any

from celery import signals
from celery.app.task import extract_exec_options
from celery.utils.nodenames import anon_nodename
from kombu.entity import DELIVERY_MODES
from kombu.transport import redis as kombu_redis
from kombu.utils import json

from .redis_pool import redis_client


class Channel(kombu_redis.Channel):
    """kombu's Redis channel, keeping its synchronous client (see the module docstring)."""

    _kept_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        kept = self._kept_client
        if kept is None or kept.connection_pool is not self.pool:
            kept = self._kept_client = super()._create_client()
        return kept

    def _disconnect_pools(self) -> None:
        self._kept_client = None
        super()._disconnect_pools()


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel


#: The transport options that leave a message's key and encoding as kombu's defaults make them.
_PLAIN_OPTIONS = frozenset(
    {
        "visibility_timeout",
        "max_connections",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "health_check_interval",
        "retry_on_timeout",
        "unacked_restore_limit",
        "unacked_restore_interval",
        "unacked_restore_throttle",
        "polling_interval",
    }
)


@dataclass(frozen=True)
class DirectPublisher:
    """Publishes a Celery task's messages on a Redis broker without kombu: the message written once, as Celery's
    protocol 2 and kombu's Redis transport would write it (JSON body in base64, the envelope as JSON), and pushed
    with the running event loop's asyncio client on the list a worker pops (one ``LPUSH``). Made by
    ``direct_publisher`` only where that is all kombu would do (see there)."""

    app: Any
    url: str
    task: str
    queue: Any  # kombu ``Queue``: a direct exchange, so Celery publishes on the anonymous exchange to its name
    ignore_result: bool
    time_limit: tuple[float | None, float | None]
    delivery_mode: int

    def message(
        self, task_id: str, args: list[Any], argsrepr: str, kwargsrepr: str = "{}"
    ) -> tuple[dict[str, Any], dict[str, Any], tuple[Any, ...]]:
        """The headers, properties and body ``celery.app.amqp.AMQP.as_task_v2`` makes for this call (no ETA,
        expiry, parent, group, link or stamp), as ``send_task`` fills them."""
        headers = {
            "lang": "py",
            "task": self.task,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": list(self.time_limit),
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": argsrepr,
            "kwargsrepr": kwargsrepr,
            "origin": anon_nodename(),
            "ignore_result": self.ignore_result,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        }
        properties = {
            "correlation_id": task_id,
            "reply_to": self.app.thread_oid,
            "argsrepr": argsrepr,
            "kwargsrepr": kwargsrepr,
        }
        body: tuple[Any, ...] = (args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
        return headers, properties, body

    def encode(self, headers: dict[str, Any], properties: dict[str, Any], body: tuple[Any, ...]) -> str:
        """What kombu's Redis transport pushes for it (``Producer.publish``, ``Channel.prepare_message``,
        ``basic_publish``, ``_put``): priority 0, so the queue's own list."""
        envelope = {
            "body": base64.b64encode(json.dumps(body).encode("utf-8")).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                **properties,
                "delivery_mode": self.delivery_mode,
                "delivery_info": {"exchange": "", "routing_key": self.queue.name},
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": str(uuid.uuid4()),
            },
        }
        return json.dumps(envelope)

    async def publish(self, task_id: str, args: list[Any], argsrepr: str) -> None:
        """Publish one message of the task (Celery's ``before_task_publish`` and ``after_task_publish`` signals sent
        around it as Celery sends them, when anything listens: tracing puts its context in the headers)."""
        headers, properties, body = self.message(task_id, args, argsrepr)
        route = {"exchange": "", "routing_key": self.queue.name}
        if signals.before_task_publish.receivers:
            signals.before_task_publish.send(
                sender=self.task,
                body=body,
                declare=[self.queue],
                headers=headers,
                properties=properties,
                retry_policy=dict(self.app.conf.task_publish_retry_policy),
                **route,
            )
        await redis_client(self.url).lpush(self.queue.name, self.encode(headers, properties, body))
        if signals.after_task_publish.receivers:
            signals.after_task_publish.send(sender=self.task, body=body, headers=headers, **route)


_publishers: dict[tuple[Any, str], DirectPublisher | None] = {}


def direct_publisher(app: Any, task: Any, queue: str) -> DirectPublisher | None:
    """A ``DirectPublisher`` of ``task`` (to ``queue``, ``""``: Celery's default) on ``app``'s broker, or ``None``
    when kombu would do more than push the message on a list: a broker other than one ``redis://`` URL on kombu's
    Redis transport (this one included; not Sentinel), transport options that change keys or encoding (a key
    prefix, priority steps, another body encoding), a serializer other than JSON, compression, a protocol other
    than 2, routes (``task_routes``), a queue on an exchange other than a direct one or with arguments (expiry),
    priorities, task-sent events, or ``task_sent`` receivers. Decided once per app and queue (Celery reads its
    configuration once too)."""
    key = (app, queue)
    if key not in _publishers:
        _publishers[key] = _decide(app, task, queue)
    return _publishers[key]


def _decide(app: Any, task: Any, queue: str) -> DirectPublisher | None:
    conf = app.conf
    url = str(conf.broker_write_url or conf.broker_url or "")
    options = dict(conf.broker_transport_options or {})
    # The task's own publishing options (queue, priority, compression, …): none but its time limits and JSON.
    exec_options = extract_exec_options(task)
    if exec_options.pop("serializer") not in (None, "json") or any(
        value is not None for name, value in exec_options.items() if name not in ("time_limit", "soft_time_limit")
    ):
        return None
    if (
        not url.startswith("redis://")
        or ";" in url
        or conf.broker_use_ssl
        or not set(options) <= _PLAIN_OPTIONS
        or conf.task_protocol != 2
        or conf.task_serializer != "json"
        or conf.task_compression
        or conf.task_routes
        or conf.task_send_sent_event
        or conf.task_default_priority is not None
        or signals.task_sent.receivers
    ):
        return None
    with app.connection_for_write() as connection:
        transport = connection.get_transport_cls()
    if not issubclass(transport, kombu_redis.Transport) or issubclass(transport, kombu_redis.SentinelTransport):
        return None
    routed = app.amqp.router.route({"queue": queue} if queue else {}, task.name, (), {}, task)
    destination = routed.pop("queue", None)
    if routed or destination is None:
        return None
    exchange = destination.exchange
    if (
        (exchange is not None and exchange.type != "direct")
        or destination.queue_arguments
        or destination.expires is not None
        or destination.message_ttl is not None
        or destination.max_priority is not None
    ):
        return None
    mode = (exchange.delivery_mode if exchange is not None else None) or conf.task_default_delivery_mode
    return DirectPublisher(
        app=app,
        url=url,
        task=task.name,
        queue=destination,
        ignore_result=bool(task.ignore_result),
        time_limit=(exec_options["time_limit"], exec_options["soft_time_limit"]),
        delivery_mode=int(DELIVERY_MODES.get(mode) or mode),
    )
