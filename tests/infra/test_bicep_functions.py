"""The Function App's telemetry and doorbell wiring in infra/bicep (parsed, never deployed): the
settings current Python workers need for telemetry, and the identity-based doorbell queue."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.doorbell import CONNECTION, QUEUE_SETTING

from .conftest import MAIN_BICEP, is_ref, module_by_path, parse_bicep, resource_config, resources_of_type

QUEUE_SENDER = "c6a89b2d-59bc-44d0-9896-0f6e12d7b80a"  # Storage Queue Data Message Sender
QUEUE_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"  # Storage Queue Data Contributor


def app_settings() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    call, parsed = module_by_path("modules/functionapp.bicep")
    (site,) = resources_of_type(parsed, "Microsoft.Web/sites")
    settings = {i["name"]: i.get("value") for i in site["config"]["properties"]["siteConfig"]["appSettings"]}
    return call, parsed, settings


def test_settings_that_make_the_python_worker_export_telemetry() -> None:
    _, _, settings = app_settings()
    assert settings["PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY"] == "true"
    assert settings["PYTHON_ENABLE_OPENTELEMETRY"] == "true"
    assert is_ref(settings["APPLICATIONINSIGHTS_CONNECTION_STRING"])


def test_doorbell_connection_is_identity_based() -> None:
    call, parsed, settings = app_settings()
    assert settings[f"{CONNECTION}__credential"] == "managedidentity"
    uri = settings[f"{CONNECTION}__queueServiceUri"]
    assert is_ref(uri) and uri in parsed["parameters"]
    passed = json.dumps(call["config"]["params"][str(uri)])
    assert "storage" in passed and "queueEndpoint" in passed, passed
    _, storage = module_by_path("modules/storage.bicep")
    assert "queue" in json.dumps(storage["outputs"]["queueEndpoint"])
    # No key-based connection string for the doorbell anywhere.
    assert CONNECTION not in settings
    assert "AccountKey" not in json.dumps(settings)


def test_doorbell_is_off_by_default_and_the_queue_exists_when_on() -> None:
    call, parsed, settings = app_settings()
    queue_param = settings[QUEUE_SETTING]
    assert is_ref(queue_param) and parsed["parameters"][str(queue_param)]["default"] == ""
    main = parse_bicep(MAIN_BICEP)
    assert call["config"]["params"][str(queue_param)] == "doorbellQueueName"
    assert main["parameters"]["doorbellQueueName"]["default"] == ""
    doorbell_call, doorbell = module_by_path("modules/doorbell.bicep")
    condition = json.dumps(doorbell_call["condition"])
    assert '"not"' in condition and '"empty"' in condition and "doorbellQueueName" in condition
    assert doorbell_call["config"]["params"]["queueName"] == "doorbellQueueName"
    (queue,) = resources_of_type(doorbell, "Microsoft.Storage/storageAccounts/queueServices/queues")
    assert queue["config"]["name"] == "queueName"


def test_producers_may_only_send_and_the_function_may_process() -> None:
    _, doorbell = module_by_path("modules/doorbell.bicep")
    assert doorbell["variables"]["queueMessageSenderRoleId"]["value"] == QUEUE_SENDER
    (senders,) = resources_of_type(doorbell, "Microsoft.Authorization/roleAssignments")
    body = resource_config(senders)
    assert body["scope"] == "queue"  # this queue only, not the account
    assert "queueMessageSenderRoleId" in json.dumps(body["properties"]["roleDefinitionId"])
    # The Function App receives, deletes and poison-queues messages: Queue Data Contributor on the
    # account (which its host needs anyway), granted to its own identity.
    call, roles = module_by_path("modules/storage-roles.bicep")
    assert QUEUE_CONTRIBUTOR in roles["variables"]["roleIds"]["value"]
    assert "functionApp" in json.dumps(call["config"]["params"]["principalId"])


@pytest.mark.parametrize("value", ["", "chokaq-doorbell"])
def test_doorbell_values_pass_engine_validation(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from chokaq.settings import load_settings

    monkeypatch.setenv(QUEUE_SETTING, value)
    assert load_settings().functions.doorbell_queue == value
