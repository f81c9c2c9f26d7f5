//! The runtime's one lock helper.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking its data as it is when an earlier holder panicked (a poisoned lock).
///
/// Every mutex of the runtime guards data that each holder leaves consistent before anything
/// that can panic (maps and sets updated in one call, counters, flags), and the runtime must
/// go on — settle, drain, shut down and park inboxes — after a panicking tool or task, so a
/// poisoned lock is not an error here.
pub(crate) fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
