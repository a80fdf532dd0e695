// Function App on Flex Consumption (FC1, Linux, Python 3.11, 3.12 or 3.13) with a system-assigned identity.
// It hosts the chokaq timer functions (sweep, retention), the HTTP admin API and, with a
// doorbell queue, the queue-triggered `wake` function.
// Host storage and the deployment package use the identity: there is no storage key anywhere.
// Flex Consumption rejects FUNCTIONS_WORKER_RUNTIME and FUNCTIONS_EXTENSION_VERSION as app
// settings; the runtime is set in functionAppConfig.runtime instead.

@description('Azure region.')
param location string

@description('Function App name (globally unique).')
param functionAppName string

@description('Flex Consumption plan name.')
param planName string

@description('Storage account used by the Functions host and for the deployment package.')
param storageAccountName string

@description('Primary blob endpoint of that account, ending with a slash.')
param blobEndpoint string

@description('Blob container that holds the deployment package.')
param deploymentContainerName string

@description('Application Insights connection string.')
param appInsightsConnectionString string

@description('SQLAlchemy URL of the chokaq database (CHOKAQ_STORAGE_URL).')
param storageUrl string

@description('module:attribute of the chokaq handler registry (CHOKAQ_APP).')
param chokaqApp string

@description('NCRONTAB (6 fields) of the zombie/abandoned-job sweep timer.')
param sweepSchedule string

@description('NCRONTAB (6 fields) of the retention timer.')
param retentionSchedule string

@description('Auth level of the chokaq HTTP functions.')
@allowed([
  'FUNCTION'
  'ANONYMOUS'
])
param functionsAuthLevel string

@description('Trust the App Service Authentication (Easy Auth) headers for the admin API.')
param trustAppServiceAuth bool

@description('Seconds after which a Processing job without heartbeat is a zombie.')
param processingZombieTimeoutSeconds int

@description('Seconds after which a Fetched job that never started is released.')
param fetchedJobTimeoutSeconds int

@description('Lower bound of the randomised heartbeat interval, seconds.')
param heartbeatIntervalMinSeconds int

@description('Upper bound of the randomised heartbeat interval, seconds.')
param heartbeatIntervalMaxSeconds int

@description('Days finished jobs stay in the archive.')
param archiveRetentionDays int

@description('OpenTelemetry service name of the Function App.')
param otelServiceName string

@description('Doorbell queue name (CHOKAQ_FUNCTIONS__DOORBELL_QUEUE); empty: no doorbell, no wake function.')
param doorbellQueueName string = ''

@description('Queue endpoint of the storage account, for the identity-based doorbell connection.')
param queueEndpoint string

@description('Maximum number of Flex Consumption instances.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Memory of each Flex Consumption instance, MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Python version. requirements.txt is one lock resolved for each of these.')
@allowed([
  '3.11'
  '3.12'
  '3.13'
])
param pythonVersion string = '3.11'

@description('Tags applied to every resource.')
param tags object = {}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource functionApp 'Microsoft.Web/sites@2024-04-01' = {
  name: functionAppName
  location: location
  tags: tags
  kind: 'functionapp,linux'
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    siteConfig: {
      minTlsVersion: '1.2'
      ftpsState: 'Disabled'
      appSettings: [
        {
          name: 'AzureWebJobsStorage__accountName'
          value: storageAccountName
        }
        {
          name: 'AzureWebJobsStorage__credential'
          value: 'managedidentity'
        }
        {
          name: 'APPLICATIONINSIGHTS_CONNECTION_STRING'
          value: appInsightsConnectionString
        }
        {
          name: 'PYTHON_ENABLE_OPENTELEMETRY'
          value: 'true'
        }
        {
          // Current Python workers install Azure Monitor's OpenTelemetry providers only with this;
          // PYTHON_ENABLE_OPENTELEMETRY alone just propagates context. chokaq then adds none.
          name: 'PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY'
          value: 'true'
        }
        {
          name: 'OTEL_SERVICE_NAME'
          value: otelServiceName
        }
        {
          name: 'CHOKAQ_STORAGE_URL'
          value: storageUrl
        }
        {
          name: 'CHOKAQ_APP'
          value: chokaqApp
        }
        {
          name: 'CHOKAQ_SWEEP_SCHEDULE'
          value: sweepSchedule
        }
        {
          name: 'CHOKAQ_RETENTION_SCHEDULE'
          value: retentionSchedule
        }
        {
          name: 'CHOKAQ_FUNCTIONS_AUTH_LEVEL'
          value: functionsAuthLevel
        }
        {
          name: 'CHOKAQ_ADMIN__TRUST_APP_SERVICE_AUTH'
          value: trustAppServiceAuth ? 'true' : 'false'
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
          name: 'CHOKAQ_RETENTION__ARCHIVE_DAYS'
          value: string(archiveRetentionDays)
        }
        {
          name: 'CHOKAQ_FUNCTIONS__DOORBELL_QUEUE'
          value: doorbellQueueName
        }
        {
          // Identity-based connection of the wake trigger and of this app's own rings.
          name: 'ChokaqDoorbell__queueServiceUri'
          value: queueEndpoint
        }
        {
          name: 'ChokaqDoorbell__credential'
          value: 'managedidentity'
        }
      ]
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: '${blobEndpoint}${deploymentContainerName}'
          authentication: {
            type: 'SystemAssignedIdentity'
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
      }
      runtime: {
        name: 'python'
        version: pythonVersion
      }
    }
  }
}

output functionAppName string = functionApp.name
output functionAppHostName string = functionApp.properties.defaultHostName
output principalId string = functionApp.identity.principalId
