// Postgres module: see ARCHITECTURE.md for its role.
