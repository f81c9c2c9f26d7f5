use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in epoch milliseconds.
///
/// Injected wherever an event or header is stamped, so tests can use [`FixedClock`].
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch (UTC).
    fn now_ms(&self) -> u64;
}

/// The real clock: `SystemTime::now()` in epoch milliseconds (0 if the system clock is set
/// before 1970).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A deterministic clock for tests: returns a fixed time (ms) until [`FixedClock::advance`]
/// or [`FixedClock::set`] changes it.
#[derive(Debug, Default)]
pub struct FixedClock {
    now_ms: AtomicU64,
}

impl FixedClock {
    /// A clock frozen at `now_ms` epoch milliseconds.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(now_ms),
        }
    }

    /// Moves the clock forward by `delta_ms` milliseconds (saturating).
    pub fn advance(&self, delta_ms: u64) {
        let _ = self
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(delta_ms))
            });
    }

    /// Sets the clock to `now_ms` epoch milliseconds.
    pub fn set(&self, now_ms: u64) {
        self.now_ms.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for FixedClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}
