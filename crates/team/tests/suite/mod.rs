//! Test suites. Case numbers (`cN`) refer to `spec/CASES.md`.

mod board;
mod fold;
mod generator;
mod invariants;
mod line;
mod prop_graph;
mod prop_ops;
mod roster_mailbox;
mod stall;
mod support;
