"""ballast.topics: missing topics are created with the partition count and configs asked for, the
ones that exist are left alone, a creator racing another is fine, and the admin client is always
closed; a chain operator's hand-off topic is named after its job and operator. Fast: a stand-in
admin client instead of a broker (tests/spark_jobs/test_inputs.py creates real ones)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import TopicAlreadyExistsError

from ballast.topics import create_missing_topics, handoff_topic

pytestmark = pytest.mark.controlplane


class FakeAdmin:
    """What create_missing_topics uses of kafka-python's KafkaAdminClient, recording the calls."""

    instances: list[FakeAdmin] = []
    waited: list[Any] = []  # wait_writable's calls: (bootstrap, topics, timeout_s)
    existing: set[str] = set()
    raise_on_create: BaseException | None = None

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.created: list[Any] = []
        self.closed = False
        FakeAdmin.instances.append(self)

    def list_topics(self) -> list[str]:
        return sorted(self.existing)

    def create_topics(self, new: list[Any]) -> None:
        self.created += new
        if self.raise_on_create is not None:
            raise self.raise_on_create

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> type[FakeAdmin]:
    import kafka

    import ballast.topics

    monkeypatch.setattr(kafka, "KafkaAdminClient", FakeAdmin)
    monkeypatch.setattr(ballast.topics, "wait_writable", lambda bootstrap, topics, timeout_s, security: (
        FakeAdmin.waited.append((bootstrap, topics, timeout_s))))
    FakeAdmin.instances, FakeAdmin.existing, FakeAdmin.raise_on_create, FakeAdmin.waited = [], set(), None, []
    return FakeAdmin


def test_only_missing_topics_are_created_with_their_partitions_and_configs(admin: type[FakeAdmin]) -> None:
    admin.existing = {"j.control"}
    create_missing_topics("h:9092", {"j.control": 1, "j.in": 4, "j.out": 2}, timeout_ms=1234,
                          configs={"j.in": {"max.message.bytes": "2097152"}})
    [a] = admin.instances
    assert a.kwargs["bootstrap_servers"] == "h:9092" and a.kwargs["request_timeout_ms"] == 1234
    made = {t.name: (t.num_partitions, t.replication_factor, t.topic_configs) for t in a.created}
    assert made == {"j.in": (4, 1, {"max.message.bytes": "2097152"}), "j.out": (2, 1, {})}
    assert a.closed
    assert admin.waited == [("h:9092", {"j.in": 4, "j.out": 2}, 1.234)], "it returns once the new topics take writes"


def test_nothing_is_created_when_every_topic_exists(admin: type[FakeAdmin]) -> None:
    admin.existing = {"a", "b"}
    create_missing_topics("h:9092", {"a": 1, "b": 3})
    assert admin.instances[0].created == [] and admin.instances[0].closed
    assert admin.waited == [], "an existing topic is not waited for"


def test_a_topic_another_creator_made_first_is_fine(admin: type[FakeAdmin]) -> None:
    admin.raise_on_create = TopicAlreadyExistsError()
    create_missing_topics("h:9092", {"a": 1})
    assert admin.instances[0].closed


def test_any_other_failure_is_raised_and_the_client_still_closed(admin: type[FakeAdmin]) -> None:
    admin.raise_on_create = RuntimeError("broker said no")
    with pytest.raises(RuntimeError, match="broker said no"):
        create_missing_topics("h:9092", {"a": 1})
    assert admin.instances[0].closed


def test_handoff_topic_is_named_after_job_and_operator() -> None:
    assert handoff_topic("clicks", "split") == "clicks.split.out"
    assert handoff_topic("clicks", "split") != handoff_topic("clicks", "counts")


def test_job_topics_are_the_names_both_planes_use():
    from ballast.protocol import acks_topic, control_topic, signals_topic
    from ballast.topics import job_topics
    from spark_jobs.output import dlq_topic, output_topic

    assert job_topics("clicks", ["a", "b"]) == [
        ("reads", "a"), ("reads", "b"), ("writes", output_topic("clicks")), ("dead letters", dlq_topic("clicks")),
        ("control", control_topic("clicks")), ("acks", acks_topic("clicks")), ("signals", signals_topic("clicks"))]
