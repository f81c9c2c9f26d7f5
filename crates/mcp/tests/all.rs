//! The integration tests of `troupe-mcp`: one test binary, one module per feature. The servers
//! are real: the test MCP server of `troupe-test-support`, over stdio.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod suite;
