// The doorbell queue (docs/functions.md): producers put one small message on it after an enqueue
// commits; the Function App's `wake` function is triggered by it and runs a short drain. The
// database stays the only job queue. Identity-based everywhere: no storage key exists.
//
// Roles: the Function App already holds Storage Queue Data Contributor on the account
// (storage-roles.bicep; the host needs it for its own queues, the trigger's poison queue and
// this queue's messages). Other producers get Storage Queue Data Message Sender on this queue only.

@description('Name of the existing storage account.')
param storageAccountName string

@description('Doorbell queue name (CHOKAQ_FUNCTIONS__DOORBELL_QUEUE).')
@minLength(3)
@maxLength(63)
param queueName string

@description('Object ids of producers outside the Function App that may ring (send messages only).')
param senderPrincipalIds array = []

var queueMessageSenderRoleId = 'c6a89b2d-59bc-44d0-9896-0f6e12d7b80a' // Storage Queue Data Message Sender

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource queue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: queueName
}

resource senders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [for principalId in senderPrincipalIds: {
  name: guid(queue.id, principalId, queueMessageSenderRoleId)
  scope: queue
  properties: {
    principalId: principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', queueMessageSenderRoleId)
  }
}]

output queueName string = queue.name
