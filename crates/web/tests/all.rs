//! Tests of the web panel's server: routes and JSON shapes, SSE replay and live updates, the
//! Team projection, access control.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests fail loudly by design.

mod suite;
