//! `troupe-team` integration tests: one binary, suites under `suite/`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod suite;
