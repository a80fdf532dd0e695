"""EventBus.publish_many: one hand-off for a batch, the same events a publish each would give."""

from __future__ import annotations

import asyncio

from chokaq.runtime.events import EventBus


def test_subscribers_see_each_event_in_order_and_the_history_keeps_them() -> None:
    async def scenario() -> tuple[list[dict[str, object]], int]:
        bus = EventBus()
        queue = bus.subscribe()
        bus.publish_many("job.archived", [{"id": "a"}, {"id": "b"}])
        bus.publish_many("job.archived", [])  # nothing to say: no event
        bus.publish("job.failed", id="c")
        seen = [(await queue.get()).as_dict() for _ in range(3)]
        return [{k: e[k] for k in ("kind", "id")} for e in seen], len(bus.recent)

    seen, recent = asyncio.run(scenario())
    assert seen == [
        {"kind": "job.archived", "id": "a"},
        {"kind": "job.archived", "id": "b"},
        {"kind": "job.failed", "id": "c"},
    ]
    assert recent == 3
