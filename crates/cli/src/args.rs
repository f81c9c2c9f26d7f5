//! Command-line values shared by several commands: whole numbers and session ids.

use troupe_journal::{Journal, JournalError, ResolveError};
use troupe_protocol::SessionId;

use crate::exit::Failure;

/// A whole number from 0 to `max`, as a flag's value; out of range (however large) is
/// `{raw} {out_of_range}` — e.g. `is not in 0..=60000`. Otherwise as [`whole_number`].
pub(crate) fn whole_number_at_most(raw: &str, max: u64, out_of_range: &str) -> Result<u64, String> {
    match raw.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err(format!("{raw} {out_of_range}")),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => {
            Err(format!("{raw} {out_of_range}"))
        }
        Err(_) => whole_number(raw),
    }
}

/// A whole number of 0 or more, as a flag's value: a negative number is named as such (clap's
/// own parser would call it an unknown flag, or "invalid digit", and suggest `-- -1`).
pub(crate) fn whole_number(raw: &str) -> Result<u64, String> {
    if let Some(digits) = raw.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return Err(format!(
            "{raw} is negative: give a whole number of 0 or more"
        ));
    }
    raw.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => format!("{raw} is too large (at most {})", u64::MAX),
        _ => format!("{raw} is not a whole number"),
    })
}

/// The session `raw` names: its full id or a unique prefix of it ([`Journal::resolve`]). An
/// invalid or ambiguous id is bad input (exit 2, one line listing the candidates).
pub(crate) fn resolve_session(journal: &Journal, raw: &str) -> Result<SessionId, Failure> {
    journal.resolve(raw).map_err(|e| match e {
        ResolveError::InvalidId(e) => Failure::bad_input(e),
        ResolveError::Journal(e @ JournalError::Ambiguous { .. }) => Failure::bad_input(e),
        ResolveError::Journal(e) => e.into(),
    })
}
