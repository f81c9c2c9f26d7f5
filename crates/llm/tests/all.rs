//! The integration tests of `troupe-llm`: one binary, one module per feature (`suite/`).

// The whole binary is test code: its helper functions (not only `#[test]`s) may unwrap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
