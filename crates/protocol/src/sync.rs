//! The workspace's one lock helper (issue 12): every crate's `std::sync::Mutex` is locked
//! through [`lock`], and a condition variable is waited on through [`wait`] or
//! [`wait_timeout`].
//!
//! A lock whose earlier holder panicked is *poisoned*; both helpers take the data as it is
//! then. Every mutex of Troupe guards data its holders leave consistent before anything that
//! can panic (maps and sets changed in one call, counters, flags, byte buffers appended whole),
//! and the process must go on after a panicking tool or task — settle, drain, flush, shut down
//! — so a poisoned lock is not an error anywhere.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError, WaitTimeoutResult};
use std::time::Duration;

/// Locks `mutex`, taking its data as it is when an earlier holder panicked.
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` with `guard` (see [`Condvar::wait`]), taking the data as it is when an
/// earlier holder panicked.
pub fn wait<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    condvar.wait(guard).unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` with `guard` for at most `timeout` (see [`Condvar::wait_timeout`]),
/// taking the data as it is when an earlier holder panicked.
pub fn wait_timeout<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    timeout: Duration,
) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
    condvar
        .wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
}
