"""Framework-independent parts of the package: errors, the connection to the daemon, process sets."""
