// Worker container app: runs `chokaq --app <module:app> worker` and is scaled by KEDA's mssql
// scaler on the number of due Pending jobs. minReplicas defaults to 0 (scale to zero).
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

@description('Due Pending jobs per replica that KEDA aims for.')
@minValue(1)
param duePendingJobsPerReplica int = 50

@description('Seconds a stopping replica gets between SIGTERM and SIGKILL; above the worker shutdown grace (30 s by default).')
@minValue(0)
@maxValue(600)
param terminationGracePeriodSeconds int = 60

@description('vCPU per replica.')
param cpu string = '0.5'

@description('Memory per replica.')
param memory string = '1Gi'

@description('Tags applied to every resource.')
param tags object = {}

// The KEDA query. tests/infra/test_bicep.py asserts it equals DUE_JOBS_QUERY there.
var dueJobsQuery = 'SELECT COUNT(*) FROM [chokaq].[JobsHot] WHERE [Status] = 0 AND [ScheduledAtUtc] <= SYSUTCDATETIME()'

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
            name: 'due-pending-jobs'
            custom: {
              type: 'mssql'
              identity: identityId
              metadata: {
                host: sqlServerFqdn
                port: '1433'
                database: databaseName
                username: identityName
                query: dueJobsQuery
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
