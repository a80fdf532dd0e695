-- Creates contained database users for the chokaq managed identities and grants them the roles
-- the engine needs: read/write the chokaq tables and run `chokaq db upgrade` (DDL).
--
-- Run once after `az deployment group create`, connected to the chokaq database as the Entra admin.
-- The exact command is the deployment output `sqlGrantCommand`, e.g.:
--
--   sqlcmd -S tcp:<server>.database.windows.net,1433 -d chokaq \
--     --authentication-method ActiveDirectoryDefault \
--     -i infra/bicep/sql/grant-app-identity.sql \
--     -v FunctionAppIdentity=<function app name> WorkerIdentity=<worker identity name>
--
-- FunctionAppIdentity: the Function App's system-assigned identity (its name is the app name).
-- WorkerIdentity: the worker's user-assigned identity.
-- The script is idempotent: running it again changes nothing.

SET NOCOUNT ON;

IF NOT EXISTS (SELECT 1 FROM sys.database_principals WHERE name = N'$(FunctionAppIdentity)')
    CREATE USER [$(FunctionAppIdentity)] FROM EXTERNAL PROVIDER;
ALTER ROLE db_datareader ADD MEMBER [$(FunctionAppIdentity)];
ALTER ROLE db_datawriter ADD MEMBER [$(FunctionAppIdentity)];
ALTER ROLE db_ddladmin ADD MEMBER [$(FunctionAppIdentity)];
GO

IF NOT EXISTS (SELECT 1 FROM sys.database_principals WHERE name = N'$(WorkerIdentity)')
    CREATE USER [$(WorkerIdentity)] FROM EXTERNAL PROVIDER;
ALTER ROLE db_datareader ADD MEMBER [$(WorkerIdentity)];
ALTER ROLE db_datawriter ADD MEMBER [$(WorkerIdentity)];
ALTER ROLE db_ddladmin ADD MEMBER [$(WorkerIdentity)];
GO

-- Show the result.
SELECT p.name AS [user], r.name AS [role]
FROM sys.database_role_members AS m
JOIN sys.database_principals AS r ON r.principal_id = m.role_principal_id
JOIN sys.database_principals AS p ON p.principal_id = m.member_principal_id
WHERE p.name IN (N'$(FunctionAppIdentity)', N'$(WorkerIdentity)')
ORDER BY p.name, r.name;
GO
