// Azure SQL logical server and database with Microsoft Entra-only authentication.
// SQL logins are disabled; the apps connect with their managed identities, which become
// contained database users through infra/bicep/sql/grant-app-identity.sql.

@description('Azure region.')
param location string

@description('Logical server name (globally unique, lowercase).')
param sqlServerName string

@description('Database name.')
param databaseName string

@description('Display name of the Entra admin (user UPN, group or app name).')
param adminLogin string

@description('Object id (sid) of the Entra admin.')
param adminObjectId string

@description('Kind of Entra principal that is admin.')
@allowed([
  'User'
  'Group'
  'Application'
])
param adminPrincipalType string = 'User'

@description('Database SKU. Default: General Purpose serverless Gen5, up to 2 vCores.')
param databaseSku object = {
  name: 'GP_S_Gen5'
  tier: 'GeneralPurpose'
  family: 'Gen5'
  capacity: 2
}

@description('Minutes of inactivity before a serverless database pauses; -1 disables pausing. The KEDA scaler polls the database, so it rarely stays idle long enough to pause.')
param autoPauseDelayMinutes int = -1

@description('Tags applied to every resource.')
param tags object = {}

resource sqlServer 'Microsoft.Sql/servers@2023-08-01' = {
  name: sqlServerName
  location: location
  tags: tags
  properties: {
    minimalTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    administrators: {
      administratorType: 'ActiveDirectory'
      azureADOnlyAuthentication: true
      login: adminLogin
      sid: adminObjectId
      principalType: adminPrincipalType
      tenantId: subscription().tenantId
    }
  }
}

// 0.0.0.0 - 0.0.0.0 is the documented "Allow Azure services and resources to access this server"
// rule. Flex Consumption and Container Apps (without a VNet) have no fixed outbound addresses.
resource allowAzureServices 'Microsoft.Sql/servers/firewallRules@2023-08-01' = {
  parent: sqlServer
  name: 'AllowAllWindowsAzureIps'
  properties: {
    startIpAddress: '0.0.0.0'
    endIpAddress: '0.0.0.0'
  }
}

resource database 'Microsoft.Sql/servers/databases@2023-08-01' = {
  parent: sqlServer
  name: databaseName
  location: location
  tags: tags
  sku: databaseSku
  properties: {
    collation: 'SQL_Latin1_General_CP1_CI_AS'
    autoPauseDelay: autoPauseDelayMinutes
    requestedBackupStorageRedundancy: 'Local'
  }
}

output sqlServerName string = sqlServer.name
output sqlServerFqdn string = sqlServer.properties.fullyQualifiedDomainName
output databaseName string = database.name
