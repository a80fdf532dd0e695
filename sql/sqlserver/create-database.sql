-- Creates the chokaq database for a local or CI SQL Server, set up as Azure SQL Database is:
-- READ_COMMITTED_SNAPSHOT ON (readers see the last committed row instead of waiting for writers'
-- locks) and ALLOW_SNAPSHOT_ISOLATION ON. Run it against master; running it again changes nothing.
-- docker compose runs it (service sqlserver-init), and so does `make test-mssql` (tests/live_mssql.py).
--
--   sqlcmd -S localhost,1433 -U sa -C -b -i sql/sqlserver/create-database.sql
IF DB_ID(N'chokaq') IS NULL
    CREATE DATABASE [chokaq];
GO
ALTER DATABASE [chokaq] SET READ_COMMITTED_SNAPSHOT ON WITH ROLLBACK IMMEDIATE;
GO
ALTER DATABASE [chokaq] SET ALLOW_SNAPSHOT_ISOLATION ON;
GO
