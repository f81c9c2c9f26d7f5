/// A stable, machine-readable error code.
///
/// Every library error enum in Troupe implements this trait. Codes are `SCREAMING_SNAKE`
/// strings (for example `JOURNAL_LOCKED`) that never change meaning once published: they are
/// what tools return to the model as `{"code", "message"}` and what tests match on. Every code
/// is listed in [`STABLE_CODES`](crate::STABLE_CODES) (a test fails for one that is not).
pub trait ErrorCode {
    /// The stable code of this error, e.g. `"JOURNAL_POISONED"`.
    fn code(&self) -> &'static str;
}
