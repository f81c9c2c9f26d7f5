//! The integration tests of `troupe-tools`: one test binary, one module per feature.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod suite;
