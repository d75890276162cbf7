"""Hardware drivers: interfaces, step metadata, hardware types and their registry."""
