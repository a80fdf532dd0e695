// Azure Container Registry for the worker image, with AcrPull for the worker identity.
// The admin user stays disabled: the container app pulls with its managed identity.

@description('Azure region.')
param location string

@description('Registry name (5-50 letters and digits, globally unique).')
@minLength(5)
@maxLength(50)
param registryName string

@description('Object id of the identity that pulls images.')
param pullPrincipalId string

@description('Tags applied to every resource.')
param tags object = {}

var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' = {
  name: registryName
  location: location
  tags: tags
  sku: {
    name: 'Basic'
  }
  properties: {
    adminUserEnabled: false
    publicNetworkAccess: 'Enabled'
  }
}

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(registry.id, pullPrincipalId, acrPullRoleId)
  scope: registry
  properties: {
    principalId: pullPrincipalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
  }
}

output registryName string = registry.name
output loginServer string = registry.properties.loginServer
