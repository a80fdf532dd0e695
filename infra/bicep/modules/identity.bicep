// User-assigned managed identity for the worker container app. It exists before the container
// app, so its AcrPull role and its SQL user can be in place before the first revision starts.

@description('Azure region.')
param location string

@description('Identity name. It is also the contained database user name in Azure SQL.')
param identityName string

@description('Tags applied to every resource.')
param tags object = {}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: identityName
  location: location
  tags: tags
}

output identityId string = identity.id
output identityName string = identity.name
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
