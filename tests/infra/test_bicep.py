"""Structure checks of infra/bicep: parsed with pycep-parser, never compiled or deployed."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy.dialects.mssql.pyodbc import MSDialect_pyodbc
from sqlalchemy.engine import make_url

from chokaq.settings import ExecutionSettings

from .conftest import (
    BICEP_DIR,
    GRANT_SQL,
    MAIN_BICEP,
    MODULES_DIR,
    PARAMETERS_JSON,
    all_bicep_files,
    app_option_value,
    identifier_uses,
    is_ref,
    module_by_path,
    module_calls,
    parse_bicep,
    parse_with_real_cli,
    resolve_param_default,
    resource_config,
    resources_of_type,
)

# The KEDA mssql scaler query. infra/bicep/modules/worker.bicep must use exactly this text; its
# SQLite/PostgreSQL twin runs in tests/infra/test_scaler_query.py. Due Pending jobs plus the
# Fetched and Processing ones, so replicas are not stopped while they run a claimed backlog.
SCALER_QUERY = (
    "SELECT (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 0 AND [ScheduledAtUtc] <= SYSUTCDATETIME())"
    " + (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 1)"
    " + (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 2)"
)

# Settings the engine / Functions host read that the deployment must set on the Function App.
# When chokaq.settings.setting_env_names() exists, test_required_settings_are_engine_settings
# checks that each of these is a real setting name; this list stays the one the Bicep is held to.
REQUIRED_APP_SETTINGS = (
    "CHOKAQ_STORAGE_URL",
    "CHOKAQ_APP",
    "CHOKAQ_SWEEP_SCHEDULE",
    "CHOKAQ_RETENTION_SCHEDULE",
    "CHOKAQ_FUNCTIONS_AUTH_LEVEL",
    "CHOKAQ_ADMIN__TRUST_APP_SERVICE_AUTH",
    "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT",
    "CHOKAQ_RECOVERY__FETCHED_JOB_TIMEOUT",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX",
    "CHOKAQ_RETENTION__ARCHIVE_DAYS",
    "OTEL_SERVICE_NAME",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
)

# Read by the Functions host / OpenTelemetry SDK, not by chokaq's settings model.
PLATFORM_SETTINGS = (
    "OTEL_SERVICE_NAME",
    "PYTHON_ENABLE_OPENTELEMETRY",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
)

# The subset the worker process reads (no timers, no HTTP functions in the worker).
REQUIRED_WORKER_ENV = (
    "CHOKAQ_STORAGE_URL",
    "CHOKAQ_APP",
    "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT",
    "CHOKAQ_RECOVERY__FETCHED_JOB_TIMEOUT",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN",
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX",
    "OTEL_SERVICE_NAME",
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
)

# main.bicep parameter behind each setting, and the default the spec asks for.
SETTING_DEFAULTS = {
    "CHOKAQ_SWEEP_SCHEDULE": ("sweepSchedule", "*/30 * * * * *"),
    "CHOKAQ_RETENTION_SCHEDULE": ("retentionSchedule", "0 0 3 * * *"),
    "CHOKAQ_FUNCTIONS_AUTH_LEVEL": ("functionsAuthLevel", "FUNCTION"),
    "CHOKAQ_ADMIN__TRUST_APP_SERVICE_AUTH": ("trustAppServiceAuth", False),
    "CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT": ("processingZombieTimeoutSeconds", 600),
    "CHOKAQ_RECOVERY__FETCHED_JOB_TIMEOUT": ("fetchedJobTimeoutSeconds", 600),
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN": ("heartbeatIntervalMinSeconds", 8),
    "CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX": ("heartbeatIntervalMaxSeconds", 12),
    "CHOKAQ_RETENTION__ARCHIVE_DAYS": ("archiveRetentionDays", 30),
}

# App settings Flex Consumption rejects, and a key-based host storage setting we must not use.
FORBIDDEN_FLEX_SETTINGS = (
    "FUNCTIONS_WORKER_RUNTIME",
    "FUNCTIONS_EXTENSION_VERSION",
    "WEBSITE_RUN_FROM_PACKAGE",
    "AzureWebJobsStorage",
)

STORAGE_ROLE_IDS = {
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",  # Storage Blob Data Owner
    "974c5e8b-45b9-4653-ba55-5f855dd0fb88",  # Storage Queue Data Contributor
    "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",  # Storage Table Data Contributor
}
ACR_PULL_ROLE_ID = "7f951dda-4ed3-4680-a7ca-43fe172d538d"

API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")  # GA only: no -preview


def _ids(paths: list[Any]) -> list[str]:
    return [str(p.relative_to(BICEP_DIR)) for p in paths]


BICEP_FILES = all_bicep_files()


def _name_value_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {item["name"]: item.get("value") for item in items}


def _function_app() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    call, parsed = module_by_path("modules/functionapp.bicep")
    (site,) = resources_of_type(parsed, "Microsoft.Web/sites")
    return call, parsed, site["config"]


def _worker() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    call, parsed = module_by_path("modules/worker.bicep")
    (app,) = resources_of_type(parsed, "Microsoft.App/containerApps")
    return call, parsed, app["config"]


def _through_module(call: dict[str, Any], module: dict[str, Any], value: Any) -> Any:
    """Follow a value from a module's parameter to what main.bicep passes (or its default)."""
    main = parse_bicep(MAIN_BICEP)
    if is_ref(value) and value in module["parameters"]:
        passed = call["config"]["params"].get(str(value), module["parameters"][value]["default"])
        return resolve_param_default(main, passed)
    if is_ref(value) and value in module.get("variables", {}):
        return module["variables"][value]["value"]
    return value


# --- every file ---------------------------------------------------------------------------------


def test_bicep_files_exist() -> None:
    names = {p.name for p in BICEP_FILES}
    assert "main.bicep" in names
    assert len(BICEP_FILES) >= 8, names


@pytest.mark.parametrize("path", BICEP_FILES, ids=_ids(BICEP_FILES))
def test_every_parameter_is_used(path: Any) -> None:
    parsed = parse_bicep(path)
    unused = set(parsed["parameters"]) - identifier_uses(path)
    assert not unused, f"{path.name}: parameters declared but never used: {sorted(unused)}"


@pytest.mark.parametrize("path", BICEP_FILES, ids=_ids(BICEP_FILES))
def test_every_variable_is_used(path: Any) -> None:
    parsed = parse_bicep(path)
    unused = set(parsed.get("variables", {})) - identifier_uses(path)
    assert not unused, f"{path.name}: variables declared but never used: {sorted(unused)}"


@pytest.mark.parametrize("path", BICEP_FILES, ids=_ids(BICEP_FILES))
def test_no_registry_modules(path: Any) -> None:
    text = path.read_text()
    assert "br/public:" not in text
    # Registry (br:, br/public:) and template-spec (ts:, ts/) module sources.
    assert not re.search(r"module\s+\w+\s+'(br|ts)[:/]", text)
    for call in module_calls(parse_bicep(path)).values():
        assert call["type"] == "local", call["detail"]


@pytest.mark.parametrize("path", BICEP_FILES, ids=_ids(BICEP_FILES))
def test_resources_use_ga_api_versions(path: Any) -> None:
    for name, resource in parse_bicep(path).get("resources", {}).items():
        assert API_VERSION.match(resource["api_version"]), f"{path.name}:{name} {resource['api_version']}"


# --- main.bicep composition ------------------------------------------------------------------------


def test_main_calls_every_module_and_every_path_exists() -> None:
    main = parse_bicep(MAIN_BICEP)
    called = {call["detail"]["path"] for call in module_calls(main).values()}
    for rel in called:
        assert (BICEP_DIR / rel).is_file(), f"main.bicep calls missing module {rel}"
    existing = {f"modules/{p.name}" for p in MODULES_DIR.glob("*.bicep")}
    assert existing - called == set(), f"modules not used by main.bicep: {sorted(existing - called)}"


def test_module_params_match_module_declarations() -> None:
    main = parse_bicep(MAIN_BICEP)
    for symbol, call in module_calls(main).items():
        module = parse_bicep(BICEP_DIR / call["detail"]["path"])
        passed = set(call["config"].get("params", {}))
        declared = set(module["parameters"])
        assert passed <= declared, f"module {symbol} gets unknown params {sorted(passed - declared)}"
        required = {n for n, p in module["parameters"].items() if p["default"] is None}
        assert required <= passed, f"module {symbol} misses required params {sorted(required - passed)}"


def test_module_outputs_referenced_in_main_exist() -> None:
    main = parse_bicep(MAIN_BICEP)
    calls = module_calls(main)
    text = MAIN_BICEP.read_text()
    refs = set(re.findall(r"\b(\w+)\.outputs\.(\w+)", text))
    assert refs, "main.bicep reads no module outputs?"
    for symbol, output in refs:
        assert symbol in calls, f"{symbol}.outputs.{output}: no module {symbol}"
        module = parse_bicep(BICEP_DIR / calls[symbol]["detail"]["path"])
        assert output in module["outputs"], f"{calls[symbol]['detail']['path']} has no output {output}"


def test_main_outputs_for_publish_and_readme() -> None:
    outputs = parse_bicep(MAIN_BICEP)["outputs"]
    for name in (
        "functionAppName",
        "sqlServerFqdn",
        "databaseName",
        "workerAppName",
        "sqlGrantCommand",
        "publishCommand",
    ):
        assert name in outputs, name
    grant = outputs["sqlGrantCommand"]["value"]
    assert grant.startswith("sqlcmd ")
    assert "infra/bicep/sql/grant-app-identity.sql" in grant
    assert "FunctionAppIdentity=" in grant and "WorkerIdentity=" in grant
    assert outputs["publishCommand"]["value"].startswith("func azure functionapp publish ")


def test_parameters_json_matches_main() -> None:
    data = json.loads(PARAMETERS_JSON.read_text())
    assert data["$schema"].endswith("deploymentParameters.json#")
    main_params = parse_bicep(MAIN_BICEP)["parameters"]
    assert data["parameters"], "empty parameters file"
    for name, entry in data["parameters"].items():
        assert name in main_params, f"main.parameters.json sets unknown parameter {name}"
        assert "value" in entry, name
    required = {n for n, p in main_params.items() if p["default"] is None}
    assert required <= set(data["parameters"]), f"required params missing: {required - set(data['parameters'])}"


def test_main_parameters_have_safe_defaults() -> None:
    params = parse_bicep(MAIN_BICEP)["parameters"]
    no_default = sorted(n for n, p in params.items() if p["default"] is None)
    assert no_default == [], f"parameters without default: {no_default}"
    for setting, (param, expected) in SETTING_DEFAULTS.items():
        assert params[param]["default"] == expected, (setting, param, params[param]["default"])
    assert params["workerMinReplicas"]["default"] == 0


# --- storage -----------------------------------------------------------------------------------


def test_storage_disallows_shared_key() -> None:
    _, parsed = module_by_path("modules/storage.bicep")
    (account,) = resources_of_type(parsed, "Microsoft.Storage/storageAccounts")
    props = account["config"]["properties"]
    assert props["allowSharedKeyAccess"] is False
    assert props["allowBlobPublicAccess"] is False


def test_function_identity_gets_storage_data_roles() -> None:
    call, parsed = module_by_path("modules/storage-roles.bicep")
    assert set(parsed["variables"]["roleIds"]["value"]) == STORAGE_ROLE_IDS
    (assignment,) = resources_of_type(parsed, "Microsoft.Authorization/roleAssignments")
    body = resource_config(assignment)
    assert body["properties"]["principalType"] == "ServicePrincipal"
    principal = call["config"]["params"]["principalId"]
    assert "functionApp" in json.dumps(principal) and "principalId" in json.dumps(principal)


def test_worker_identity_gets_acr_pull() -> None:
    call, parsed = module_by_path("modules/registry.bicep")
    assert parsed["variables"]["acrPullRoleId"]["value"] == ACR_PULL_ROLE_ID
    (registry,) = resources_of_type(parsed, "Microsoft.ContainerRegistry/registries")
    assert registry["config"]["properties"]["adminUserEnabled"] is False
    assert "workerIdentity" in json.dumps(call["config"]["params"]["pullPrincipalId"])


# --- Function App --------------------------------------------------------------------------------


def test_function_app_is_flex_consumption_python_311_to_313() -> None:
    _, parsed, site = _function_app()
    (plan,) = resources_of_type(parsed, "Microsoft.Web/serverfarms")
    assert plan["config"]["sku"]["name"] == "FC1"
    assert plan["config"]["sku"]["tier"] == "FlexConsumption"
    assert plan["config"]["properties"]["reserved"] is True
    assert site["kind"] == "functionapp,linux"
    assert site["identity"]["type"] in ("SystemAssigned", "SystemAssigned, UserAssigned")
    config = site["properties"]["functionAppConfig"]
    assert config["runtime"] == {"name": "python", "version": "pythonVersion"}
    version = parsed["parameters"]["pythonVersion"]
    allowed = next(d["argument"] for d in version["decorators"] if d["type"] == "allowed")
    # The versions requirements.txt is resolved for (Makefile) and .ci/run checks with each one's pip.
    assert (allowed, version["default"]) == (["3.11", "3.12", "3.13"], "3.11")
    main = parse_bicep(MAIN_BICEP)["parameters"]["functionsPythonVersion"]
    assert next(d["argument"] for d in main["decorators"] if d["type"] == "allowed") == allowed
    storage = config["deployment"]["storage"]
    assert storage["type"] == "blobContainer"
    assert storage["authentication"]["type"] == "SystemAssignedIdentity"


def test_function_app_has_required_app_settings() -> None:
    _, _, site = _function_app()
    settings = _name_value_list(site["properties"]["siteConfig"]["appSettings"])
    missing = [name for name in REQUIRED_APP_SETTINGS if name not in settings]
    assert not missing, f"Function App lacks app settings {missing}"
    assert settings["PYTHON_ENABLE_OPENTELEMETRY"] == "true"
    for name in FORBIDDEN_FLEX_SETTINGS:
        assert name not in settings, f"{name} must not be set on Flex Consumption / key-less storage"


def test_function_app_storage_is_identity_based() -> None:
    call, parsed, site = _function_app()
    settings = _name_value_list(site["properties"]["siteConfig"]["appSettings"])
    assert settings["AzureWebJobsStorage__credential"] == "managedidentity"
    account = settings["AzureWebJobsStorage__accountName"]
    assert is_ref(account) and account in parsed["parameters"]
    passed = call["config"]["params"][str(account)]
    assert "storage" in json.dumps(passed) and "storageAccountName" in json.dumps(passed), passed


def test_function_app_settings_are_wired_to_main_defaults() -> None:
    call, parsed, site = _function_app()
    settings = _name_value_list(site["properties"]["siteConfig"]["appSettings"])
    main_params = parse_bicep(MAIN_BICEP)["parameters"]
    for setting, (main_param, _) in SETTING_DEFAULTS.items():
        value = settings[setting]
        # The module either uses the parameter directly, string(param), or a conditional on it.
        text = json.dumps(value)
        module_params = [p for p in parsed["parameters"] if re.search(rf'"{p}"', text)]
        assert len(module_params) == 1, (setting, text)
        passed = call["config"]["params"][module_params[0]]
        assert passed == main_param and is_ref(passed), (setting, passed)
        assert main_param in main_params


def test_function_app_storage_url_is_managed_identity_odbc18() -> None:
    call, _, site = _function_app()
    settings = _name_value_list(site["properties"]["siteConfig"]["appSettings"])
    assert settings["CHOKAQ_STORAGE_URL"] == "storageUrl"
    template = call["config"]["params"]["storageUrl"]
    assert isinstance(template, str) and not is_ref(template)
    url = re.sub(r"\$\{sql\.outputs\.sqlServerFqdn\}", "srv.database.windows.net", template)
    url = re.sub(r"\$\{sql\.outputs\.databaseName\}", "chokaq", url)
    assert "${" not in url, url
    assert url == (
        "mssql+pyodbc://@srv.database.windows.net/chokaq"
        "?driver=ODBC+Driver+18+for+SQL+Server&Encrypt=yes&authentication=ActiveDirectoryMsi"
    )
    args, _ = MSDialect_pyodbc().create_connect_args(make_url(url))
    odbc = args[0]
    assert "DRIVER={ODBC Driver 18 for SQL Server}" in odbc
    assert "Authentication=ActiveDirectoryMsi" in odbc
    assert "UID=" not in odbc and "PWD=" not in odbc and "Trusted_Connection" not in odbc


@pytest.mark.parametrize("setting", ["CHOKAQ_APP"])
def test_app_registry_default_looks_like_module_colon_attr(setting: str) -> None:
    default = parse_bicep(MAIN_BICEP)["parameters"]["chokaqApp"]["default"]
    assert re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", default), (setting, default)


def _engine_settings_module() -> Any:
    import chokaq.settings as settings_module

    return settings_module


def test_required_settings_are_engine_settings() -> None:
    names = set(_engine_settings_module().setting_env_names())
    engine_names = [n for n in REQUIRED_APP_SETTINGS if n not in PLATFORM_SETTINGS]
    unknown = [n for n in engine_names if n not in names]
    assert not unknown, f"not setting names of the engine: {unknown}"


def test_deployed_values_pass_engine_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """The values the Bicep sets by default load through the engine's own settings model."""
    settings_module = _engine_settings_module()
    main = parse_bicep(MAIN_BICEP)["parameters"]
    for name in settings_module.setting_env_names():
        monkeypatch.delenv(name, raising=False)
    for setting, (param, _) in SETTING_DEFAULTS.items():
        value = main[param]["default"]
        monkeypatch.setenv(setting, str(value).lower() if isinstance(value, bool) else str(value))
    monkeypatch.setenv(
        "CHOKAQ_STORAGE_URL",
        "mssql+pyodbc://@srv.database.windows.net/chokaq"
        "?driver=ODBC+Driver+18+for+SQL+Server&Encrypt=yes&authentication=ActiveDirectoryMsi",
    )
    monkeypatch.setenv("CHOKAQ_APP", main["chokaqApp"]["default"])
    loaded = settings_module.load_settings()
    assert loaded is not None


# --- SQL -----------------------------------------------------------------------------------------


def test_sql_is_entra_only_with_azure_services_rule() -> None:
    call, parsed = module_by_path("modules/sql.bicep")
    (server,) = resources_of_type(parsed, "Microsoft.Sql/servers")
    admins = server["config"]["properties"]["administrators"]
    assert admins["azureADOnlyAuthentication"] is True
    assert admins["administratorType"] == "ActiveDirectory"
    assert is_ref(admins["login"]) and is_ref(admins["sid"])
    assert "administratorLogin" not in server["config"]["properties"]
    assert "administratorLoginPassword" not in server["config"]["properties"]
    (rule,) = resources_of_type(parsed, "Microsoft.Sql/servers/firewallRules")
    assert rule["config"]["properties"] == {"startIpAddress": "0.0.0.0", "endIpAddress": "0.0.0.0"}
    assert resources_of_type(parsed, "Microsoft.Sql/servers/databases")
    assert {"adminLogin", "adminObjectId"} <= set(call["config"]["params"])


def test_grant_script_creates_users_and_roles() -> None:
    sql = GRANT_SQL.read_text()
    for var in ("FunctionAppIdentity", "WorkerIdentity"):
        assert f"CREATE USER [$({var})] FROM EXTERNAL PROVIDER" in sql
        for role in ("db_datareader", "db_datawriter", "db_ddladmin"):
            assert f"ALTER ROLE {role} ADD MEMBER [$({var})]" in sql
    used_vars = set(re.findall(r"\$\((\w+)\)", sql))
    assert used_vars == {"FunctionAppIdentity", "WorkerIdentity"}
    grant = parse_bicep(MAIN_BICEP)["outputs"]["sqlGrantCommand"]["value"]
    for var in used_vars:
        assert f"{var}=" in grant


# --- worker container app --------------------------------------------------------------------------


def test_container_apps_environment_uses_log_analytics() -> None:
    _, parsed = module_by_path("modules/containerapps-env.bicep")
    (env,) = resources_of_type(parsed, "Microsoft.App/managedEnvironments")
    logs = env["config"]["properties"]["appLogsConfiguration"]
    assert logs["destination"] == "log-analytics"
    assert "customerId" in logs["logAnalyticsConfiguration"]


def _worker_argv() -> tuple[list[Any], Any]:
    call, parsed, app = _worker()
    (container,) = app["properties"]["template"]["containers"]
    argv = list(container.get("command", [])) + list(container.get("args", []))
    return argv, _through_module(call, parsed, app_option_value(argv))


def test_worker_command_is_chokaq_worker_app() -> None:
    argv, app_value = _worker_argv()
    assert argv[0] == "chokaq", argv
    assert "worker" in argv and "--app" in argv, argv
    assert re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", app_value), app_value


def test_worker_command_parses_with_real_cli() -> None:
    argv, app_value = _worker_argv()
    concrete = [app_value if is_ref(a) else a for a in argv]
    commands, values = parse_with_real_cli(concrete)
    assert commands == ["worker"]
    assert values["app_spec"] == app_value


def test_worker_env() -> None:
    _, _, app = _worker()
    (container,) = app["properties"]["template"]["containers"]
    env = _name_value_list(container["env"])
    missing = [name for name in REQUIRED_WORKER_ENV if name not in env]
    assert not missing, missing


def test_worker_storage_url_uses_user_assigned_identity() -> None:
    _, parsed, app = _worker()
    (container,) = app["properties"]["template"]["containers"]
    env = _name_value_list(container["env"])
    assert env["CHOKAQ_STORAGE_URL"] == "storageUrl"
    template = parsed["variables"]["storageUrl"]["value"]
    url = (
        template.replace("${identityClientId}", "11111111-2222-3333-4444-555555555555")
        .replace("${sqlServerFqdn}", "srv.database.windows.net")
        .replace("${databaseName}", "chokaq")
    )
    assert "${" not in url
    args, _ = MSDialect_pyodbc().create_connect_args(make_url(url))
    odbc = args[0]
    assert "DRIVER={ODBC Driver 18 for SQL Server}" in odbc
    assert "UID=11111111-2222-3333-4444-555555555555" in odbc
    assert "authentication=ActiveDirectoryMsi" in odbc
    assert "PWD=" not in odbc
    assert env["AZURE_CLIENT_ID"] == "identityClientId"


def test_worker_scales_on_queued_and_running_jobs_with_keda_mssql() -> None:
    call, parsed, app = _worker()
    scale = app["properties"]["template"]["scale"]
    (rule,) = scale["rules"]
    custom = rule["custom"]
    assert custom["type"] == "mssql"
    metadata = custom["metadata"]
    query = _through_module(call, parsed, metadata["query"])
    assert query == SCALER_QUERY
    assert metadata["activationTargetValue"] == "0"
    assert "targetValue" in metadata
    # Entra-only SQL: authenticate with the worker's identity (no password, no secret).
    assert "identity" in custom or "auth" in custom or "connectionStringFromEnv" in metadata
    assert "password" not in json.dumps(custom).lower()
    assert _through_module(call, parsed, custom["identity"]) is not None
    assert "passwordFromEnv" not in metadata


def test_worker_termination_grace_covers_the_shutdown_grace() -> None:
    _, parsed, app = _worker()
    (container,) = app["properties"]["template"]["containers"]
    env = _name_value_list(container["env"])
    # string(shutdownGraceSeconds)
    grace_env = env["CHOKAQ_EXECUTION__SHUTDOWN_GRACE"]["function"]["parameters"]["value_to_convert"]
    assert grace_env == "shutdownGraceSeconds"
    grace = parsed["parameters"]["shutdownGraceSeconds"]
    assert grace["default"] == ExecutionSettings().shutdown_grace
    termination = app["properties"]["template"]["terminationGracePeriodSeconds"]
    expr = parsed["variables"][termination]["value"]["operator"]
    # terminationGracePeriodSeconds = shutdownGraceSeconds + a margin, within Container Apps' 600.
    assert expr["type"] == "add"
    assert expr["operands"]["operand_1"] == "shutdownGraceSeconds"
    margin = expr["operands"]["operand_2"]
    assert isinstance(margin, int) and margin >= 10
    (ceiling,) = [d["argument"] for d in grace["decorators"] if d["type"] == "max_value"]
    assert ceiling + margin <= 600


def test_worker_min_replicas_zero() -> None:
    call, parsed, app = _worker()
    scale = app["properties"]["template"]["scale"]
    assert _through_module(call, parsed, scale["minReplicas"]) == 0
    params = json.loads(PARAMETERS_JSON.read_text())["parameters"]
    assert params.get("workerMinReplicas", {"value": 0})["value"] == 0


def test_worker_pulls_with_identity() -> None:
    _, _, app = _worker()
    assert app["identity"]["type"] == "UserAssigned"
    (registry,) = app["properties"]["configuration"]["registries"]
    assert "identity" in registry and "passwordSecretRef" not in registry
