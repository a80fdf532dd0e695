// Worker container app: runs `chokaq --app <module:app> worker` and is scaled by KEDA's mssql
// scaler on the work in the queue: due Pending jobs plus the Fetched and Processing ones being run.
// Counting running work keeps replicas alive while they finish a claimed backlog; with due Pending
// jobs alone the metric drops to 0 once everything is claimed, and after the cooldown KEDA would
// stop every replica mid-job. minReplicas defaults to 0 (scale to zero when nothing is left).
//
// Scaler authentication: Azure SQL here is Entra-only, so the scaler cannot use a SQL password.
// The rule sets `identity` to the worker's user-assigned identity; Container Apps then gives KEDA
// an Entra token for it (KEDA mssql scaler "azure-workload" authentication, documented for KEDA
// v2.20+). This needs the platform's managed KEDA to support it; see docs/azure.md for limits
// and the fallback (workerMinReplicas >= 1).

@description('Azure region.')
param location string

@description('Container app name (lowercase letters, digits and hyphens, at most 32).')
@maxLength(32)
param workerAppName string

@description('Resource id of the Container Apps environment.')
param environmentId string

@description('Worker image, e.g. myregistry.azurecr.io/chokaq-worker:1.0.')
param image string

@description('Login server of the registry the image is pulled from.')
param registryLoginServer string

@description('Resource id of the worker user-assigned identity.')
param identityId string

@description('Name of that identity (its contained database user name).')
param identityName string

@description('Client id of that identity.')
param identityClientId string

@description('Azure SQL server FQDN.')
param sqlServerFqdn string

@description('Database name.')
param databaseName string

@description('module:attribute of the chokaq handler registry (CHOKAQ_APP).')
param chokaqApp string

@description('Seconds after which a Processing job without heartbeat is a zombie.')
param processingZombieTimeoutSeconds int

@description('Seconds after which a Fetched job that never started is released.')
param fetchedJobTimeoutSeconds int

@description('Lower bound of the randomised heartbeat interval, seconds.')
param heartbeatIntervalMinSeconds int

@description('Upper bound of the randomised heartbeat interval, seconds.')
param heartbeatIntervalMaxSeconds int

@description('Application Insights connection string.')
param appInsightsConnectionString string

@description('OpenTelemetry service name of the worker.')
param otelServiceName string

@description('Minimum replicas. 0 scales to zero when no job is due.')
@minValue(0)
param minReplicas int = 0

@description('Maximum replicas.')
@minValue(1)
param maxReplicas int = 10

@description('Jobs (due Pending, Fetched and Processing) per replica that KEDA aims for.')
@minValue(1)
param duePendingJobsPerReplica int = 50

@description('Execution.ShutdownGrace: seconds a stopping worker lets running handlers finish.')
@minValue(0)
@maxValue(570)
param shutdownGraceSeconds int = 30

// Seconds between SIGTERM and SIGKILL: the shutdown grace plus time to hand back the prefetch
// buffer and write the last outcomes. Container Apps allows at most 600.
var terminationGracePeriodSeconds = shutdownGraceSeconds + 30

@description('vCPU per replica.')
param cpu string = '0.5'

@description('Memory per replica.')
param memory string = '1Gi'

@description('Tags applied to every resource.')
param tags object = {}

// The KEDA query: one COUNT per status, so each reads its own filtered index (Status 0, 1, 2).
// tests/infra/test_bicep.py asserts it equals SCALER_QUERY there and runs it on SQLite/PostgreSQL.
var workQuery = 'SELECT (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 0 AND [ScheduledAtUtc] <= SYSUTCDATETIME()) + (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 1) + (SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 2)'

// ODBC Driver 18: Authentication=ActiveDirectoryMsi with UID=<client id> picks the user-assigned identity.
var storageUrl = 'mssql+pyodbc://${identityClientId}@${sqlServerFqdn}/${databaseName}?driver=ODBC+Driver+18+for+SQL+Server&Encrypt=yes&authentication=ActiveDirectoryMsi'

resource worker 'Microsoft.App/containerApps@2025-01-01' = {
  name: workerAppName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    environmentId: environmentId
    workloadProfileName: 'Consumption'
    configuration: {
      activeRevisionsMode: 'Single'
      registries: [
        {
          server: registryLoginServer
          identity: identityId
        }
      ]
    }
    template: {
      terminationGracePeriodSeconds: terminationGracePeriodSeconds
      containers: [
        {
          name: 'worker'
          image: image
          // `chokaq --app <module:app> worker`: --app is accepted before or after the sub-command.
          command: [
            'chokaq'
          ]
          args: [
            '--app'
            chokaqApp
            'worker'
          ]
          resources: {
            cpu: json(cpu)
            memory: memory
          }
          env: [
            {
              name: 'CHOKAQ_STORAGE_URL'
              value: storageUrl
            }
            {
              name: 'CHOKAQ_APP'
              value: chokaqApp
            }
            {
              name: 'CHOKAQ_RECOVERY__PROCESSING_ZOMBIE_TIMEOUT'
              value: string(processingZombieTimeoutSeconds)
            }
            {
              name: 'CHOKAQ_RECOVERY__FETCHED_JOB_TIMEOUT'
              value: string(fetchedJobTimeoutSeconds)
            }
            {
              name: 'CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MIN'
              value: string(heartbeatIntervalMinSeconds)
            }
            {
              name: 'CHOKAQ_EXECUTION__HEARTBEAT_INTERVAL_MAX'
              value: string(heartbeatIntervalMaxSeconds)
            }
            {
              name: 'CHOKAQ_EXECUTION__SHUTDOWN_GRACE'
              value: string(shutdownGraceSeconds)
            }
            {
              name: 'AZURE_CLIENT_ID'
              value: identityClientId
            }
            {
              name: 'OTEL_SERVICE_NAME'
              value: otelServiceName
            }
            {
              name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
              value: appInsightsConnectionString
            }
          ]
        }
      ]
      scale: {
        minReplicas: minReplicas
        maxReplicas: maxReplicas
        rules: [
          {
            name: 'queued-and-running-jobs'
            custom: {
              type: 'mssql'
              identity: identityId
              metadata: {
                host: sqlServerFqdn
                port: '1433'
                database: databaseName
                username: identityName
                query: workQuery
                targetValue: string(duePendingJobsPerReplica)
                activationTargetValue: '0'
              }
            }
          }
        ]
      }
    }
  }
}

output workerAppName string = worker.name
output storageUrl string = storageUrl
