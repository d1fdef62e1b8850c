"""``mcp_app.broker.Transport`` on a real Redis: kombu's Redis transport (publish, deliver, acknowledge late,
requeue on reject, interchangeable with the stock transport both ways) that builds no Redis client per operation,
and drops its kept client with the pool it belongs to (after a fork)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from tests.conftest import require_redis

pytestmark = pytest.mark.services

WAIT = 5.0
FAST = "mcp_app.broker:Transport"
STOCK = "redis"


def _url() -> str:
    return require_redis()


@pytest.fixture
def queue() -> Iterator[Queue]:
    """A queue of the test's own; its keys are deleted afterwards."""
    url = _url()
    name = f"brokertest-{uuid.uuid4().hex[:8]}"
    yield Queue(name, Exchange(name, type="direct"), routing_key=name)
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(f"*{name}*"))
    if keys:
        client.delete(*keys)
    client.close()


def _connection(transport: str) -> Connection:
    return Connection(_url(), transport=transport)


def _publish(connection: Connection, queue: Queue, body: dict[str, Any], *, retry: bool = False) -> None:
    producer = Producer(connection.default_channel)
    producer.publish(
        body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue], serializer="json", retry=retry
    )


def _take(connection: Connection, queue: Queue, count: int, *, ack: bool = True, channel: Any = None) -> list[Any]:
    """``count`` messages delivered from ``queue`` (bounded wait) on ``channel`` (default: a new one), acknowledged
    (or rejected back with ``ack=False``)."""
    received: list[Any] = []

    def on_message(body: Any, message: Any) -> None:
        received.append(body)
        if ack:
            message.ack()
        else:
            message.reject(requeue=True)

    with Consumer(channel or connection.channel(), queues=[queue], callbacks=[on_message], accept=["json"]):
        while len(received) < count:
            connection.drain_events(timeout=WAIT)
    return received


class _Clients:
    """Counts the ``redis.Redis`` clients built (kombu's stock channel builds one per synchronous operation)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.built = 0
        original = redis.Redis.__init__

        def counted(this: Any, *args: Any, **kwargs: Any) -> None:
            self.built += 1
            original(this, *args, **kwargs)

        monkeypatch.setattr(redis.Redis, "__init__", counted)


def test_it_publishes_delivers_and_acknowledges_without_a_client_per_operation(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _connection(FAST) as connection:
        assert type(connection.transport).__module__ == "mcp_app.broker"
        consuming = connection.channel()
        _publish(connection, queue, {"n": 0})
        assert _take(connection, queue, 1, channel=consuming) == [{"n": 0}]  # warm: pools and kept clients exist
        clients = _Clients(monkeypatch)
        for n in range(1, 6):
            _publish(connection, queue, {"n": n})
        assert _take(connection, queue, 5, channel=consuming) == [{"n": n} for n in range(1, 6)]
        # The stock channel builds a client for each of 5 publishes, 5 deliveries (the unacknowledged index) and
        # 5 acknowledgements.
        assert clients.built == 0
    with _connection(STOCK) as connection:
        stock = _Clients(monkeypatch)
        for n in range(3):
            _publish(connection, queue, {"n": n})
        assert stock.built >= 3  # the measure itself: the stock transport builds one per publish
        _take(connection, queue, 3)


def test_a_rejected_message_comes_back_and_nothing_stays_unacknowledged(queue: Queue) -> None:
    with _connection(FAST) as connection:
        _publish(connection, queue, {"n": 1})
        assert _take(connection, queue, 1, ack=False) == [{"n": 1}]
        assert _take(connection, queue, 1) == [{"n": 1}]
        client = redis.Redis.from_url(_url())
        try:  # kombu's index of delivered, unacknowledged messages holds nothing of this queue
            assert [entry for entry in client.hvals("unacked") if queue.name.encode() in entry] == []
        finally:
            client.close()


@pytest.mark.parametrize(("producer", "consumer"), [(STOCK, FAST), (FAST, STOCK)])
def test_it_shares_queues_with_the_stock_transport(queue: Queue, producer: str, consumer: str) -> None:
    with _connection(producer) as publishing, _connection(consumer) as consuming:
        for n in range(3):
            _publish(publishing, queue, {"n": n, "from": producer})
        assert _take(consuming, queue, 3) == [{"n": n, "from": producer} for n in range(3)]


def test_the_kept_client_goes_with_its_pool(queue: Queue) -> None:
    with _connection(FAST) as connection:
        channel = connection.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        channel._after_fork()  # what kombu does in a forked child: the parent's connections are not used there
        second = channel._create_client()
        assert second is not first and second.connection_pool is channel.pool
        _publish(connection, queue, {"n": 1})
        assert _take(connection, queue, 1) == [{"n": 1}]


def test_a_kept_client_publishes_again_once_redis_is_back(tmp_path: Any) -> None:
    """Redis restarted (a private redis-server: all its keys gone) under a channel that kept its client: once a
    consumer has declared its queue again (as Celery's worker does when it reconnects), the next publish, retried
    as Celery retries it, reconnects through the kept client's pool and is delivered."""
    from tests.e2e.conftest import OwnRedis

    server = OwnRedis(tmp_path)
    server.start()
    name = f"brokertest-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    try:
        with Connection(server.url, transport=FAST) as connection:
            _publish(connection, queue, {"n": 1})
            assert _take(connection, queue, 1) == [{"n": 1}]
            kept = connection.default_channel._create_client()
            server.stop()
            server.start()
            with Connection(server.url, transport=FAST) as consuming:
                queue(consuming.default_channel).declare()
                _publish(connection, queue, {"n": 2}, retry=True)
                assert connection.default_channel._create_client() is kept
                assert _take(consuming, queue, 1) == [{"n": 2}]
    finally:
        server.stop()


def test_the_reference_deployment_dispatches_through_it() -> None:
    _url()
    from mcp_app.broker import Transport
    from mcp_host.celery import app

    with app.connection_for_write() as connection:
        assert type(connection.transport) is Transport


# A task's messages published without kombu (``DirectPublisher``) ------------------------------------------------


def _message_of(queue: str) -> dict[str, Any]:
    """The one message on ``queue``'s list, as kombu's Redis transport reads it back."""
    import json

    client = redis.Redis.from_url(_url())
    try:
        raw = client.lrange(queue, 0, -1)
        client.delete(queue)
    finally:
        client.close()
    assert len(raw) == 1
    message: dict[str, Any] = json.loads(raw[0])
    return message


@pytest.mark.parametrize("task_name", ["mcp_app.run_tool_call", "celery.accumulate"])
def test_a_direct_message_is_the_one_celery_publishes(queue: Queue, task_name: str) -> None:
    """Key for key and value for value but the delivery tag (a new uuid per message), against what Celery's own
    ``apply_async`` pushes through kombu's Redis transport for the same call, in the same thread."""
    import asyncio

    from mcp_app.broker import direct_publisher
    from mcp_host.celery import app

    task = app.tasks[task_name]
    args = [None, {"call": {"arguments": {"text": "é", "n": 1.5}}, "version": 3}]
    publisher = direct_publisher(app, task, queue.name)
    assert publisher is not None

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        # Celery's publish from this loop's thread, as the direct one: the same ``origin`` and ``reply_to``.
        task.apply_async(args=args, task_id="t-1", argsrepr="(None, <call>)", kwargsrepr="{}", queue=queue.name)
        celerys = _message_of(queue.name)
        await publisher.publish("t-1", args, "(None, <call>)")
        return celerys, _message_of(queue.name)

    celerys, direct = asyncio.run(both())
    assert celerys["properties"].pop("delivery_tag") != direct["properties"].pop("delivery_tag")
    assert direct == celerys


def test_a_direct_message_is_consumed_by_a_real_celery_worker(
    queue: Queue, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A stock Celery worker (the reference deployment's, on the queue of the test) runs the task of a message
    published directly and stores its result, as for one Celery published."""
    import asyncio

    from mcp_app.broker import direct_publisher
    from mcp_host.celery import app
    from tests.e2e.workers import running_worker

    noop = app.tasks["celery.accumulate"]
    publisher = direct_publisher(app, noop, queue.name)
    assert publisher is not None
    task_id = str(uuid.uuid4())
    with running_worker(tmp_path_factory, concurrency=1, queue=queue.name, pool="threads"):
        asyncio.run(publisher.publish(task_id, [1, "two"], "(1, 'two')"))
        assert app.AsyncResult(task_id).get(timeout=WAIT * 4) == [1, "two"]


@pytest.mark.parametrize(
    "changed",
    [
        {"broker_url": "memory://"},
        {"broker_url": "amqp://guest@127.0.0.1//"},
        {"broker_transport_options": {"global_keyprefix": "x:"}},
        {"broker_transport_options": {"priority_steps": [0, 5]}},
        {"task_compression": "gzip"},
        {"task_serializer": "pickle"},
        {"task_protocol": 1},
        {"task_routes": {"celery.accumulate": {"queue": "elsewhere"}}},
        {"task_default_priority": 5},
        {"task_send_sent_event": True},
        {"task_queues": [Queue("expiring", Exchange("expiring"), routing_key="expiring", expires=60)]},
        {"task_queues": [Queue("topical", Exchange("topical", type="topic"), routing_key="topical")]},
    ],
    ids=lambda changed: ",".join(f"{key}={value}" for key, value in changed.items()),
)
def test_any_other_broker_or_configuration_takes_celerys_path(changed: dict[str, Any]) -> None:
    """Where kombu or Celery would do more than push the message on a list, no ``DirectPublisher``."""
    from celery import Celery

    from mcp_app.broker import direct_publisher

    url = _url()
    base = {"broker_url": url, "broker_transport": FAST, "result_backend": url}
    plain = Celery("direct-plain", set_as_current=False)
    plain.conf.update(base)
    assert direct_publisher(plain, plain.tasks["celery.accumulate"], "q") is not None
    app = Celery("direct-changed", set_as_current=False)
    app.conf.update({**base, "broker_transport": None, **changed} if "broker_url" in changed else {**base, **changed})
    queue = next(iter(changed["task_queues"])).name if "task_queues" in changed else "q"
    assert direct_publisher(app, app.tasks["celery.accumulate"], queue) is None
