// chokaq on Azure: Function App (Flex Consumption) for timers and the admin API, a KEDA-scaled
// worker on Container Apps, and Azure SQL with Entra-only authentication.
//
//   az deployment group create -g RG -f infra/bicep/main.bicep -p infra/bicep/main.parameters.json
//   func azure functionapp publish <functionAppName output>
//
// Then, once: run the `sqlGrantCommand` output (creates the apps' database users).
// Local modules only; no registry modules.

targetScope = 'resourceGroup'

@description('Azure region. Default: the resource group region.')
param location string = resourceGroup().location

@description('Short prefix for resource names (lowercase letters, digits, hyphens).')
@minLength(2)
@maxLength(12)
param namePrefix string = 'chokaq'

@description('Entra admin of the SQL server: display name (UPN, group or app name). Empty: "chokaq-sql-admin".')
param sqlAdminLogin string = ''

@description('Entra admin of the SQL server: object id. Empty: the identity running the deployment.')
param sqlAdminObjectId string = ''

@description('Kind of Entra principal that is SQL admin. Use Application when a service principal deploys.')
@allowed([
  'User'
  'Group'
  'Application'
])
param sqlAdminPrincipalType string = 'User'

@description('Database name.')
param databaseName string = 'chokaq'

@description('Database SKU.')
param databaseSku object = {
  name: 'GP_S_Gen5'
  tier: 'GeneralPurpose'
  family: 'Gen5'
  capacity: 2
}

@description('module:attribute of the chokaq handler registry (CHOKAQ_APP), used by the Function App and the worker.')
param chokaqApp string = 'jobs:app'

@description('Python version of the Function App: 3.11, 3.12 or 3.13 (Flex Consumption offers the three; requirements.txt resolves for each).')
@allowed([
  '3.11'
  '3.12'
  '3.13'
])
param functionsPythonVersion string = '3.11'

@description('Worker image. Empty: a public placeholder image until you push your own (see docs/azure.md).')
param workerImage string = ''

@description('Minimum worker replicas. 0 scales to zero when no job is due.')
@minValue(0)
param workerMinReplicas int = 0

@description('Maximum worker replicas.')
@minValue(1)
param workerMaxReplicas int = 10

@description('Due Pending jobs per worker replica that KEDA aims for.')
@minValue(1)
param duePendingJobsPerReplica int = 50

@description('NCRONTAB (6 fields) of the sweep timer.')
param sweepSchedule string = '*/30 * * * * *'

@description('NCRONTAB (6 fields) of the retention timer.')
param retentionSchedule string = '0 0 3 * * *'

@description('Auth level of the chokaq HTTP functions.')
@allowed([
  'FUNCTION'
  'ANONYMOUS'
])
param functionsAuthLevel string = 'FUNCTION'

@description('Trust App Service Authentication (Easy Auth) headers for the admin API. Enable only with Easy Auth configured.')
param trustAppServiceAuth bool = false

@description('Seconds after which a Processing job without heartbeat is a zombie.')
param processingZombieTimeoutSeconds int = 600

@description('Seconds after which a Fetched job that never started is released.')
param fetchedJobTimeoutSeconds int = 600

@description('Lower bound of the heartbeat interval, seconds.')
param heartbeatIntervalMinSeconds int = 8

@description('Upper bound of the heartbeat interval, seconds.')
param heartbeatIntervalMaxSeconds int = 12

@description('Days finished jobs stay in the archive.')
param archiveRetentionDays int = 30

@description('Doorbell queue for queue-triggered runs on Functions (docs/functions.md). Empty: off.')
param doorbellQueueName string = ''

@description('Object ids of producers outside the Function App that may ring the doorbell.')
param doorbellSenderPrincipalIds array = []

@description('Tags applied to every resource.')
param tags object = {
  app: 'chokaq'
}

var suffix = uniqueString(resourceGroup().id)
var compactPrefix = toLower(replace(namePrefix, '-', ''))
var storageAccountName = take('st${compactPrefix}${suffix}', 24)
var registryName = take('cr${compactPrefix}${suffix}', 50)
var functionAppName = '${namePrefix}-func-${suffix}'
var sqlServerName = toLower('${namePrefix}-sql-${suffix}')
var workerAppName = take(toLower('${namePrefix}-worker-${suffix}'), 32)
var workerIdentityName = '${namePrefix}-worker-id-${suffix}'
var placeholderImage = 'mcr.microsoft.com/k8se/quickstart:latest'
var effectiveWorkerImage = empty(workerImage) ? placeholderImage : workerImage
var effectiveSqlAdminLogin = empty(sqlAdminLogin) ? 'chokaq-sql-admin' : sqlAdminLogin
var effectiveSqlAdminObjectId = empty(sqlAdminObjectId) ? deployer().objectId : sqlAdminObjectId

module monitoring 'modules/monitoring.bicep' = {
  name: 'chokaq-monitoring'
  params: {
    location: location
    logAnalyticsName: '${namePrefix}-log-${suffix}'
    appInsightsName: '${namePrefix}-appi-${suffix}'
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  name: 'chokaq-storage'
  params: {
    location: location
    storageAccountName: storageAccountName
    tags: tags
  }
}

module sql 'modules/sql.bicep' = {
  name: 'chokaq-sql'
  params: {
    location: location
    sqlServerName: sqlServerName
    databaseName: databaseName
    adminLogin: effectiveSqlAdminLogin
    adminObjectId: effectiveSqlAdminObjectId
    adminPrincipalType: sqlAdminPrincipalType
    databaseSku: databaseSku
    tags: tags
  }
}

module functionApp 'modules/functionapp.bicep' = {
  name: 'chokaq-functionapp'
  params: {
    location: location
    functionAppName: functionAppName
    planName: '${namePrefix}-plan-${suffix}'
    storageAccountName: storage.outputs.storageAccountName
    blobEndpoint: storage.outputs.blobEndpoint
    deploymentContainerName: storage.outputs.deploymentContainerName
    appInsightsConnectionString: monitoring.outputs.appInsightsConnectionString
    // System-assigned identity: no UID in the URL, the ODBC driver asks the local identity endpoint.
    storageUrl: 'mssql+pyodbc://@${sql.outputs.sqlServerFqdn}/${sql.outputs.databaseName}?driver=ODBC+Driver+18+for+SQL+Server&Encrypt=yes&authentication=ActiveDirectoryMsi'
    chokaqApp: chokaqApp
    sweepSchedule: sweepSchedule
    retentionSchedule: retentionSchedule
    functionsAuthLevel: functionsAuthLevel
    trustAppServiceAuth: trustAppServiceAuth
    processingZombieTimeoutSeconds: processingZombieTimeoutSeconds
    fetchedJobTimeoutSeconds: fetchedJobTimeoutSeconds
    heartbeatIntervalMinSeconds: heartbeatIntervalMinSeconds
    heartbeatIntervalMaxSeconds: heartbeatIntervalMaxSeconds
    archiveRetentionDays: archiveRetentionDays
    otelServiceName: '${namePrefix}-functions'
    doorbellQueueName: doorbellQueueName
    queueEndpoint: storage.outputs.queueEndpoint
    pythonVersion: functionsPythonVersion
    tags: tags
  }
}

module doorbell 'modules/doorbell.bicep' = if (!empty(doorbellQueueName)) {
  name: 'chokaq-doorbell'
  params: {
    storageAccountName: storage.outputs.storageAccountName
    queueName: doorbellQueueName
    senderPrincipalIds: doorbellSenderPrincipalIds
  }
}

module storageRoles 'modules/storage-roles.bicep' = {
  name: 'chokaq-storage-roles'
  params: {
    storageAccountName: storage.outputs.storageAccountName
    principalId: functionApp.outputs.principalId
  }
}

module workerIdentity 'modules/identity.bicep' = {
  name: 'chokaq-worker-identity'
  params: {
    location: location
    identityName: workerIdentityName
    tags: tags
  }
}

module registry 'modules/registry.bicep' = {
  name: 'chokaq-registry'
  params: {
    location: location
    registryName: registryName
    pullPrincipalId: workerIdentity.outputs.principalId
    tags: tags
  }
}

module containerAppsEnv 'modules/containerapps-env.bicep' = {
  name: 'chokaq-containerapps-env'
  params: {
    location: location
    environmentName: '${namePrefix}-cae-${suffix}'
    logAnalyticsName: monitoring.outputs.workspaceName
    tags: tags
  }
}

module worker 'modules/worker.bicep' = {
  name: 'chokaq-worker'
  params: {
    location: location
    workerAppName: workerAppName
    environmentId: containerAppsEnv.outputs.environmentId
    image: effectiveWorkerImage
    registryLoginServer: registry.outputs.loginServer
    identityId: workerIdentity.outputs.identityId
    identityName: workerIdentity.outputs.identityName
    identityClientId: workerIdentity.outputs.clientId
    sqlServerFqdn: sql.outputs.sqlServerFqdn
    databaseName: sql.outputs.databaseName
    chokaqApp: chokaqApp
    processingZombieTimeoutSeconds: processingZombieTimeoutSeconds
    fetchedJobTimeoutSeconds: fetchedJobTimeoutSeconds
    heartbeatIntervalMinSeconds: heartbeatIntervalMinSeconds
    heartbeatIntervalMaxSeconds: heartbeatIntervalMaxSeconds
    appInsightsConnectionString: monitoring.outputs.appInsightsConnectionString
    otelServiceName: '${namePrefix}-worker'
    minReplicas: workerMinReplicas
    maxReplicas: workerMaxReplicas
    duePendingJobsPerReplica: duePendingJobsPerReplica
    tags: tags
  }
}

output functionAppName string = functionApp.outputs.functionAppName
output functionAppUrl string = 'https://${functionApp.outputs.functionAppHostName}'
output storageAccountName string = storage.outputs.storageAccountName
output sqlServerFqdn string = sql.outputs.sqlServerFqdn
output databaseName string = sql.outputs.databaseName
output workerAppName string = worker.outputs.workerAppName
output workerIdentityName string = workerIdentity.outputs.identityName
output containerRegistryName string = registry.outputs.registryName
output containerRegistryLoginServer string = registry.outputs.loginServer
output workerImage string = effectiveWorkerImage
output publishCommand string = 'func azure functionapp publish ${functionApp.outputs.functionAppName}'
output sqlGrantCommand string = 'sqlcmd -S tcp:${sql.outputs.sqlServerFqdn},1433 -d ${sql.outputs.databaseName} --authentication-method ActiveDirectoryDefault -i infra/bicep/sql/grant-app-identity.sql -v FunctionAppIdentity=${functionApp.outputs.functionAppName} WorkerIdentity=${workerIdentity.outputs.identityName}'
output workerImageBuildCommand string = 'az acr build -r ${registry.outputs.registryName} -t chokaq-worker:latest . && az containerapp update -g ${resourceGroup().name} -n ${worker.outputs.workerAppName} --image ${registry.outputs.loginServer}/chokaq-worker:latest'
