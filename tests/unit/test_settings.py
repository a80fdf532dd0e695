from __future__ import annotations

import pytest

from chokaq.domain.errors import ConfigurationError
from chokaq.settings import load_settings, setting_env_names


def test_defaults_follow_the_original(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in setting_env_names():
        monkeypatch.delenv(name, raising=False)
    s = load_settings()
    assert s.storage_url == "sqlite:///./chokaq.db"
    assert (s.execution.heartbeat_interval_min, s.execution.heartbeat_interval_max) == (8.0, 12.0)
    assert s.execution.heartbeat_failure_threshold == 10
    assert s.execution.cancel_on_heartbeat_failure is False
    assert s.execution.default_timeout == 900
    assert (s.retry.max_attempts, s.retry.base_delay, s.retry.backoff_multiplier) == (3, 3.0, 2.0)
    assert (s.retry.max_delay, s.retry.jitter_max_delay, s.retry.max_job_age) == (3600, 1.0, 86400)
    assert (s.recovery.scan_interval, s.recovery.fetched_job_timeout, s.recovery.processing_zombie_timeout) == (
        60,
        600,
        600,
    )
    assert (s.execution.prefetch, s.execution.fetch_batch_size, s.execution.concurrency) == (100, 20, 10)
    assert s.storage.cleanup_batch_size == 1000


def test_nested_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT", "900")
    monkeypatch.setenv("CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN", "2")
    monkeypatch.setenv("CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX", "3")
    monkeypatch.setenv("CHOKAQ_QUEUES__REPORTS__ZOMBIE_TIMEOUT_SECONDS", "1800")
    s = load_settings()
    assert s.recovery.processing_zombie_timeout == 900
    assert s.execution.heartbeat_interval_max == 3
    assert s.queues["reports"].zombie_timeout_seconds == 1800


def test_legacy_flat_aliases_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHOKAQ_ZOMBIE_TIMEOUT_SECONDS", "1200")
    monkeypatch.setenv("CHOKAQ_FETCHED_JOB_TIMEOUT_SECONDS", "30")
    s = load_settings()
    assert s.recovery.processing_zombie_timeout == 1200
    assert s.recovery.fetched_job_timeout == 30
    # The nested name wins over the alias.
    monkeypatch.setenv("CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT", "700")
    assert load_settings().recovery.processing_zombie_timeout == 700


def test_zombie_timeout_must_be_well_above_the_heartbeat() -> None:
    with pytest.raises(ConfigurationError, match=r"ProcessingZombieTimeout.*3x Execution.HeartbeatIntervalMax"):
        load_settings(recovery={"processing_zombie_timeout": 30})
    with pytest.raises(ConfigurationError, match=r"Queues\.sms\.ZombieTimeoutSeconds"):
        load_settings(queues={"sms": {"zombie_timeout_seconds": 20}})
    assert load_settings(recovery={"processing_zombie_timeout": 36}).recovery.processing_zombie_timeout == 36


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"execution": {"heartbeat_interval_min": 20, "heartbeat_interval_max": 10}}, "HeartbeatIntervalMin"),
        ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
        ({"execution": {"fetch_batch_size": 500, "prefetch": 100}}, "FetchBatchSize"),
        ({"retry": {"base_delay": 10, "max_delay": 5}}, "BaseDelay"),
    ],
)
def test_invalid_settings_refuse_to_start(overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        load_settings(**overrides)


def test_env_names_cover_nested_and_legacy() -> None:
    names = setting_env_names()
    for expected in (
        "CHOKAQ_STORAGE_URL",
        "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT",
        "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN",
        "CHOKAQ_ZOMBIE_TIMEOUT_SECONDS",
        "CHOKAQ_SWEEP_SCHEDULE",
        "CHOKAQ_ADMIN__TOKENS",
    ):
        assert expected in names


def test_dlq_retention_is_off_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHOKAQ_RETENTION__DLQ_DAYS", raising=False)
    assert load_settings().retention.dlq_days is None
    monkeypatch.setenv("CHOKAQ_RETENTION__DLQ_DAYS", "")  # an app setting left empty
    assert load_settings().retention.dlq_days is None
    monkeypatch.setenv("CHOKAQ_RETENTION__DLQ_DAYS", "7")
    assert load_settings().retention.dlq_days == 7.0
    for bad in ("0", "-1", "a week"):
        monkeypatch.setenv("CHOKAQ_RETENTION__DLQ_DAYS", bad)
        with pytest.raises(ConfigurationError, match=r"retention\.dlq_days"):
            load_settings()
