//! Tool trait, registry, JSON schemas and the core coding tools (read, write, edit, glob, grep, bash).
