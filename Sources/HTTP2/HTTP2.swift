// HTTP2 module: see ARCHITECTURE.md for its role.
